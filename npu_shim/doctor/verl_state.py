"""The report, gathered, judged and rendered in the probed interpreter, after ``import verl`` there. It imports only
the modules the fixes watch (no process group, no engine, nothing on an accelerator) and never activates the shim."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import npu_shim
from npu_shim.catalogue import FIXES, apply_module, critic_fails_without, fix_names
from npu_shim.doctor import bridge_state, mindspeed_state, routes
from npu_shim.doctor.bridge_state import error_text, import_or_failure
from npu_shim.doctor.render import render
from npu_shim.doctor.report import NOT_APPLICABLE, NOT_JUDGED, OK, PROBLEM, Report, blank, with_status
from npu_shim.fingerprint import uses
from npu_shim.fixes import npu_smi_card
from npu_shim.fixes.value_engine import read_layout
from npu_shim.patcher import ALREADY_APPLIED, APPLIED, ENGINE_PACKAGE, MISSING, UNRECOGNISED, Outcome, Writer, is_ours
from npu_shim.settings import DISABLED_FIXES, names_of_disabled_fixes, switch
from npu_shim.watcher import found

logger = logging.getLogger("npu_shim")

INACTIVE = "inactive"
WOULD_APPLY = "apply"
# probe.critic_lookup, the probe's: the device verl sees and the critic's lookup for a device, under the report's keys
Lookup = Callable[[str | None], dict[str, Any]]


def answer(start: dict[str, Any], order: Any, options: dict[str, Any], lookup: Lookup) -> dict[str, Any]:
    """The probe's answer: the report, judged, and its text. ``start``: what probe.py read of start-up and ``import
    verl``; ``order``: its MegatronOrder; ``options``: the doctor's (``npu_shim.doctor.command.probe_options``)."""
    report = collect(start["verl_import_error"], options.get("device"), lookup)
    start = {**start, "pythonpath_entries": routes.pythonpath_entries(start["environment"].get("PYTHONPATH"))}
    installed = report["megatron_adaptor_installed"]
    adaptor = mindspeed_state.adaptor_order(installed, start["activated_at_start"], order.at_adaptor)
    report = {**report, "probe": start, "megatron_adaptor": adaptor, "probed_in": options.get("probed_in")}
    report = {**report, "routes": routes.judge(report, options), "npu_shim_version": npu_shim.__version__}
    why = problems(report, options)
    report = with_status(report, PROBLEM if why else _unproblematic(report), problems=why)
    return {"report": report, "text": render(report)}


def _shim_state(no_verl: str | None) -> dict[str, Any]:
    """The shim here; ``no_verl``: why verl did not import (then an active shim has nothing to patch)."""
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
    elif no_verl:
        reason = f"{no_verl}: nothing to patch"
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
    named, known = names_of_disabled_fixes(), fix_names()
    return dict(
        active=reason is None,
        activated_via=via,
        disabled=disabled,
        hook_loaded=hook is not None,
        failure=failure_text,
        reason=reason,
        disabled_fixes=[name for name in known if name in named],
        unknown_fixes=sorted(named.difference(known)),
    )


def _fixes(shim: dict[str, Any], import_errors: dict[str, str]) -> list[dict[str, Any]]:
    """Each fix's verdict as the hook recorded it; where the shim is inactive, what it would be: the hook's own
    application, reverted at once (only this process sees verl patched, and only briefly)."""
    outcomes = {o.fix: o for o in sys.modules["npu_shim.hook"].outcomes} if shim["active"] else {}
    for name in [] if shim["active"] else dict.fromkeys(fix.watches for fix in FIXES):
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
        if shim["active"]:
            rows.append({"fix": fix.name, "verdict": outcome.verdict, "reason": outcome.reason, "would": None})
        else:
            would = WOULD_APPLY if outcome.verdict == APPLIED else outcome.verdict
            rows.append({"fix": fix.name, "verdict": INACTIVE, "reason": f"{shim['reason']}; {outcome.reason}",
                         "would": would})  # fmt: skip
    return rows


