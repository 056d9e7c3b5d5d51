"""What verl looks like in the probed interpreter, and what npu_shim did to it (or would do): the report's findings.

Runs inside the probe, after verl was imported there. It imports ``verl.workers.engine`` and the modules the fixes
watch, nothing heavier (no process group, no engine, nothing on an accelerator), and never activates the shim: where
it is inactive, the fixes are dry-run and reverted at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import npu_shim
from npu_shim.catalogue import FIXES, apply_module, critic_fails_without, declared_functions
from npu_shim.doctor import bridge_state, mindspeed_state
from npu_shim.doctor.bridge_state import error_text, found, import_or_failure
from npu_shim.doctor.report import (
    NOT_JUDGED,
    OK,
    PROBLEM,
    FixGap,
    FixRow,
    Layout,
    ProbeState,
    RegistryRow,
    Report,
    ShimState,
    TorchNpu,
    VerlFacts,
    read,
)
from npu_shim.doctor.routes import names_at_fault, pythonpath_entries
from npu_shim.fixes import npu_smi_card
from npu_shim.fixes.value_engine import read_layout
from npu_shim.patcher import (
    ALREADY_APPLIED,
    APPLIED,
    ENGINE_PACKAGE,
    MISSING,
    NATIVE,
    NOT_APPLICABLE,
    UNRECOGNISED,
    Outcome,
    Writer,
    is_ours,
)
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


def _shim_state() -> ShimState:
    via = npu_shim.activated_via()
    hook = sys.modules.get("npu_shim.hook")
    failure = getattr(hook, "failure", None)
    failure_text = None if failure is None else error_text(failure)
    disabled = switch("NPU_SHIM_DISABLE")
    reason = None
    if via is None and disabled:
        reason = "disabled by NPU_SHIM_DISABLE"
    elif via is None:
        reason = "not activated: no sitecustomize of npu_shim ran, and importing verl did not import npu_shim"
    elif hook is None:  # what stopped it, found rather than guessed: no wrapt, or the error the hook's import raised
        no_wrapt = "wrapt" not in sys.modules and not found("wrapt")
        error = getattr(sys.modules.get("npu_shim.watcher"), "hook_import_error", None)
        why = "wrapt is not installed here" if no_wrapt else error and f"npu_shim.hook failed to import: {error}"
        reason = f"the shim's import hook did not load{f' ({why})' if why else ''}; verl runs unpatched"
    elif failure is not None:
        module = getattr(hook, "failed_module", None) or "verl"
        reason = f"the shim failed while patching {module} and left it as it shipped ({failure_text})"
    elif not hook.outcomes:
        reason = f"the shim's hook has not run on {ENGINE_PACKAGE}"
    named, known = names_of_disabled_fixes(), [fix.name for fix in FIXES]
    off, unknown = [name for name in known if name in named], sorted(named.difference(known))
    return ShimState(reason is None, via, disabled, hook is not None, failure_text, reason, off, unknown)


def _fixes(shim: ShimState, import_errors: dict[str, str]) -> list[FixRow]:
    """Each fix's verdict as the hook recorded it; where the shim is inactive, what it would be: the hook's own
    application, reverted at once (only this process sees verl patched, and only briefly)."""
    outcomes = {o.fix: o for o in sys.modules["npu_shim.hook"].outcomes} if shim.active else {}
    for name in [] if shim.active else dict.fromkeys(fix.watches for fix in FIXES):
        module, changes = sys.modules.get(name), Writer()
        try:
            outcomes.update({o.fix: o for o in apply_module(module, changes)} if module is not None else {})
        except Exception as error:  # a verl the fixes cannot read: say so, do not crash the doctor
            why = f"the fixes failed on this verl ({error_text(error)})"
            outcomes.update({fix.name: Outcome(fix.name, NOT_APPLICABLE, why) for fix in FIXES if fix.watches == name})
        finally:
            changes.revert()
    rows = []
    for fix in FIXES:  # a fix without an outcome: its module did not import, so the hook never ran on it
        why = f"{fix.watches} did not import ({import_errors.get(fix.watches, 'not imported')})"
        outcome = outcomes.get(fix.name) or Outcome(fix.name, NOT_APPLICABLE, why)
        would = WOULD_APPLY if outcome.verdict == APPLIED else outcome.verdict
        row = FixRow(fix.name, outcome.verdict, outcome.reason)
        rows.append(row if shim.active else FixRow(fix.name, INACTIVE, f"{shim.reason}; {outcome.reason}", would))
    return rows


def _judged_off(shim: ShimState) -> dict[str, str]:
    """The verdicts of the fixes turned off, judged here: the hook never runs one (its judgement may be what a user
    turned it off for)."""
    judged = {}
    for fix in FIXES:
        module = sys.modules.get(fix.watches)
        if fix.name in shim.disabled_fixes and module is not None:
            try:
                judged[fix.name] = fix.judge(module).verdict
            except Exception as error:
                logger.debug("%s's judgement failed: %s", fix.name, error_text(error))
    return judged


def _layout_id(found_by_fix: dict[str, str], registry: Any) -> str:
    """verl's engine package as the engine fixes found it (``MISSING``: verl lacks the change)."""
    lm_engine = found_by_fix.get("lm_engine_repatch")
    if registry is None:
        return "no keyed registry"
    if found_by_fix.get("value_engine") == NATIVE:  # 0.8.0 and later: the repatch's code tells 0.8.0 apart
        repatch = next(known for known in declared_functions() if known.fix == "mindspeed_line_repatch")
        original = repatch.original(repatch.owner()) if repatch.owner() is not None else None
        return "0.8.0" if original is not None and "0.8.0" in (repatch.releases(original) or []) else "native"
    if lm_engine == NATIVE:  # both carry #5697 (the branch as its cherry-pick #5700): their versions tell them apart
        return "release/v0.7.1" if installed_verl_version().startswith("0.7") else "pre-#6135 main"
    return {UNRECOGNISED: "unrecognised", MISSING: "0.6/0.7"}.get(lm_engine, "no mindspeed engine")


