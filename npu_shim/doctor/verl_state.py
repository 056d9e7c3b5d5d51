"""What verl looks like in this interpreter, and what npu_shim did to it (or would do).

Runs inside the doctor's probe (a fresh interpreter started with the caller's
environment, or a Ray task), after verl has been imported there. It imports
``verl.workers.engine`` and nothing heavier: no process group, no engine built,
nothing on an accelerator. When the shim is not active here it is not activated
either: the report then says what the shim would do, read from verl as imported.
The keys of :func:`collect` are documented in ``npu_shim.doctor``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
from typing import Any

import npu_shim
from npu_shim.catalogue import FIXES, apply_module, critic_fails_without, fix_names, watched_modules
from npu_shim.changes import ChangeSet
from npu_shim.doctor import bridge_state, mindspeed_state
from npu_shim.doctor.imports import package_folder
from npu_shim.doctor.routes import names_at_fault
from npu_shim.fixes import lm_engine_repatch, mindspeed_line_repatch, value_engine
from npu_shim.found import found
from npu_shim.layout import ENGINE_PACKAGE, VerlLayout, read_layout
from npu_shim.switches import switch
from npu_shim.verdicts import APPLIED, NOT_APPLICABLE, UNRECOGNISED, Outcome, is_ours

logger = logging.getLogger("npu_shim")

INACTIVE = "inactive"
WOULD_APPLY = "apply"
OK = "ok"
PROBLEM = "problem"
NOT_JUDGED = "not judged"  # no NPU seen: whether a Megatron critic's engine resolves on one is not judged
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


def _shim_state() -> dict[str, Any]:
    via = npu_shim.activated_via()
    hook = sys.modules.get("npu_shim.hook")
    failure = getattr(hook, "failure", None)
    state: dict[str, Any] = {
        "active": False,
        "activated_via": via,
        "disabled": switch("NPU_SHIM_DISABLE"),
        "hook_loaded": hook is not None,
        "failure": None if failure is None else _error(failure),
        "reason": None,
    }
    if via is None:
        state["reason"] = (
            "disabled by NPU_SHIM_DISABLE"
            if state["disabled"]
            else "not activated: no sitecustomize of npu_shim ran, and importing verl did not import npu_shim"
        )
    elif hook is None:
        # what stopped it, found rather than guessed: no wrapt here, or the error the hook's import raised
        no_wrapt = "wrapt" not in sys.modules and not found("wrapt")
        # recorded by npu_shim.first_import.install_hook
        error = getattr(sys.modules.get("npu_shim.first_import"), "hook_import_error", None)
        why = "wrapt is not installed here" if no_wrapt else error and f"npu_shim.hook failed to import: {error}"
        state["reason"] = f"the shim's import hook did not load{f' ({why})' if why else ''}; verl runs unpatched"
    elif failure is not None:
        module = getattr(hook, "failed_module", None) or "verl"
        state["reason"] = f"the shim failed while patching {module} and left it as it shipped ({state['failure']})"
    elif not hook.outcomes:
        state["reason"] = f"the shim's hook has not run on {ENGINE_PACKAGE}"
    else:
        state["active"] = True
    return state


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
        return "release/v0.7.1" if layout.verl_version.startswith("0.7") else "pre-#6135 main"
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
        changes = ChangeSet()
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


def _fixes(shim: dict[str, Any], import_errors: dict[str, str]) -> list[dict[str, Any]]:
    if shim["active"]:
        outcomes = {o.fix: o for o in sys.modules["npu_shim.hook"].outcomes}
        rows = []
        for fix in FIXES:
            outcome = outcomes.get(fix.name)
            if outcome is None:  # its module did not import, so the hook never ran on it
                outcome = Outcome(fix.name, NOT_APPLICABLE, _not_imported(fix.watches, import_errors))
            rows.append({"fix": outcome.fix, "verdict": outcome.verdict, "reason": outcome.reason, "would": None})
        return rows
    return [
        {"fix": name, "verdict": INACTIVE, "reason": f"{shim['reason']}; {reason}", "would": would}
        for name, (would, reason) in _would(import_errors).items()
    ]


def _unrecognised(fixes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fixes that found verl needing their change in code they do not know, and whether a critic then fails."""
    return [
        {"fix": row["fix"], "breaks_critic": critic_fails_without(row["fix"])}
        for row in fixes
        if UNRECOGNISED in (row["verdict"], row["would"])
    ]


# -- the registry --------------------------------------------------------------------------------


def _registry_rows(registry: Any) -> list[dict[str, Any]]:
    rows = []
    engines = getattr(registry, "_engines", None)
    if not isinstance(engines, dict):
        return rows
    for model_type, backends in engines.items():
        for backend, devices in backends.items():
            for key, engine_class in devices.items():
                device, vendor = (key[0], key[1] if len(key) > 1 else None) if isinstance(key, tuple) else (key, None)
                rows.append(
                    {
                        "model_type": str(model_type),
                        "backend": str(backend),
                        "device": str(device),
                        "vendor": None if vendor is None else str(vendor),
                        "class": _qualified(engine_class),
                        "origin": "shim" if is_ours(engine_class) else "upstream",
                        "patched": not is_ours(engine_class) and _patched(engine_class),
                    }
                )
    return sorted(rows, key=lambda row: (row["model_type"], row["backend"], row["device"], str(row["vendor"])))


def _patched(engine_class: Any) -> bool:
    """Whether the shim replaced a method of this upstream class (the LM engine's repatch placement)."""
    return any(is_ours(value) for value in getattr(engine_class, "__dict__", {}).values())