def _needed_but_off(shim: dict[str, Any]) -> list[dict[str, Any]]:
    """The fixes turned off whose change this verl lacks, judged here: the hook never runs one."""
    off = []
    for fix in FIXES:
        module = sys.modules.get(fix.watches)
        if fix.name in shim["disabled_fixes"] and module is not None:
            try:
                if fix.judge(module).verdict == MISSING:
                    off.append(fix.name)
            except Exception as error:
                logger.debug("%s's judgement failed: %s", fix.name, error_text(error))
    return _critic_rows(off)


def _critic_rows(names: list[str]) -> list[dict[str, Any]]:
    return [{"fix": name, "breaks_critic": critic_fails_without(name)} for name in names]


def _registry_rows(registry: Any) -> list[dict[str, Any]]:
    rows = []
    for model_type, backends in getattr(registry, "_engines", {}).items():  # read_layout: a dict, or no registry
        for backend, devices in backends.items():
            for key, engine_class in devices.items():
                device, *vendor = key if isinstance(key, tuple) else (key,)  # 0.9: (device, vendor)
                ours = is_ours(engine_class)
                rows.append({
                    "model_type": str(model_type),
                    "backend": str(backend),
                    "device": str(device),
                    "vendor": str(vendor[0]) if vendor else None,
                    "class": _qualified(engine_class),
                    "origin": "shim" if ours else "upstream",
                    # an upstream class the shim replaced a method of (the LM engine's repatch placement)
                    "patched": not ours and any(map(is_ours, getattr(engine_class, "__dict__", {}).values())),
                })  # fmt: skip
    return sorted(rows, key=lambda row: (row["model_type"], row["backend"], row["device"], str(row["vendor"])))


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _torch_npu() -> dict[str, Any]:
    module = sys.modules.get("torch_npu")
    # A real torch_npu's release names the torch it was built for (2.6.0.post3); a stand-in's says so.
    version = str(version) if (version := getattr(module, "__version__", None)) else None
    return {"loaded": module is not None, "importable": module is not None or found("torch_npu"), "version": version}


def collect(verl_import_error: str | None, assumed_device: str | None, lookup: Lookup) -> Report:
    """The report's findings here, not judged yet. ``verl_import_error``: how the probe's ``import verl`` failed (verl
    is not imported again); ``assumed_device``: judge as where verl sees that device (``doctor --device npu``)."""
    # First, before anything below imports more of Megatron: the probe's MegatronOrder notes this look-up.
    report = {**blank(), **mindspeed_state.stack(), "assumed_device": assumed_device}
    verl = None if verl_import_error else sys.modules.get("verl")
    if verl is not None:  # what the fixes watch, as verl's workers import it (the hook judges each module then)
        watched = dict.fromkeys([ENGINE_PACKAGE, *(fix.watches for fix in FIXES)])
        imported = {module: import_or_failure(module) for module in watched}
    installed = verl is not None or found("verl")
    shim = _shim_state(None if verl else "import verl fails (see verl)" if installed else "verl is not installed")
    report.update(shim=shim, torch_npu=_torch_npu())
    if verl is None:
        why = routes.import_failure_text(verl_import_error) if installed else "verl is not installed"
        return {
            **report,
            "verl": dict(importable=False, installed=installed, version=None, path=None, error=verl_import_error),
            "fixes": [{"fix": fix.name, "verdict": NOT_APPLICABLE, "reason": why, "would": None} for fix in FIXES],
            "value_model_megatron_error": why,
        }
    engine_package, failure = imported[ENGINE_PACKAGE]
    error = f"{ENGINE_PACKAGE} did not import: {failure['error']}" if failure else None
    # as a worker looks the critic up: with the shim's changes where it is active, else verl's own (the fixes judged
    # below leave verl as they found it)
    looked_up = lookup(assumed_device)
    device = looked_up["device"]
    report.update(
        looked_up,
        verl=dict(importable=True, installed=True, version=str(getattr(verl, "__version__", None)),
                  path=mindspeed_state.package_folder(verl), error=error),
    )  # fmt: skip
    if engine_package is None:
        return {**report, "value_model_megatron_error": error, "engine_device": assumed_device or device}
    # a module may fail where the engine package imports: a verl older than it, or no Megatron
    import_errors = {module: failed["error"] for module, (_, failed) in imported.items() if failed}
    layout = read_layout(engine_package)
    fixes, needed_but_off = _fixes(shim, import_errors), _needed_but_off(shim)
    # VERL_ENGINE_DEVICE where this verl's get_engine_cls reads it (0.9)
    reads_it = uses(getattr(layout.registry, "get_engine_cls", None), "VERL_ENGINE_DEVICE")
    report.update(
        mindspeed_state.offer(report, layout),
        fixes=fixes,
        unrecognised=_critic_rows([row["fix"] for row in fixes if UNRECOGNISED in (row["verdict"], row["would"])]),
        needed_but_off=needed_but_off,
        bridge=bridge_state.bridge_state(),
        engine_device=assumed_device or (reads_it and os.environ.get("VERL_ENGINE_DEVICE")) or device,
        registry=_registry_rows(layout.registry),
    )
    # where this verl lacks the change npu_smi_card makes: the rollout's IPC decision, as the shim makes it here
    card = next(row["would"] or row["verdict"] for row in fixes if row["fix"] == npu_smi_card.NAME)
    if "npu" in (device, assumed_device) and card in (APPLIED, ALREADY_APPLIED, WOULD_APPLY):
        decision = npu_smi_card.decision()
        report["rollout_ipc"] = f"{'IPC' if decision.ipc else 'shared memory (IPC off)'}: {decision.why}"
    return report


