"""The doctor's report as text for a terminal: short aligned lines, then the fixes and the registry as tables."""

from __future__ import annotations

from npu_shim.doctor.report import (
    NOT_JUDGED,
    PROBLEM,
    AdaptorOrder,
    CriticLookup,
    Findings,
    FixRow,
    PythonpathRoute,
    Report,
    Route,
    TorchNpu,
)

# What an inactive shim would do to a fix, in words ("inactive (would apply)").
WOULD = {
    "apply": "would apply",
    "native": "verl has it",
    "not applicable": "nothing to do here",
    "unrecognised": "code it does not know",
    "disabled": "turned off",
}


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def _route_text(route: PythonpathRoute | Route) -> str:
    if not route.needed:  # the other route gives the shim
        return route.reason
    return ("yes: " if route.works else "no: ") + route.reason


def _torch_npu_text(torch_npu: TorchNpu) -> str:
    if torch_npu.loaded:
        return "loaded" + (f" ({torch_npu.version})" if torch_npu.version else "")
    return "importable, not loaded" if torch_npu.importable else "not installed"


def _probe_lines(report: Report) -> list[tuple[str, str]]:
    if report.probe is None:
        return []
    probe = report.probe
    lines = [("probed in", f"{report.probed_in}: {probe.python} (Python {probe.python_version})")]
    if report.routes is not None:
        lines += [(f"{name} route", _route_text(route)) for name, route in report.routes.by_name().items()]
    if probe.report_error:
        lines.append(("report", probe.report_error))
    return lines


def _repatch_text(findings: Findings) -> str:
    # The field is about verl's binding (what verl calls), which can be missing while MindSpeed imports fine.
    mindspeed, stack = findings.mindspeed, findings.stack
    if mindspeed.repatch_importable:
        return "bound by verl's MindSpeed engine module" + (
            f" (mindspeed from {mindspeed.source})" if mindspeed.source else ""
        )
    if not stack.mindspeed_installed:
        return "not bound by verl: MindSpeed is not installed here"
    failure = stack.mindspeed_import_error
    if failure:  # what verl's guarded import hid
        return f"not bound by verl: MindSpeed is installed, but `import {failure.module}` fails: {failure.error}"
    if stack.mindspeed_adaptor_has_repatch is False:
        return (
            "not bound by verl: MindSpeed is installed and mindspeed.megatron_adaptor imports, without a repatch "
            "(a line without it)"
        )
    if stack.mindspeed_adaptor_has_repatch:
        return (
            "not bound by verl: its MindSpeed engine module holds no repatch, though MindSpeed is installed and "
            "mindspeed.megatron_adaptor.repatch imports here"
        )
    return (  # nothing tried (mindspeed_adaptor_has_repatch None): verl's engine package did not import
        "not bound by verl: its MindSpeed engine module holds no repatch (its guarded import of "
        "mindspeed.megatron_adaptor failed when verl imported it, or this line has none), though MindSpeed "
        "is installed"
    )


def _verl_lines(report: Report, findings: Findings, lookup: CriticLookup) -> list[tuple[str, str]]:
    verl, shim, mindspeed = findings.verl, findings.shim, findings.mindspeed
    shim_line = ("shim", f"active, via {shim.activated_via}" if shim.active else f"inactive: {shim.reason}")
    if verl.installed and not verl.importable:
        # Nothing past `import verl` was read: no device, fixes or MindSpeed to report, only what it means.
        return [("verl", f"installed, but {lookup.error}"), shim_line]
    if verl.importable:
        lines = [("verl", f"{verl.version} ({verl.path})")]
        if verl.error:
            lines.append(("verl error", verl.error))
    else:
        lines = [("verl", f"not installed ({verl.error}): npu_shim has nothing to do")]
    lines.append(shim_line)
    if shim.disabled_fixes or shim.unknown_fixes:
        lines.append(("fixes off", _fixes_off_text(shim.disabled_fixes, shim.unknown_fixes, findings.fixes)))
    if findings.layout.description:
        lines.append(("layout", findings.layout.description))
    device = _device_text(lookup)
    if findings.engine_device not in (None, lookup.device, lookup.assumed_device):
        device += f" (engines looked up for {findings.engine_device}: VERL_ENGINE_DEVICE)"
    lines.append(("device", device))
    lines.append(("torch_npu", _torch_npu_text(findings.torch_npu)))
    lines.append(("mindspeed repatch", _repatch_text(findings)))
    found = {True: "yes", False: "no", None: "unknown"}
    features = (
        f"batch-invariant flash attention {found[mindspeed.batch_invariant_attention]}, "
        f"context-parallel wrapper {found[mindspeed.context_parallel_wrapper]}"
    )
    lines.append(("mindspeed has", features))
    lines += [("mindspeed means", meaning) for meaning in mindspeed.meaning]
    lines.append(("value_model/megatron", _resolution_text(lookup)))
    if findings.bridge.default:
        lines.append(("bridge", findings.bridge.meaning or _bridge_text(findings.bridge.default)))
    if report.megatron_adaptor is not None:
        lines.append(("megatron_adaptor", _adaptor_text(report.megatron_adaptor)))
    for row in findings.unrecognised:
        then = "a Megatron critic on an NPU fails" if row.breaks_critic else "see its reason under fixes"
        lines.append(("unrecognised", f"{row.fix}: verl needs its change, in code npu_shim does not know; {then}"))
    for row in findings.needed_but_off:
        then = "a Megatron critic on an NPU fails" if row.breaks_critic else "docs/fixes.md says what it mends"
        lines.append(("turned off", f"{row.fix}: verl lacks its change here; {then}"))
    return lines


