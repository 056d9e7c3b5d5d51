"""The doctor's report as text for a terminal: short aligned lines, then the fixes and the registry as tables. A pure
function of the report's JSON: the probe renders what it judged, and the doctor the reports it made itself."""

from __future__ import annotations

from typing import Any

from npu_shim.doctor.report import NOT_JUDGED, Report
from npu_shim.settings import DISABLED_FIXES, with_nearest

# What an inactive shim would do to a fix, in words ("inactive (would apply)").
WOULD = {"apply": "would apply", "native": "verl has it", "not applicable": "nothing to do here"}
WOULD.update({"unrecognised": "code it does not know", "disabled": "turned off"})
YES_NO = {True: "yes", False: "no", None: "unknown"}
BRIDGES = {"mbridge": "mbridge (verl's default here)"}  # None: Megatron-Bridge
BRIDGES[None] = "Megatron-Bridge (verl's default, vanilla_mbridge=False): imports here"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def _probe_lines(report: Report) -> list[tuple[str, str]]:
    probe = report["probe"]
    if probe is None:
        return []
    lines = [("probed in", f"{report['probed_in']}: {probe['python']} (Python {probe['python_version']})")]
    for name, route in (report["routes"] or {}).items():
        if name != "effective":  # not needed: another route gives it
            answer = "" if not route["needed"] else "yes: " if route["works"] else "no: "
            lines.append((f"{name} route", answer + route["reason"]))
    return lines  # a report_error is the report's error, its own line


def _repatch_text(report: Report) -> str:
    # The field is about verl's binding (what verl calls), which can be missing while MindSpeed imports fine.
    mindspeed = report["mindspeed"]
    if mindspeed["repatch_importable"]:
        source = f" (mindspeed from {mindspeed['source']})" if mindspeed["source"] else ""
        return f"bound by verl's MindSpeed engine module{source}"
    if not report["mindspeed_installed"]:
        return "not bound by verl: MindSpeed is not installed here"
    return "not bound by verl, though MindSpeed is installed here (mindspeed means: why, and what it means)"


def _fixes_off(report: Report) -> str:
    shim = report["shim"]
    off = f"{', '.join(shim['disabled_fixes']) or 'none'} ({DISABLED_FIXES})"
    if shim["unknown_fixes"]:
        known = [row["fix"] for row in report["fixes"]]
        for name in shim["unknown_fixes"]:
            off += f"; no fix is named {with_nearest(name, known)}: ignored"
        off += f" (the fixes: {', '.join(known)})"
    return off


def _verl_lines(report: Report) -> list[tuple[str, str]]:
    verl, shim, mindspeed, torch_npu = report["verl"], report["shim"], report["mindspeed"], report["torch_npu"]
    if verl["importable"]:
        lines = [("verl", f"{verl['version']} ({verl['path']})")]
        if verl["error"]:
            lines.append(("verl error", verl["error"]))
    elif verl["installed"]:
        lines = [("verl", f"installed, but {report['value_model_megatron_error']}")]
    else:
        lines = [("verl", f"not installed ({verl['error']}): npu_shim has nothing to do")]
    lines.append(("shim", f"active, via {shim['activated_via']}" if shim["active"] else f"inactive: {shim['reason']}"))
    if shim["disabled_fixes"] or shim["unknown_fixes"]:
        lines.append(("fixes off", _fixes_off(report)))
    if not verl["importable"]:  # nothing past `import verl` was read: no device, fixes or MindSpeed to report
        return lines
    device = _device_text(report)
    if report["engine_device"] not in (None, report["device"], report["assumed_device"]):
        device += f" (engines looked up for {report['engine_device']}: VERL_ENGINE_DEVICE)"
    lines.append(("device", device))
    loaded = "loaded" + (f" ({torch_npu['version']})" if torch_npu["version"] else "")
    unloaded = "importable, not loaded" if torch_npu["importable"] else "not installed"
    lines.append(("torch_npu", loaded if torch_npu["loaded"] else unloaded))
    lines.append(("mindspeed repatch", _repatch_text(report)))
    features = (
        f"batch-invariant flash attention {YES_NO[mindspeed['batch_invariant_attention']]}, "
        f"context-parallel wrapper {YES_NO[mindspeed['context_parallel_wrapper']]}"
    )
    lines += [("mindspeed has", features), *(("mindspeed means", meaning) for meaning in mindspeed["meaning"])]
    lines.append(("value_model/megatron", _resolution_text(report)))
    if report["rollout_ipc"]:
        lines.append(("rollout IPC", report["rollout_ipc"]))
    bridge = report["bridge"]
    if bridge["default"]:
        lines.append(("bridge", bridge["meaning"] or BRIDGES.get(bridge["default"], BRIDGES[None])))
    if report["megatron_adaptor"] is not None:
        lines.append(("megatron_adaptor", _adaptor_text(report["megatron_adaptor"])))
    for row in report["unrecognised"]:
        then = "a Megatron critic on an NPU fails" if row["breaks_critic"] else "see its reason under fixes"
        lines.append(("unrecognised", f"{row['fix']}: verl needs its change, in code npu_shim does not know; {then}"))
    for row in report["needed_but_off"]:
        then = "a Megatron critic on an NPU fails" if row["breaks_critic"] else "docs/fixes.md says what it mends"
        lines.append(("turned off", f"{row['fix']}: verl lacks its change here; {then}"))
    return lines