def problems(report: Report, options: dict[str, Any]) -> list[str]:
    """Why the report is a problem (exit 1), each once, as the status line gives them; none: it is not."""
    shim, verl = report["shim"], report["verl"]
    failure, engine_failure = report["mindspeed_import_error"], report["transformer_engine_import_error"]
    why = []
    if shim["unknown_fixes"] and (options.get("strict") or switch("NPU_SHIM_STRICT")):
        why.append(f"{DISABLED_FIXES} names no fix {', '.join(shim['unknown_fixes'])} (strict)")
    if verl["installed"] and not verl["importable"]:  # every worker that imports it dies so
        return [*why, "import verl fails here"]
    if not verl["installed"]:
        return [*why, "verl is not installed here (--device npu)"] if report["assumed_device"] == "npu" else why
    if failure is not None:  # verl's MindSpeed patches all off
        why.append(f"MindSpeed is installed but `import {failure['module']}` fails, so verl runs every MindSpeed "
                   "patch off")  # fmt: skip
    elif engine_failure is not None:  # MegatronAdaptor's stack without TENPU: no model builds
        why.append(f"MegatronAdaptor is installed but `import {engine_failure['module']}` fails "
                   f"({engine_failure['error']}), so Megatron has no Transformer Engine and verl's Megatron models do "
                   "not build")  # fmt: skip
    if report["engine_device"] != "npu":
        return why
    if not report["mindspeed_installed"]:
        why.append("MindSpeed is not installed: verl's Megatron engines run on an NPU through MindSpeed")
    if any(row["breaks_critic"] for row in [*report["unrecognised"], *report["needed_but_off"]]):
        why.append("a fix a Megatron critic needs is missing (see the unrecognised or turned-off line)")
    if report["bridge"]["import_error"] is not None:
        why.append("verl's default Megatron-Bridge does not import, so no Megatron engine of its default config builds")
    if not report["value_model_megatron_resolves"]:
        why.append("a Megatron critic's engine does not resolve on an NPU")
    return why


def _unproblematic(report: Report) -> str:
    if not report["verl"]["installed"]:
        return NOT_APPLICABLE
    return OK if report["engine_device"] == "npu" else NOT_JUDGED  # a build machine: not "ok" for what was not seen