def _registry_rows(registry: Any) -> list[RegistryRow]:
    rows = []
    engines = getattr(registry, "_engines", None)
    for model_type, backends in engines.items() if isinstance(engines, dict) else ():
        for backend, devices in backends.items():
            for key, engine_class in devices.items():
                device, *vendor = key if isinstance(key, tuple) else (key,)  # 0.9: (device, vendor)
                ours = is_ours(engine_class)
                # patched: the shim replaced a method of this upstream class (the LM engine's repatch placement)
                patched = not ours and any(is_ours(value) for value in getattr(engine_class, "__dict__", {}).values())
                vendor_name = str(vendor[0]) if vendor else None
                row = RegistryRow(str(model_type), str(backend), str(device), vendor_name, _qualified(engine_class))
                rows.append(replace(row, origin="shim" if ours else "upstream", patched=patched))
    return sorted(rows, key=lambda row: (row.model_type, row.backend, row.device, str(row.vendor)))


# The probe's device_assumed (standard library, in probe.py, which imports this module): look engines up for a device.
Assume = Callable[[str | None], AbstractContextManager[Any]]


def _lookup(registry: Any, assumed_device: str | None, assume: Assume) -> tuple[bool, str | None, str | None]:
    """``get_engine_cls("value_model", "megatron")`` for ``assumed_device``: resolves, to which class, or why not."""
    if registry is None:
        return False, None, "verl has no EngineRegistry with get_engine_cls"
    try:
        with assume(assumed_device):
            engine_class = registry.get_engine_cls("value_model", "megatron")
    except AssertionError as error:
        return False, None, str(error)
    except Exception as error:  # a verl we do not know: report, do not crash the doctor
        return False, None, error_text(error)
    return True, _qualified(engine_class), None


def _torch_npu() -> TorchNpu:
    module = sys.modules.get("torch_npu")
    # A real torch_npu's release names the torch it was built for (2.6.0.post3); a stand-in's says so.
    version = str(version) if (version := getattr(module, "__version__", None)) else None
    return TorchNpu(module is not None, module is not None or found("torch_npu"), version)


def _import_failure(error: str | None) -> str:
    named = os.environ.get("VERL_USE_EXTERNAL_MODULES")
    if named and error and names_at_fault(named, error):
        return f"import verl fails: {error}: verl imports each name of VERL_USE_EXTERNAL_MODULES={named!r} as written"
    return (
        f"import verl fails: {error}: verl itself does not import here, so every worker that imports verl "
        "dies the same way, with the shim or without; npu_shim patches verl only once it imports"
    )