def _fixes_off_text(disabled: list[str], unknown: list[str], fixes: list[FixRow]) -> str:
    text = f"{', '.join(disabled) or 'none'} (NPU_SHIM_DISABLED_FIXES)"
    if unknown:
        known = ", ".join(row.fix for row in fixes)
        text += f"; no fix is named {', '.join(unknown)}: ignored (the fixes: {known})"
    return text


def _bridge_text(default: str) -> str:
    if default == "mbridge":
        return "mbridge (verl's default here)"
    return "Megatron-Bridge (verl's default, vanilla_mbridge=False): imports here"


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


def _device_text(lookup: CriticLookup) -> str:
    if lookup.assumed_device is None:
        return str(lookup.device)
    return f"{lookup.device}; judged as on an {lookup.assumed_device} host (--device {lookup.assumed_device})"


def _resolution_text(lookup: CriticLookup) -> str:
    if lookup.resolves:
        return f"resolves to {lookup.engine_class or 'an engine class'}"
    return f"does not resolve: {lookup.error}"


def _status_text(report: Report) -> str:
    status = f"{report.status} (exit {report.exit_code})"
    findings = report.findings
    if report.status == NOT_JUDGED:
        engine_device = findings.engine_device if findings else None
        return (
            status
            + f": verl looks up {engine_device} engines here, not npu; run the doctor where the workers see an NPU, "
            "or with --device npu"
        )
    if report.status != PROBLEM or findings is None:
        return status
    failure, engine_failure = findings.stack.mindspeed_import_error, findings.stack.transformer_engine_import_error
    if failure:
        return status + (
            f": MindSpeed is installed but `import {failure.module}` fails, so verl runs every MindSpeed patch off"
        )
    if engine_failure:
        return status + (
            f": MegatronAdaptor is installed but `import {engine_failure.module}` fails "
            f"({engine_failure.error}), so Megatron has no Transformer Engine and verl's Megatron models do "
            "not build"
        )
    if findings.bridge.import_error:
        return (
            status
            + ": verl's default Megatron-Bridge does not import, so no Megatron engine of its default config builds"
        )
    return status


def render(report: Report) -> str:
    """The whole report as text."""
    lines = _probe_lines(report)
    findings, lookup = report.findings, report.lookup
    if findings is not None and lookup is not None:
        lines += _verl_lines(report, findings, lookup)
    elif lookup is not None:  # npu_shim was not importable there: the few facts the probe read itself
        lines.append(("device", _device_text(lookup)))
        lines.append(("value_model/megatron", _resolution_text(lookup)))
    if report.error:
        lines.append(("error", report.error))
    lines.append(("status", _status_text(report)))
    width = max(len(label) for label, _ in lines)
    out = [f"npu_shim {report.npu_shim_version} doctor: what new interpreters and Ray workers from here get"]
    out += [f"  {label.ljust(width)}  {value}" for label, value in lines]
    if findings is not None and findings.fixes and findings.verl.importable:
        out.append("fixes:")
        rows = [
            [fix.fix, fix.verdict + (f" ({WOULD[fix.would]})" if fix.would else ""), fix.reason]
            for fix in findings.fixes
        ]
        out += _table(rows)
    if findings is not None and findings.registry:
        out.append("registry:")
        rows = [
            [
                row.model_type,
                row.backend,
                row.device if row.vendor is None else f"{row.device}/{row.vendor}",
                row.engine_class,
                row.origin + (", patched" if row.patched else ""),
            ]
            for row in findings.registry
        ]
        out += _table([["model_type", "backend", "device", "class", "origin"], *rows])
    return "\n".join(out)
