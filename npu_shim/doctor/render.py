"""The doctor's report as text for a terminal: short aligned lines, then the fixes and the registry as tables."""

from __future__ import annotations

from npu_shim.doctor.report import NOT_JUDGED, PROBLEM, AdaptorOrder, Report

# What an inactive shim would do to a fix, in words ("inactive (would apply)").
WOULD = {"apply": "would apply", "native": "verl has it", "not applicable": "nothing to do here"}
WOULD.update({"unrecognised": "code it does not know", "disabled": "turned off"})
YES_NO = {True: "yes", False: "no", None: "unknown"}
BRIDGES = {"mbridge": "mbridge (verl's default here)"}  # None: Megatron-Bridge
BRIDGES[None] = "Megatron-Bridge (verl's default, vanilla_mbridge=False): imports here"
# Why verl bound no repatch though MindSpeed is installed, by whether mindspeed.megatron_adaptor has one (None: the
# probe tried nothing, as verl's engine package did not import)
NOT_BOUND = {
    False: "MindSpeed is installed and mindspeed.megatron_adaptor imports, without a repatch (a line without it)",
    True: "its MindSpeed engine module holds no repatch, though MindSpeed is installed and "
    "mindspeed.megatron_adaptor.repatch imports here",
    None: "its MindSpeed engine module holds no repatch (its guarded import of mindspeed.megatron_adaptor failed "
    "when verl imported it, or this line has none), though MindSpeed is installed",
}


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def _probe_lines(report: Report) -> list[tuple[str, str]]:
    probe = report.probe
    if probe is None:
        return []
    lines = [("probed in", f"{report.probed_in}: {probe.python} (Python {probe.python_version})")]
    for name, route in (report.routes.by_name() if report.routes else {}).items():
        answer = "" if not route.needed else "yes: " if route.works else "no: "  # not needed: another route gives it
        lines.append((f"{name} route", answer + route.reason))
    return [*lines, ("report", probe.report_error)] if probe.report_error else lines


def _repatch_text(report: Report) -> str:
    # The field is about verl's binding (what verl calls), which can be missing while MindSpeed imports fine.
    mindspeed, failure = report.mindspeed, report.mindspeed_import_error
    if mindspeed.repatch_importable:
        source = f" (mindspeed from {mindspeed.source})" if mindspeed.source else ""
        return f"bound by verl's MindSpeed engine module{source}"
    if not report.mindspeed_installed:
        return "not bound by verl: MindSpeed is not installed here"
    if failure:  # what verl's guarded import hid
        return f"not bound by verl: MindSpeed is installed, but `import {failure.module}` fails: {failure.error}"
    return f"not bound by verl: {NOT_BOUND[report.mindspeed_adaptor_has_repatch]}"


def _verl_lines(report: Report) -> list[tuple[str, str]]:
    verl, shim, mindspeed, torch_npu = report.verl, report.shim, report.mindspeed, report.torch_npu
    shim_line = ("shim", f"active, via {shim.activated_via}" if shim.active else f"inactive: {shim.reason}")
    if verl.installed and not verl.importable:
        # Nothing past `import verl` was read: no device, fixes or MindSpeed to report, only what it means.
        return [("verl", f"installed, but {report.value_model_megatron_error}"), shim_line]
    if verl.importable:
        lines = [("verl", f"{verl.version} ({verl.path})"), *([("verl error", verl.error)] if verl.error else [])]
    else:
        lines = [("verl", f"not installed ({verl.error}): npu_shim has nothing to do")]
    lines.append(shim_line)
    if shim.disabled_fixes or shim.unknown_fixes:
        off = f"{', '.join(shim.disabled_fixes) or 'none'} (NPU_SHIM_DISABLED_FIXES)"
        if shim.unknown_fixes:
            known = ", ".join(row.fix for row in report.fixes)
            off += f"; no fix is named {', '.join(shim.unknown_fixes)}: ignored (the fixes: {known})"
        lines.append(("fixes off", off))
    if report.layout.description:
        lines.append(("layout", report.layout.description))
    device = _device_text(report)
    if report.engine_device not in (None, report.device, report.assumed_device):
        device += f" (engines looked up for {report.engine_device}: VERL_ENGINE_DEVICE)"
    lines.append(("device", device))
    loaded = "loaded" + (f" ({torch_npu.version})" if torch_npu.version else "")
    unloaded = "importable, not loaded" if torch_npu.importable else "not installed"
    lines.append(("torch_npu", loaded if torch_npu.loaded else unloaded))
    lines.append(("mindspeed repatch", _repatch_text(report)))
    features = (
        f"batch-invariant flash attention {YES_NO[mindspeed.batch_invariant_attention]}, "
        f"context-parallel wrapper {YES_NO[mindspeed.context_parallel_wrapper]}"
    )
    lines += [("mindspeed has", features), *(("mindspeed means", meaning) for meaning in mindspeed.meaning)]
    lines.append(("value_model/megatron", _resolution_text(report)))
    if report.rollout_ipc:
        lines.append(("rollout IPC", report.rollout_ipc))
    if report.bridge.default:
        lines.append(("bridge", report.bridge.meaning or BRIDGES.get(report.bridge.default, BRIDGES[None])))
    if report.megatron_adaptor is not None:
        lines.append(("megatron_adaptor", _adaptor_text(report.megatron_adaptor)))
    for row in report.unrecognised:
        then = "a Megatron critic on an NPU fails" if row.breaks_critic else "see its reason under fixes"
        lines.append(("unrecognised", f"{row.fix}: verl needs its change, in code npu_shim does not know; {then}"))
    for row in report.needed_but_off:
        then = "a Megatron critic on an NPU fails" if row.breaks_critic else "docs/fixes.md says what it mends"
        lines.append(("turned off", f"{row.fix}: verl lacks its change here; {then}"))
    return lines


