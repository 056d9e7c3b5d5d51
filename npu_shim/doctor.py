"""``python -m npu_shim doctor``: what this interpreter's verl looks like, and what npu_shim did to it.

It imports ``verl.workers.engine`` (a few seconds) and nothing heavier: no
process group is created, no engine is built, nothing runs on an accelerator.
When the shim is not active in this process (``NPU_SHIM_DISABLE=1``, or its
hook could not load) it is not activated here either: the report then says
what the shim would do, read from verl as it was imported.

Exit status: 1 when verl's engine registry looks up ``npu`` and ``(value_model, megatron)`` does not
resolve to an engine class (a Megatron critic would fail), else 0, including
when verl is not installed at all.

``--json`` prints one object with these keys (stable; new keys may be added):

- ``npu_shim_version`` (str)
- ``status``: ``"ok"``, ``"problem"`` (the exit-1 case) or ``"not applicable"`` (no verl)
- ``exit_code`` (int): the doctor's exit status
- ``verl``: ``{"importable": bool, "version": str|None, "path": str|None, "error": str|None}``;
  ``error`` says why verl (or ``verl.workers.engine``) did not import
- ``shim``: ``{"active": bool, "activated_via": "sitecustomize"|"import"|None,
  "disabled": bool, "hook_loaded": bool, "failure": str|None, "reason": str|None}``;
  ``reason`` says why the shim is not active, or did not apply
- ``propagation``: ``{"children_inherit": bool, "via": str|None, "shadowed_by": str|None,
  "at_process_start": bool|None}``: whether this process's environment makes
  child interpreters (Ray workers) activate the shim (``via``: the ``PYTHONPATH``
  entry that does it; ``shadowed_by``: a foreign ``sitecustomize.py`` found first;
  False whenever ``NPU_SHIM_DISABLE`` is set, since children inherit that too), and
  whether it did so in the environment this process started with (None when
  unknown; ``import npu_shim`` adds the bootstrap directory itself)
- ``layout``: ``{"id": str|None, "description": str|None}``; ids: ``"0.6/0.7"``,
  ``"pre-#6135 main"``, ``"native"``, ``"no keyed registry"``, ``"no mindspeed engine"``,
  ``"unrecognised"``; it describes verl as shipped, before any patch of the shim
- ``fixes``: list of ``{"fix": str, "verdict": str, "reason": str, "would": str|None}``;
  ``verdict`` is one of ``"applied"``, ``"already applied"``, ``"native"``,
  ``"not applicable"``, ``"inactive"``; ``would`` (for ``"inactive"`` only) is
  what the shim would do here: ``"apply"``, ``"native"`` or ``"not applicable"``
- ``mindspeed``: ``{"repatch_importable": bool, "simulated": bool}``
- ``torch_npu``: ``{"loaded": bool, "importable": bool, "simulated": bool|None}``
  (``simulated`` is None when torch_npu is not loaded)
- ``device`` (str|None): ``verl.utils.device.get_device_name()``
- ``engine_device`` (str|None): the device the engine registry looks up: ``device``, unless this
  verl honours ``VERL_ENGINE_DEVICE`` (0.9) and it is set
- ``registry``: list of ``{"model_type", "backend", "device", "vendor", "class", "origin", "patched"}``;
  ``vendor`` is None unless verl keys engines by ``(device, vendor)`` (0.9);
  ``class`` is ``module.qualname``; ``origin`` is ``"shim"`` (a class npu_shim added) or
  ``"upstream"``; ``patched`` is True for an upstream class the shim changed a method of
- ``value_model_megatron_resolves`` (bool), ``value_model_megatron_class`` (str|None),
  ``value_model_megatron_error`` (str|None): ``EngineRegistry.get_engine_cls("value_model", "megatron")``
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import logging
import os
import sys
from typing import Any

import npu_shim
from npu_shim import _chain
from npu_shim.changes import ChangeSet
from npu_shim.fixes import (
    APPLIED,
    NOT_APPLICABLE,
    Outcome,
    apply_all,
    is_ours,
    lm_engine_repatch,
    shared_repatch,
    value_engine,
)
from npu_shim.layout import ENGINE_PACKAGE, MINDSPEED_IMPL, VerlLayout, read_layout

logger = logging.getLogger("npu_shim")

INACTIVE = "inactive"
WOULD_APPLY = "apply"
OK = "ok"
PROBLEM = "problem"
FIX_NAMES = (shared_repatch.NAME, value_engine.NAME, lm_engine_repatch.NAME)
LAYOUTS = {
    "0.6/0.7": "0.6/0.7: no value engine, LM engine repatches in __init__",
    "pre-#6135 main": "pre-#6135 main: no value engine, LM engine repatches in _init_device_mesh",
    "native": "native (>= 0.8): verl registers its own MindSpeed value engine",
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
        "disabled": npu_shim.switch("NPU_SHIM_DISABLE"),
        "hook_loaded": hook is not None,
        "failure": None if failure is None else _error(failure),
        "reason": None,
    }
    if via is None:
        state["reason"] = (
            "disabled by NPU_SHIM_DISABLE" if state["disabled"] else "the shim was not activated in this process"
        )
    elif hook is None:
        state["reason"] = "the shim's import hook did not load (is wrapt installed?); verl runs unpatched"
    elif failure is not None:
        state["reason"] = f"the shim failed while patching and left verl unchanged ({state['failure']})"
    elif not hook.outcomes:
        state["reason"] = f"the shim's hook has not run on {ENGINE_PACKAGE}"
    else:
        state["active"] = True
    return state


def _initial_pythonpath() -> str | None:
    """PYTHONPATH as this process started with it (Linux), before ``import npu_shim`` propagated itself."""
    try:
        with open("/proc/self/environ", "rb") as file:
            raw = file.read()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(b"PYTHONPATH="):
            return os.fsdecode(item[len(b"PYTHONPATH=") :])
    return ""


def _propagation_of(pythonpath: str) -> tuple[str | None, str | None]:
    """(entry whose sitecustomize is npu_shim's, first foreign sitecustomize found before it)."""
    bootstrap = os.path.normcase(os.path.abspath(npu_shim.bootstrap_dir()))
    for entry in pythonpath.split(os.pathsep):
        if not entry:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.normcase(os.path.abspath(entry)) == bootstrap or _chain.is_npu_shim_bootstrap(candidate):
            return entry, None
        if os.path.isfile(candidate):  # Python runs the first sitecustomize only; ours would never start
            return None, candidate
    return None, None


def _propagation() -> dict[str, Any]:
    via, shadowed_by = _propagation_of(os.environ.get("PYTHONPATH", ""))
    initial = _initial_pythonpath()
    return {
        "children_inherit": via is not None and not npu_shim.switch("NPU_SHIM_DISABLE"),
        "via": via,
        "shadowed_by": shadowed_by,
        "at_process_start": None if initial is None else _propagation_of(initial)[0] is not None,
    }


# -- verl as shipped, and what the shim would do ----------------------------------------------------


def _layout_id(layout: VerlLayout) -> str:
    if layout.registry is None:
        return "no keyed registry"
    native_value_engine = layout.registered(**value_engine.KEY)
    if native_value_engine is not None and not is_ours(native_value_engine):
        return "native"
    lm_engine = getattr(layout.mindspeed_impl, lm_engine_repatch.CLASS_NAME, None)
    if lm_engine is None:
        return "no mindspeed engine"
    own_mesh_init = lm_engine.__dict__.get("_init_device_mesh")
    if own_mesh_init is not None and not is_ours(own_mesh_init):
        return "pre-#6135 main"
    if own_mesh_init is not None or lm_engine_repatch.known_release(lm_engine.__dict__.get("__init__")):
        return "0.6/0.7"
    return "unrecognised"


def _would(layout: VerlLayout) -> dict[str, tuple[str, str]]:
    """What each fix would do to this verl: a dry run of the fixes themselves, reverted at once.

    Only this diagnostic process sees verl patched, and only for the duration of the call.
    """
    changes = ChangeSet()
    try:
        outcomes = apply_all(layout, changes)
    except Exception as error:  # a verl the fixes cannot read: say so, do not crash the doctor
        return dict.fromkeys(FIX_NAMES, (NOT_APPLICABLE, f"the fixes failed on this verl ({_error(error)})"))
    finally:
        changes.revert()
    return {o.fix: (WOULD_APPLY if o.verdict == APPLIED else o.verdict, o.reason) for o in outcomes}


def _fixes(layout: VerlLayout, shim: dict[str, Any]) -> list[dict[str, Any]]:
    if shim["active"]:
        outcomes: list[Outcome] = list(sys.modules["npu_shim.hook"].outcomes)
        return [{"fix": o.fix, "verdict": o.verdict, "reason": o.reason, "would": None} for o in outcomes]
    return [
        {"fix": name, "verdict": INACTIVE, "reason": f"{shim['reason']}; {reason}", "would": would}
        for name, (would, reason) in _would(layout).items()
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
    try:
        importable = module is not None or importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        importable = False
    return {
        "loaded": module is not None,
        "importable": importable,
        "simulated": None if module is None else bool(getattr(module, "SIMULATED", False)),
    }


def _mindspeed() -> dict[str, Any]:
    # The `repatch` verl's own module bound: importing mindspeed here could patch Megatron out of order.
    repatch = getattr(sys.modules.get(MINDSPEED_IMPL), "repatch", None)
    adaptor = sys.modules.get("mindspeed.megatron_adaptor")
    return {"repatch_importable": repatch is not None, "simulated": bool(getattr(adaptor, "SIMULATED", False))}


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


def collect() -> dict[str, Any]:
    """The doctor's report as a dict (the ``--json`` object); see the module docstring for its keys."""
    report: dict[str, Any] = {
        "npu_shim_version": npu_shim.__version__,
        "status": OK,
        "exit_code": 0,
        "verl": {"importable": False, "version": None, "path": None, "error": None},
        "shim": None,
        "propagation": _propagation(),
        "layout": {"id": None, "description": None},
        "fixes": [],
        "mindspeed": {"repatch_importable": False, "simulated": False},
        "torch_npu": None,
        "device": None,
        "engine_device": None,
        "registry": [],
        "value_model_megatron_resolves": False,
        "value_model_megatron_class": None,
        "value_model_megatron_error": None,
    }
    # verl and its dependencies may print on import; stdout belongs to the report.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            verl = importlib.import_module("verl")
        except Exception as error:
            verl = None
            report["verl"]["error"] = _error(error)
        engine_package = None
        if verl is not None:
            report["verl"].update(
                importable=True,
                version=str(getattr(verl, "__version__", None)),
                path=os.path.dirname(os.path.abspath(getattr(verl, "__file__", None) or "")) or None,
            )
            try:
                engine_package = importlib.import_module(ENGINE_PACKAGE)
            except Exception as error:
                report["verl"]["error"] = f"{ENGINE_PACKAGE} did not import: {_error(error)}"
        report["device"] = None if verl is None else _device()
    report["shim"] = _shim_state()
    report["torch_npu"] = _torch_npu()

    if verl is None:
        report["status"] = NOT_APPLICABLE
        if report["shim"]["activated_via"] is not None:
            report["shim"]["reason"] = "verl is not importable: nothing to patch"
        report["value_model_megatron_error"] = "verl is not importable"
        report["fixes"] = [
            {"fix": name, "verdict": NOT_APPLICABLE, "reason": "verl is not importable", "would": None}
            for name in FIX_NAMES
        ]
        return report

    if engine_package is not None:
        layout = read_layout(engine_package)
        layout_id = _layout_id(layout)
        report["layout"] = {"id": layout_id, "description": LAYOUTS[layout_id]}
        report["fixes"] = _fixes(layout, report["shim"])
        report["mindspeed"] = _mindspeed()
        report["registry"] = _registry_rows(layout.registry)
        report.update(_resolve(layout.registry))
        report["engine_device"] = _engine_device(layout.registry, report["device"])
    else:
        report["value_model_megatron_error"] = report["verl"]["error"]
        report["engine_device"] = report["device"]

    if report["engine_device"] == "npu" and not report["value_model_megatron_resolves"]:
        report["status"] = PROBLEM
        report["exit_code"] = 1
    return report


# -- human output --------------------------------------------------------------------------------


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def _inherit_text(propagation: dict[str, Any]) -> str:
    if propagation["via"] and not propagation["children_inherit"]:
        return f"no, NPU_SHIM_DISABLE is set (PYTHONPATH has {propagation['via']})"
    if propagation["children_inherit"]:
        text = f"yes, PYTHONPATH has {propagation['via']}"
        if propagation["at_process_start"] is False:
            text += " (added by `import npu_shim` in this process: the shell's PYTHONPATH lacks it)"
        return text
    if propagation["shadowed_by"]:
        return f"no, {propagation['shadowed_by']} comes first on PYTHONPATH"
    return f"no; export PYTHONPATH={npu_shim.bootstrap_dir()}{os.pathsep}$PYTHONPATH"


def _torch_npu_text(torch_npu: dict[str, Any]) -> str:
    if torch_npu["loaded"]:
        return "loaded" + (" (SIMULATED stand-in)" if torch_npu["simulated"] else "")
    return "importable, not loaded" if torch_npu["importable"] else "not installed"


def _summary(report: dict[str, Any]) -> list[tuple[str, str]]:
    verl, shim, mindspeed = report["verl"], report["shim"], report["mindspeed"]
    if verl["importable"]:
        lines = [("verl", f"{verl['version']} ({verl['path']})")]
        if verl["error"]:
            lines.append(("verl error", verl["error"]))
    else:
        lines = [("verl", f"not importable ({verl['error']}): npu_shim has nothing to do")]
    lines.append(("shim", f"active, via {shim['activated_via']}" if shim["active"] else f"inactive: {shim['reason']}"))
    lines.append(("child processes", _inherit_text(report["propagation"])))
    if report["layout"]["description"]:
        lines.append(("layout", report["layout"]["description"]))
    device = str(report["device"])
    if report["engine_device"] not in (None, report["device"]):
        device += f" (engines looked up for {report['engine_device']}: VERL_ENGINE_DEVICE)"
    lines.append(("device", device))
    lines.append(("torch_npu", _torch_npu_text(report["torch_npu"])))
    repatch = "importable" if mindspeed["repatch_importable"] else "not importable"
    lines.append(("mindspeed repatch", repatch + (" (SIMULATED stand-in)" if mindspeed["simulated"] else "")))
    if report["value_model_megatron_resolves"]:
        lines.append(("value_model/megatron", f"resolves to {report['value_model_megatron_class']}"))
    else:
        lines.append(("value_model/megatron", f"does not resolve: {report['value_model_megatron_error']}"))
    lines.append(("status", f"{report['status']} (exit {report['exit_code']})"))
    return lines


def render(report: dict[str, Any]) -> str:
    """The report as short aligned lines for a terminal, then the fixes and the registry as tables."""
    lines = _summary(report)
    width = max(len(label) for label, _ in lines)
    out = [f"npu_shim {report['npu_shim_version']} doctor"]
    out += [f"  {label.ljust(width)}  {value}" for label, value in lines]
    if report["fixes"]:
        out.append("fixes:")
        rows = [
            [fix["fix"], fix["verdict"] + (f" (would {fix['would']})" if fix["would"] else ""), fix["reason"]]
            for fix in report["fixes"]
        ]
        out += _table(rows)
    if report["registry"]:
        out.append("registry:")
        rows = [
            [
                row["model_type"],
                row["backend"],
                row["device"] if row["vendor"] is None else f"{row['device']}/{row['vendor']}",
                row["class"],
                row["origin"] + (", patched" if row["patched"] else ""),
            ]
            for row in report["registry"]
        ]
        out += _table([["model_type", "backend", "device", "class", "origin"], *rows])
    return "\n".join(out)


def main(as_json: bool = False) -> tuple[str, int]:
    """The report (text, or one JSON object) and the exit status."""
    report = collect()
    text = json.dumps(report, indent=2, sort_keys=True) if as_json else render(report)
    return text, int(report["exit_code"])