def _adaptor_text(adaptor: dict[str, Any]) -> str:
    if not adaptor["installed"]:
        return adaptor["reason"]
    loaded = "loaded before Megatron" if adaptor["before_megatron"] else "not loaded before Megatron"
    text, first = f"{loaded}: {adaptor['reason']}", adaptor["megatron_first"]
    if first:
        text += f"; in the probe, {', '.join(first[:3])} came before it"
    elif first == []:
        text += "; in the probe, it came before Megatron"
    return text


def _device_text(report: Report) -> str:
    assumed = report["assumed_device"]
    device = report["device"] or "unknown (verl.utils.device.get_device_name() failed)"
    return device if assumed is None else f"{device}; judged as on an {assumed} host (--device {assumed})"


def _resolution_text(report: Report) -> str:
    if report["value_model_megatron_resolves"]:
        return f"resolves to {report['value_model_megatron_class'] or 'an engine class'}"
    return f"does not resolve: {report['value_model_megatron_error']}"


def _status_text(report: Report) -> str:
    why = report["problems"]
    if report["status"] == NOT_JUDGED:
        engines = report["engine_device"]
        looks_up = f"verl looks up {engines} engines here" if engines else "verl's device could not be read here"
        why = [f"{looks_up}, not npu; run the doctor where the workers see an NPU, or with --device npu"]
    status = f"{report['status']} (exit {report['exit_code']})"
    return f"{status}: {'; '.join(why)}" if why else status


def render(report: Report) -> str:
    lines = _probe_lines(report)
    if report["shim"] is not None:
        lines += _verl_lines(report)
    elif report["probe"] is not None:  # npu_shim was not importable there: the few facts the probe read itself
        lines += [("device", _device_text(report)), ("value_model/megatron", _resolution_text(report))]
    lines += [*([("error", report["error"])] if report["error"] else []), ("status", _status_text(report))]
    width = max(len(label) for label, _ in lines)
    out = [f"npu_shim {report['npu_shim_version']} doctor: what new interpreters and Ray workers from here get"]
    out += [f"  {label.ljust(width)}  {value}" for label, value in lines]
    if report["fixes"] and report["verl"]["importable"]:
        would = [f" ({WOULD[fix['would']]})" if fix["would"] else "" for fix in report["fixes"]]
        rows = [[fix["fix"], fix["verdict"] + w, fix["reason"]] for fix, w in zip(report["fixes"], would, strict=True)]
        out += ["fixes:", *_table(rows)]
    if report["registry"]:
        rows = [["model_type", "backend", "device", "class", "origin"]]
        for row in report["registry"]:
            device = row["device"] if row["vendor"] is None else f"{row['device']}/{row['vendor']}"
            origin = row["origin"] + (", patched" if row["patched"] else "")
            rows.append([row["model_type"], row["backend"], device, row["class"], origin])
        out += ["registry:", *_table(rows)]
    return "\n".join(out)