def _resolve(registry: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "value_model_megatron_resolves": False,
        "value_model_megatron_class": None,
        "value_model_megatron_error": None,
    }
    if registry is None:
        result["value_model_megatron_error"] = "verl has no EngineRegistry with get_engine_cls"
        return result
    try:
        engine_class = registry.get_engine_cls("value_model", "megatron")
    except AssertionError as error:
        result["value_model_megatron_error"] = str(error)
    except Exception as error:  # a verl we do not know: report, do not crash the doctor
        result["value_model_megatron_error"] = _error(error)
    else:
        result["value_model_megatron_resolves"] = True
        result["value_model_megatron_class"] = _qualified(engine_class)
    return result


# -- the whole report ----------------------------------------------------------------------------


def _torch_npu() -> dict[str, Any]:
    module = sys.modules.get("torch_npu")
    return {
        "loaded": module is not None,
        "importable": module is not None or found("torch_npu"),
        # A real torch_npu's release names the torch it was built for (2.6.0.post3); a stand-in's says so.
        "version": str(version) if (version := getattr(module, "__version__", None)) else None,
    }


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


def collect(verl_import_error: str | None = None) -> dict[str, Any]:
    """The doctor's report as a dict (the ``--json`` object); see the module docstring for its keys.

    ``verl_import_error``: how ``import verl`` failed where the probe first tried it, as a worker
    would (before the probe made npu_shim's report code importable): verl is not imported again.
    """
    report: dict[str, Any] = {
        "npu_shim_version": npu_shim.__version__,
        "status": OK,
        "exit_code": 0,
        "verl": {"importable": False, "installed": False, "version": None, "path": None, "error": None},
        "shim": None,
        "layout": {"id": None, "description": None},
        "fixes": [],
        "mindspeed": mindspeed_state.empty(),
        "mindspeed_installed": mindspeed_state.installed(),
        **mindspeed_state.NOT_TRIED,
        **mindspeed_state.dependencies(),
        "bridge": {"default": None, "import_error": None, "meaning": None},
        "torch_npu": None,
        "device": None,
        "engine_device": None,
        "registry": [],
        "value_model_megatron_resolves": False,
        "value_model_megatron_class": None,
        "value_model_megatron_error": None,
        "unrecognised": [],
    }
    # verl and its dependencies may print on import; stdout belongs to the report.
    with contextlib.redirect_stdout(sys.stderr):
        verl = None
        report["verl"]["error"] = verl_import_error
        if verl_import_error is None:
            try:
                verl = importlib.import_module("verl")
            except Exception as error:
                report["verl"]["error"] = _error(error)
        engine_package = None
        import_errors: dict[str, str] = {}
        if verl is not None:
            report["verl"].update(
                importable=True,
                installed=True,
                version=str(getattr(verl, "__version__", None)),
                path=package_folder(verl),
            )
            try:
                engine_package = importlib.import_module(ENGINE_PACKAGE)
            except Exception as error:
                report["verl"]["error"] = f"{ENGINE_PACKAGE} did not import: {_error(error)}"
            import_errors = _import_watched()
        report["device"] = None if verl is None else _device()
    report["shim"] = _shim_state()
    report["torch_npu"] = _torch_npu()

    if verl is None:
        installed = report["verl"]["installed"] = _verl_installed()
        why = _import_failure(report["verl"]["error"]) if installed else "verl is not installed"
        if installed:  # every worker that imports verl dies the same way
            report.update(status=PROBLEM, exit_code=1)
        else:
            report["status"] = NOT_APPLICABLE
        if report["shim"]["activated_via"] is not None:
            report["shim"]["reason"] = f"{why}: nothing to patch"
        report["value_model_megatron_error"] = why
        report["fixes"] = [
            {"fix": name, "verdict": NOT_APPLICABLE, "reason": why, "would": None} for name in fix_names()
        ]
        return report

    if engine_package is not None:
        layout = read_layout(engine_package)
        layout_id = _layout_id(layout)
        report["layout"] = {"id": layout_id, "description": LAYOUTS[layout_id]}
        report["fixes"] = _fixes(report["shim"], import_errors)
        report["unrecognised"] = _unrecognised(report["fixes"])
        report.update(mindspeed_state.mindspeed_state(layout))
        report["bridge"] = bridge_state.bridge_state()
        report["registry"] = _registry_rows(layout.registry)
        report.update(_resolve(layout.registry))
        report["engine_device"] = _engine_device(layout.registry, report["device"])
    else:
        report["value_model_megatron_error"] = report["verl"]["error"]
        report["engine_device"] = report["device"]

    _judge(report)
    return report


def _judge(report: dict[str, Any]) -> None:
    """The status, where verl imported: judged only where verl looks up NPU engines, but for a broken MindSpeed."""
    if report["mindspeed_import_error"] is not None:  # installed, unimportable: verl's MindSpeed patches all off
        report.update(status=PROBLEM, exit_code=1)
        return
    if report.get("transformer_engine_import_error") is not None:  # MA's stack without TENPU: no model builds
        report.update(status=PROBLEM, exit_code=1)
        return
    if report["engine_device"] != "npu":  # a build machine: say so, rather than "ok" for what was not seen
        report["status"] = NOT_JUDGED
        return
    breaks_critic = any(row["breaks_critic"] for row in report["unrecognised"])
    no_bridge = report["bridge"]["import_error"] is not None  # verl's default config builds no Megatron model
    if breaks_critic or no_bridge or not report["value_model_megatron_resolves"]:
        report.update(status=PROBLEM, exit_code=1)