def collect(verl_import_error: str | None, assumed_device: str | None, assume: Assume) -> Report:
    """The report as read here, without the probe and the routes. ``verl_import_error``: how ``import verl`` failed
    where the probe first tried it, as a worker would (verl is not imported again). ``assumed_device``: judge as
    where verl sees that device (``doctor --device npu``); ``assume`` makes verl's registry look engines up for it."""
    # First, before anything below imports more of Megatron: the probe's MegatronOrder notes this look-up.
    report = mindspeed_state.stack()
    verl = None if verl_import_error else sys.modules.get("verl")
    error, engine_package, import_errors, device = verl_import_error, None, {}, None
    if verl is not None:  # what the fixes watch, as verl's workers import it (the hook judges each module then)
        watched = dict.fromkeys([ENGINE_PACKAGE, *(fix.watches for fix in FIXES)])
        imported = {module: import_or_failure(module) for module in watched}
        engine_package, failure = imported[ENGINE_PACKAGE]
        error = f"{ENGINE_PACKAGE} did not import: {failure.error}" if failure else None
        # a module may fail where the engine package imports: a verl older than it, or no Megatron
        import_errors = {module: failed.error for module, (_, failed) in imported.items() if failed}
        try:
            with contextlib.redirect_stdout(sys.stderr):  # verl may print; stdout carries the report
                from verl.utils.device import get_device_name

                device = str(get_device_name())
        except Exception as raised:
            logger.debug("verl.utils.device.get_device_name() failed: %s", error_text(raised))
    shim = _shim_state()
    report = replace(report, shim=shim, torch_npu=_torch_npu(), assumed_device=assumed_device)

    if verl is None:
        installed = found("verl")
        why = _import_failure(error) if installed else "verl is not installed"
        if shim.activated_via is not None:
            report = replace(report, shim=replace(shim, reason=f"{why}: nothing to patch"))
        return replace(
            report,
            status=PROBLEM if installed else NOT_APPLICABLE,  # every worker that imports an installed verl dies so
            verl=VerlFacts(installed=installed, error=error),
            fixes=[FixRow(fix.name, NOT_APPLICABLE, why) for fix in FIXES],
            value_model_megatron_error=why,
        )

    facts = VerlFacts(True, True, str(getattr(verl, "__version__", None)), mindspeed_state.package_folder(verl), error)
    # value_model_megatron_error: the engine package's, or overwritten by the lookup
    report = replace(report, verl=facts, device=device, engine_device=assumed_device or device)
    report = replace(report, value_model_megatron_error=error)
    if engine_package is not None:
        layout = read_layout(engine_package)
        fixes, judged_off = _fixes(shim, import_errors), _judged_off(shim)
        verdicts = {row.fix: row.would or row.verdict for row in fixes}
        lacks = {fix for fix, verdict in verdicts.items() if verdict in (APPLIED, ALREADY_APPLIED, WOULD_APPLY)}
        on_npu = "npu" in (device, assumed_device)
        rollout_ipc = _rollout_ipc() if on_npu and npu_smi_card.NAME in lacks else None
        layout_id = _layout_id({**verdicts, **dict.fromkeys(lacks, MISSING), **judged_off}, layout.registry)
        resolves, engine_class, lookup_error = _lookup(layout.registry, assumed_device, assume)
        # VERL_ENGINE_DEVICE where this verl's get_engine_cls reads it (0.9)
        get_engine_cls = getattr(layout.registry, "get_engine_cls", None)
        code = getattr(getattr(get_engine_cls, "__func__", get_engine_cls), "__code__", None)
        reads_it = code is not None and "VERL_ENGINE_DEVICE" in code.co_consts
        gaps = [row.fix for row in fixes if UNRECOGNISED in (row.verdict, row.would)]
        report = replace(
            mindspeed_state.with_mindspeed(report, layout),
            fixes=fixes,
            layout=Layout(layout_id, LAYOUTS[layout_id]),
            unrecognised=[FixGap(fix, critic_fails_without(fix)) for fix in gaps],
            needed_but_off=[FixGap(fix, critic_fails_without(fix)) for fix, v in judged_off.items() if v == MISSING],
            bridge=bridge_state.bridge_state(),
            engine_device=(reads_it and os.environ.get("VERL_ENGINE_DEVICE")) or assumed_device or device,
            registry=_registry_rows(layout.registry),
            value_model_megatron_resolves=resolves,
            value_model_megatron_class=engine_class,
            value_model_megatron_error=lookup_error,
            rollout_ipc=rollout_ipc,
        )
    return replace(report, status=_judge(report))


def _rollout_ipc() -> str:
    """The vLLM rollout's IPC decision, as the shim makes it in this process (``npu-smi`` asked once), and whence."""
    decision = npu_smi_card.decision()
    return f"{'IPC' if decision.ipc else 'shared memory (IPC off)'}: {decision.why}"


def _judge(report: Report) -> str:
    """The status, where verl imported: judged only where verl looks up NPU engines, but for a broken MindSpeed."""
    # installed, unimportable: verl's MindSpeed patches all off; MegatronAdaptor's stack without TENPU: no model builds
    if report.mindspeed_import_error is not None or report.transformer_engine_import_error is not None:
        return PROBLEM
    if report.engine_device != "npu":  # a build machine: say so, rather than "ok" for what was not seen
        return NOT_JUDGED
    breaks_critic = any(row.breaks_critic for row in [*report.unrecognised, *report.needed_but_off])
    no_bridge = report.bridge.import_error is not None  # verl's default config builds no Megatron model
    return PROBLEM if breaks_critic or no_bridge or not report.value_model_megatron_resolves else OK


def with_probe(report: Report, start: dict[str, Any], megatron_at_adaptor: list[str] | None) -> Report:
    """``report`` with what ``probe.py`` read of start-up (``start``) and of MegatronAdaptor's order."""
    probe = read(ProbeState, start)
    return replace(
        report,
        probe=replace(probe, pythonpath_entries=pythonpath_entries(probe.environment.get("PYTHONPATH"))),
        megatron_adaptor=mindspeed_state.adaptor_order(probe.activated_at_start, megatron_at_adaptor),
    )
