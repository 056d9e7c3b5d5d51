"""What verl looks like in this interpreter, and what npu_shim did to it (or would do).

Runs inside the doctor's probe (a fresh interpreter started with the caller's
environment, or a Ray task), after verl has been imported there. It imports
``verl.workers.engine`` and nothing heavier: no process group, no engine built,
nothing on an accelerator. When the shim is not active here it is not activated
either: the report then says what the shim would do, read from verl as imported.
:func:`collect` returns a :class:`~npu_shim.doctor.report.Report` (``npu_shim.doctor.report``).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

import npu_shim
from npu_shim.catalogue import FIXES, apply_module, critic_fails_without, fix_names, watched_modules
from npu_shim.doctor import bridge_state, mindspeed_state
from npu_shim.doctor.imports import found, package_folder
from npu_shim.doctor.report import (
    NOT_JUDGED,
    OK,
    PROBLEM,
    CriticLookup,
    Findings,
    FixRow,
    Layout,
    ProbeState,
    RegistryRow,
    Report,
    ShimState,
    TorchNpu,
    UnrecognisedFix,
    VerlFacts,
    from_json,
)
from npu_shim.doctor.routes import names_at_fault, pythonpath_entries
from npu_shim.fixes import lm_engine_repatch, mindspeed_line_repatch, value_engine
from npu_shim.fixes.value_engine import VerlLayout, read_layout
from npu_shim.patcher import APPLIED, ENGINE_PACKAGE, NOT_APPLICABLE, UNRECOGNISED, Outcome, Writer, is_ours
from npu_shim.recognition import installed_verl_version
from npu_shim.settings import names_of_disabled_fixes, switch

logger = logging.getLogger("npu_shim")

INACTIVE = "inactive"
WOULD_APPLY = "apply"
LAYOUTS = {
    "0.6/0.7": "0.6/0.7: no value engine, LM engine repatches in __init__",
    "pre-#6135 main": "pre-#6135 main (0.8.0.dev): no value engine, LM engine repatches in _init_device_mesh",
    "release/v0.7.1": "release/v0.7.1 branch (verl's v0.7.1 Ascend image): no value engine, "
    "LM engine repatches in _init_device_mesh (#5700) and forces use_flash_attn=True",
    "0.8.0": "0.8.0: verl's own MindSpeed value engine; _mindspeed_repatch predates #6674 (batch-invariant attention)",
    "native": "native (>= 0.9): verl's engine package has every engine change npu_shim carries",
    "no keyed registry": "no keyed registry (< 0.6): nothing to fix",
    "no mindspeed engine": "no MindSpeed engine: verl's MindSpeed engine module did not import",
    "unrecognised": "unrecognised: no value engine, and an LM engine npu_shim does not know",
}


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


# -- the shim in this process ---------------------------------------------------------------------


def _shim_state() -> ShimState:
    via = npu_shim.activated_via()
    hook = sys.modules.get("npu_shim.hook")
    failure = getattr(hook, "failure", None)
    failure_text = None if failure is None else _error(failure)
    disabled = switch("NPU_SHIM_DISABLE")
    reason = None
    if via is None:
        reason = (
            "disabled by NPU_SHIM_DISABLE"
            if disabled
            else "not activated: no sitecustomize of npu_shim ran, and importing verl did not import npu_shim"
        )
    elif hook is None:
        # what stopped it, found rather than guessed: no wrapt here, or the error the hook's import raised
        no_wrapt = "wrapt" not in sys.modules and not found("wrapt")
        # recorded by npu_shim.first_import.install_hook
        error = getattr(sys.modules.get("npu_shim.watcher"), "hook_import_error", None)
        why = "wrapt is not installed here" if no_wrapt else error and f"npu_shim.hook failed to import: {error}"
        reason = f"the shim's import hook did not load{f' ({why})' if why else ''}; verl runs unpatched"
    elif failure is not None:
        module = getattr(hook, "failed_module", None) or "verl"
        reason = f"the shim failed while patching {module} and left it as it shipped ({failure_text})"
    elif not hook.outcomes:
        reason = f"the shim's hook has not run on {ENGINE_PACKAGE}"
    named, known = names_of_disabled_fixes(), fix_names()
    return ShimState(
        active=reason is None,
        activated_via=via,
        disabled=disabled,
        hook_loaded=hook is not None,
        failure=failure_text,
        reason=reason,
        disabled_fixes=[name for name in known if name in named],
        unknown_fixes=sorted(named.difference(known)),
    )


# -- verl as shipped, and what the shim would do ----------------------------------------------------


def _layout_id(layout: VerlLayout) -> str:
    if layout.registry is None:
        return "no keyed registry"
    native_value_engine = layout.registered(**value_engine.KEY)
    if native_value_engine is not None and not is_ours(native_value_engine):
        repatch = mindspeed_line_repatch.REPATCH
        return "0.8.0" if "0.8.0" in repatch.releases(repatch.original(layout.mindspeed_impl)) else "native"
    lm_engine = getattr(layout.mindspeed_impl, lm_engine_repatch.CLASS_NAME, None)
    if lm_engine is None:
        return "no mindspeed engine"
    own_mesh_init = lm_engine.__dict__.get("_init_device_mesh")
    if own_mesh_init is not None and not is_ours(own_mesh_init):
        # both carry #5697 (the branch as its cherry-pick #5700); the version they report tells them apart
        return "release/v0.7.1" if installed_verl_version().startswith("0.7") else "pre-#6135 main"
    if own_mesh_init is not None or lm_engine_repatch.LM_INIT.releases(lm_engine_repatch.LM_INIT.original(lm_engine)):
        return "0.6/0.7"
    return "unrecognised"


def _not_imported(module_name: str, import_errors: dict[str, str]) -> str:
    """Why the fixes watching ``module_name`` did nothing: it did not import (and the error, if it raised)."""
    return f"{module_name} did not import ({import_errors.get(module_name, 'not imported')})"


def _would(import_errors: dict[str, str]) -> dict[str, tuple[str, str]]:
    """What each fix would do to this verl: a dry run of the fixes themselves, reverted at once.

    Only this diagnostic process sees verl patched, and only for the duration of the call.
    """
    would: dict[str, tuple[str, str]] = {}
    for module_name in watched_modules():
        module = sys.modules.get(module_name)
        names = [fix.name for fix in FIXES if fix.watches == module_name]
        if module is None:
            would.update(dict.fromkeys(names, (NOT_APPLICABLE, _not_imported(module_name, import_errors))))
            continue
        changes = Writer()
        try:
            outcomes = apply_module(module, changes)  # the hook's own application, undone at once
        except Exception as error:  # a verl the fixes cannot read: say so, do not crash the doctor
            why = f"the fixes failed on this verl ({_error(error)})"
            would.update(dict.fromkeys(names, (NOT_APPLICABLE, why)))
            continue
        finally:
            changes.revert()
        would.update({o.fix: (WOULD_APPLY if o.verdict == APPLIED else o.verdict, o.reason) for o in outcomes})
    return {name: would[name] for name in fix_names()}


def _fixes(shim: ShimState, import_errors: dict[str, str]) -> list[FixRow]:
    if shim.active:
        outcomes = {o.fix: o for o in sys.modules["npu_shim.hook"].outcomes}
        rows = []
        for fix in FIXES:
            outcome = outcomes.get(fix.name)
            if outcome is None:  # its module did not import, so the hook never ran on it
                outcome = Outcome(fix.name, NOT_APPLICABLE, _not_imported(fix.watches, import_errors))
            rows.append(FixRow(outcome.fix, outcome.verdict, outcome.reason))
        return rows
    return [
        FixRow(name, INACTIVE, f"{shim.reason}; {reason}", would)
        for name, (would, reason) in _would(import_errors).items()
    ]


def _unrecognised(fixes: list[FixRow]) -> list[UnrecognisedFix]:
    """The fixes that found verl needing their change in code they do not know, and whether a critic then fails."""
    return [
        UnrecognisedFix(row.fix, critic_fails_without(row.fix))
        for row in fixes
        if UNRECOGNISED in (row.verdict, row.would)
    ]


def _needed_but_off(shim: ShimState) -> list[UnrecognisedFix]:
    """The fixes turned off whose change this verl lacks, judged here (the hook never runs one: its judgement may be
    what a user turned it off for), and whether a Megatron critic then fails."""
    rows = []
    for fix in FIXES:
        module = sys.modules.get(fix.watches)
        if fix.name not in shim.disabled_fixes or module is None:
            continue
        try:
            missing = fix.judge(module).missing
        except Exception as error:
            logger.debug("%s's judgement failed: %s", fix.name, _error(error))
            continue
        if missing:
            rows.append(UnrecognisedFix(fix.name, critic_fails_without(fix.name)))
    return rows


# -- the registry --------------------------------------------------------------------------------


def _registry_rows(registry: Any) -> list[RegistryRow]:
    rows = []
    engines = getattr(registry, "_engines", None)
    if not isinstance(engines, dict):
        return rows
    for model_type, backends in engines.items():
        for backend, devices in backends.items():
            for key, engine_class in devices.items():
                device, vendor = (key[0], key[1] if len(key) > 1 else None) if isinstance(key, tuple) else (key, None)
                rows.append(
                    RegistryRow(
                        model_type=str(model_type),
                        backend=str(backend),
                        device=str(device),
                        vendor=None if vendor is None else str(vendor),
                        engine_class=_qualified(engine_class),
                        origin="shim" if is_ours(engine_class) else "upstream",
                        patched=not is_ours(engine_class) and _patched(engine_class),
                    )
                )
    return sorted(rows, key=lambda row: (row.model_type, row.backend, row.device, str(row.vendor)))


def _patched(engine_class: Any) -> bool:
    """Whether the shim replaced a method of this upstream class (the LM engine's repatch placement)."""
    return any(is_ours(value) for value in getattr(engine_class, "__dict__", {}).values())


# The probe's device_assumed: standard library, in probe.py, which imports this module (not the other way round).
Assume = Callable[[str | None], AbstractContextManager[Any]]


def _lookup(registry: Any, device: str | None, assumed_device: str | None, assume: Assume) -> CriticLookup:
    """``get_engine_cls("value_model", "megatron")`` here (for ``assumed_device``, where ``assume`` makes the registry
    look engines up for it): what a Megatron critic's engine resolves to, or why not."""
    if registry is None:
        return CriticLookup(device, assumed_device, error="verl has no EngineRegistry with get_engine_cls")
    try:
        with assume(assumed_device):
            engine_class = registry.get_engine_cls("value_model", "megatron")
    except AssertionError as error:
        return CriticLookup(device, assumed_device, error=str(error))
    except Exception as error:  # a verl we do not know: report, do not crash the doctor
        return CriticLookup(device, assumed_device, error=_error(error))
    return CriticLookup(device, assumed_device, resolves=True, engine_class=_qualified(engine_class))


# -- the whole report ----------------------------------------------------------------------------


def _torch_npu() -> TorchNpu:
    module = sys.modules.get("torch_npu")
    return TorchNpu(
        loaded=module is not None,
        importable=module is not None or found("torch_npu"),
        # A real torch_npu's release names the torch it was built for (2.6.0.post3); a stand-in's says so.
        version=str(version) if (version := getattr(module, "__version__", None)) else None,
    )


def _import_failure(error: str | None) -> str:
    """Why ``import verl`` failed here, and what that means for the processes that import it."""
    named = os.environ.get("VERL_USE_EXTERNAL_MODULES")
    if named and error and names_at_fault(named, error):
        return f"import verl fails: {error}: verl imports each name of VERL_USE_EXTERNAL_MODULES={named!r} as written"
    return (
        f"import verl fails: {error}: verl itself does not import here, so every worker that imports verl "
        "dies the same way, with the shim or without; npu_shim patches verl only once it imports"
    )


def _verl_installed() -> bool:
    """Whether this interpreter finds a verl package at all (its import may still fail)."""
    return found("verl")


def _device() -> str | None:
    try:
        from verl.utils.device import get_device_name

        return str(get_device_name())
    except Exception as error:
        logger.debug("verl.utils.device.get_device_name() failed: %s", _error(error))
        return None


def _engine_device(registry: Any, device: str | None) -> str | None:
    """``device``, or ``VERL_ENGINE_DEVICE`` when this verl's ``get_engine_cls`` reads it (0.9)."""
    override = os.environ.get("VERL_ENGINE_DEVICE")
    get_engine_cls = getattr(registry, "get_engine_cls", None)
    constants = getattr(getattr(get_engine_cls, "__func__", get_engine_cls), "__code__", None)
    if override and constants is not None and "VERL_ENGINE_DEVICE" in constants.co_consts:
        return override
    return device


def _import_watched() -> dict[str, str]:
    """Import the other modules the fixes watch, as verl's workers do (the hook judges them then); their errors."""
    errors = {}
    for module_name in watched_modules():
        if module_name != ENGINE_PACKAGE:
            try:
                importlib.import_module(module_name)
            except Exception as error:  # e.g. a verl older than the module, or no Megatron
                errors[module_name] = _error(error)
    return errors


def collect(
    verl_import_error: str | None = None, assumed_device: str | None = None, assume: Assume = nullcontext
) -> Report:
    """The doctor's report as read here: status, the critic's lookup and the findings (no probe, no routes).

    ``verl_import_error``: how ``import verl`` failed where the probe first tried it, as a worker
    would (before the probe made npu_shim's report code importable): verl is not imported again.
    ``assumed_device``: judge as where verl sees that device (``doctor --device npu``), whatever it sees here;
    ``assume(assumed_device)`` makes verl's registry look engines up for it (the probe's ``device_assumed``).
    """
    # First, as before anything below imports more of Megatron: looking for MegatronAdaptor is what the probe's
    # MegatronOrder notes, where nothing looked for it before.
    stack = mindspeed_state.stack()
    # verl and its dependencies may print on import; stdout belongs to the report.
    with contextlib.redirect_stdout(sys.stderr):
        verl, error = None, verl_import_error
        if verl_import_error is None:
            try:
                verl = importlib.import_module("verl")
            except Exception as raised:
                error = _error(raised)
        engine_package = None
        import_errors: dict[str, str] = {}
        if verl is not None:
            try:
                engine_package = importlib.import_module(ENGINE_PACKAGE)
            except Exception as raised:
                error = f"{ENGINE_PACKAGE} did not import: {_error(raised)}"
            import_errors = _import_watched()
        device = None if verl is None else _device()
    shim, torch_npu = _shim_state(), _torch_npu()

    if verl is None:
        installed = _verl_installed()
        why = _import_failure(error) if installed else "verl is not installed"
        if shim.activated_via is not None:
            shim = replace(shim, reason=f"{why}: nothing to patch")
        fixes = [FixRow(name, NOT_APPLICABLE, why) for name in fix_names()]
        findings = Findings(VerlFacts(installed=installed, error=error), shim, torch_npu, stack, fixes)
        # every worker that imports an installed verl dies the same way
        lookup = CriticLookup(assumed_device=assumed_device, error=why)
        return Report(PROBLEM if installed else NOT_APPLICABLE, lookup=lookup, findings=findings)

    facts = VerlFacts(True, True, str(getattr(verl, "__version__", None)), package_folder(verl), error)
    findings = Findings(facts, shim, torch_npu, stack, engine_device=assumed_device or device)
    lookup = CriticLookup(device, assumed_device, error=error)
    if engine_package is not None:
        layout = read_layout(engine_package)
        layout_id = _layout_id(layout)
        fixes = _fixes(shim, import_errors)
        offer, stack = mindspeed_state.mindspeed_state(layout, stack)
        findings = replace(
            findings,
            stack=stack,
            fixes=fixes,
            layout=Layout(layout_id, LAYOUTS[layout_id]),
            unrecognised=_unrecognised(fixes),
            mindspeed=offer,
            bridge=bridge_state.bridge_state(),
            engine_device=_engine_device(layout.registry, assumed_device or device),
            registry=_registry_rows(layout.registry),
            needed_but_off=_needed_but_off(shim),
        )
        lookup = _lookup(layout.registry, device, assumed_device, assume)
    return Report(_judge(findings, lookup), lookup=lookup, findings=findings)


def _judge(findings: Findings, lookup: CriticLookup) -> str:
    """The status, where verl imported: judged only where verl looks up NPU engines, but for a broken MindSpeed."""
    if findings.stack.mindspeed_import_error is not None:  # installed, unimportable: verl's MindSpeed patches all off
        return PROBLEM
    if findings.stack.transformer_engine_import_error is not None:  # MA's stack without TENPU: no model builds
        return PROBLEM
    if findings.engine_device != "npu":  # a build machine: say so, rather than "ok" for what was not seen
        return NOT_JUDGED
    breaks_critic = any(row.breaks_critic for row in [*findings.unrecognised, *findings.needed_but_off])
    no_bridge = findings.bridge.import_error is not None  # verl's default config builds no Megatron model
    if breaks_critic or no_bridge or not lookup.resolves:
        return PROBLEM
    return OK


def with_probe(report: Report, start: dict[str, Any], megatron_at_adaptor: list[str] | None) -> Report:
    """``report`` with what the probe read of start-up (``start``, its standard-library ``probe`` object) and of
    MegatronAdaptor's order (the Megatron modules imported when ``megatron_adaptor`` was first looked for)."""
    probe = from_json(ProbeState, start)
    entries = pythonpath_entries(probe.environment.get("PYTHONPATH"))
    return replace(
        report,
        probe=replace(probe, pythonpath_entries=entries),
        megatron_adaptor=mindspeed_state.adaptor_order(probe.activated_at_start, megatron_at_adaptor),
    )