def _adaptor_text(adaptor: AdaptorOrder) -> str:
    if not adaptor.installed:
        return adaptor.reason
    loaded = "loaded before Megatron" if adaptor.before_megatron else "not loaded before Megatron"
    text = f"{loaded}: {adaptor.reason}"
    if adaptor.megatron_first:
        text += f"; in the probe, {', '.join(adaptor.megatron_first[:3])} came before it"
    elif adaptor.megatron_first == []:
        text += "; in the probe, it came before Megatron"
    return text


def _device_text(report: Report) -> str:
    if report.assumed_device is None:
        return str(report.device)
    return f"{report.device}; judged as on an {report.assumed_device} host (--device {report.assumed_device})"


def _resolution_text(report: Report) -> str:
    if report.value_model_megatron_resolves:
        return f"resolves to {report.value_model_megatron_class or 'an engine class'}"
    return f"does not resolve: {report.value_model_megatron_error}"


def _status_text(report: Report) -> str:
    failure, engine_failure = report.mindspeed_import_error, report.transformer_engine_import_error
    problem, why = report.status == PROBLEM and report.shim is not None, None
    if report.status == NOT_JUDGED:
        why = (
            f"verl looks up {report.engine_device} engines here, not npu; run the doctor where the workers see an "
            "NPU, or with --device npu"
        )
    elif problem and failure:
        why = f"MindSpeed is installed but `import {failure.module}` fails, so verl runs every MindSpeed patch off"
    elif problem and engine_failure:
        why = (
            f"MegatronAdaptor is installed but `import {engine_failure.module}` fails ({engine_failure.error}), so "
            "Megatron has no Transformer Engine and verl's Megatron models do not build"
        )
    elif problem and report.bridge.import_error:
        why = "verl's default Megatron-Bridge does not import, so no Megatron engine of its default config builds"
    status = f"{report.status} (exit {report.exit_code})"
    return f"{status}: {why}" if why else status


def render(report: Report) -> str:
    lines = _probe_lines(report)
    if report.shim is not None:
        lines += _verl_lines(report)
    elif report.probe is not None:  # npu_shim was not importable there: the few facts the probe read itself
        lines += [("device", _device_text(report)), ("value_model/megatron", _resolution_text(report))]
    lines += [*([("error", report.error)] if report.error else []), ("status", _status_text(report))]
    width = max(len(label) for label, _ in lines)
    out = [f"npu_shim {report.npu_shim_version} doctor: what new interpreters and Ray workers from here get"]
    out += [f"  {label.ljust(width)}  {value}" for label, value in lines]
    if report.fixes and report.verl is not None and report.verl.importable:
        would = [f" ({WOULD[fix.would]})" if fix.would else "" for fix in report.fixes]
        out += ["fixes:", *_table([[f.fix, f.verdict + w, f.reason] for f, w in zip(report.fixes, would, strict=True)])]
    if report.registry:
        rows = [["model_type", "backend", "device", "class", "origin"]]
        for row in report.registry:
            device = row.device if row.vendor is None else f"{row.device}/{row.vendor}"
            origin = row.origin + (", patched" if row.patched else "")
            rows.append([row.model_type, row.backend, device, row.engine_class, origin])
        out += ["registry:", *_table(rows)]
    return "\n".join(out)
