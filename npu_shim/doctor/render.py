"""The doctor's report as text for a terminal: short aligned lines, then the fixes and the registry as tables."""

from __future__ import annotations

from typing import Any

from npu_shim.doctor.routes import PYTHONPATH, VERL_EXTERNAL, VERL_PLUGINS

# What an inactive shim would do to a fix, in words ("inactive (would apply)").
WOULD = {
    "apply": "would apply",
    "native": "verl has it",
    "not applicable": "nothing to do here",
    "unrecognised": "code it does not know",
}


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def _route_text(route: dict[str, Any]) -> str:
    if route.get("needed") is False:  # the other route gives the shim
        return route["reason"]
    return ("yes: " if route["works"] else "no: ") + route["reason"]


def _torch_npu_text(torch_npu: dict[str, Any]) -> str:
    if torch_npu["loaded"]:
        return "loaded" + (f" ({torch_npu['version']})" if torch_npu["version"] else "")
    return "importable, not loaded" if torch_npu["importable"] else "not installed"


def _probe_lines(report: dict[str, Any]) -> list[tuple[str, str]]:
    probe = report["probe"]
    lines = [("probed in", f"{report['probed_in']}: {probe['python']} (Python {probe['python_version']})")]
    if "routes" in report:
        routes = report["routes"]
        lines.append(("PYTHONPATH route", _route_text(routes[PYTHONPATH])))
        lines.append((f"{VERL_EXTERNAL} route", _route_text(routes[VERL_EXTERNAL])))
        lines.append((f"{VERL_PLUGINS} route", _route_text(routes[VERL_PLUGINS])))
    if probe.get("report_error"):
        lines.append(("report", probe["report_error"]))
    return lines


def _repatch_text(report: dict[str, Any]) -> str:
    # The field is about verl's binding (what verl calls), which can be missing while MindSpeed imports fine.
    mindspeed = report["mindspeed"]
    if mindspeed["repatch_importable"]:
        return "bound by verl's MindSpeed engine module" + (
            f" (mindspeed from {mindspeed['source']})" if mindspeed["source"] else ""
        )
    if not report.get("mindspeed_installed"):
        return "not bound by verl: MindSpeed is not installed here"
    failure = report.get("mindspeed_import_error")
    if failure:  # what verl's guarded import hid
        return f"not bound by verl: MindSpeed is installed, but `import {failure['module']}` fails: {failure['error']}"
    has_repatch = report.get("mindspeed_adaptor_has_repatch")
    if has_repatch is False:
        return (
            "not bound by verl: MindSpeed is installed and mindspeed.megatron_adaptor imports, without a repatch "
            "(a line without it)"
        )
    if has_repatch:
        return (
            "not bound by verl: its MindSpeed engine module holds no repatch, though MindSpeed is installed and "
            "mindspeed.megatron_adaptor.repatch imports here"
        )
    return (  # nothing tried (mindspeed_adaptor_has_repatch None): verl's engine package did not import
        "not bound by verl: its MindSpeed engine module holds no repatch (its guarded import of "
        "mindspeed.megatron_adaptor failed when verl imported it, or this line has none), though MindSpeed "
        "is installed"
    )


def _verl_lines(report: dict[str, Any]) -> list[tuple[str, str]]:
    verl, shim, mindspeed = report["verl"], report["shim"], report["mindspeed"]
    if verl.get("installed") and not verl["importable"]:
        # Nothing past `import verl` was read: no device, fixes or MindSpeed to report, only what it means.
        return [
            ("verl", f"installed, but {report['value_model_megatron_error']}"),
            ("shim", f"active, via {shim['activated_via']}" if shim["active"] else f"inactive: {shim['reason']}"),
        ]
    if verl["importable"]:
        lines = [("verl", f"{verl['version']} ({verl['path']})")]
        if verl["error"]:
            lines.append(("verl error", verl["error"]))
    else:
        lines = [("verl", f"not installed ({verl['error']}): npu_shim has nothing to do")]
    lines.append(("shim", f"active, via {shim['activated_via']}" if shim["active"] else f"inactive: {shim['reason']}"))
    if report["layout"]["description"]:
        lines.append(("layout", report["layout"]["description"]))
    device = str(report["device"])
    if report["engine_device"] not in (None, report["device"]):
        device += f" (engines looked up for {report['engine_device']}: VERL_ENGINE_DEVICE)"
    lines.append(("device", device))
    lines.append(("torch_npu", _torch_npu_text(report["torch_npu"])))
    lines.append(("mindspeed repatch", _repatch_text(report)))
    found = {True: "yes", False: "no", None: "unknown"}
    features = (
        f"batch-invariant flash attention {found[mindspeed.get('batch_invariant_attention')]}, "
        f"context-parallel wrapper {found[mindspeed.get('context_parallel_wrapper')]}"
    )
    lines.append(("mindspeed has", features))
    lines += [("mindspeed means", meaning) for meaning in mindspeed.get("meaning", [])]
    lines.append(("value_model/megatron", _resolution_text(report)))
    bridge = report.get("bridge") or {}
    if bridge.get("default"):
        lines.append(("bridge", bridge["meaning"] or _bridge_text(bridge["default"])))
    if "megatron_adaptor" in report:
        lines.append(("megatron_adaptor", _adaptor_text(report["megatron_adaptor"])))
    for row in report.get("unrecognised", []):
        then = "a Megatron critic on an NPU fails" if row["breaks_critic"] else "see its reason under fixes"
        lines.append(("unrecognised", f"{row['fix']}: verl needs its change, in code npu_shim does not know; {then}"))
    return lines


def _bridge_text(default: str) -> str:
    if default == "mbridge":
        return "mbridge (verl's default here)"
    return "Megatron-Bridge (verl's default, vanilla_mbridge=False): imports here"


def _adaptor_text(adaptor: dict[str, Any]) -> str:
    if not adaptor["installed"]:
        return adaptor["reason"]
    loaded = "loaded before Megatron" if adaptor["before_megatron"] else "not loaded before Megatron"
    text = f"{loaded}: {adaptor['reason']}"
    if adaptor["megatron_first"]:
        text += f"; in the probe, {', '.join(adaptor['megatron_first'][:3])} came before it"
    elif adaptor["megatron_first"] == []:
        text += "; in the probe, it came before Megatron"
    return text


def _resolution_text(report: dict[str, Any]) -> str:
    if report["value_model_megatron_resolves"]:
        return f"resolves to {report.get('value_model_megatron_class') or 'an engine class'}"
    return f"does not resolve: {report['value_model_megatron_error']}"


def render(report: dict[str, Any]) -> str:
    """The whole report as text."""
    lines = _probe_lines(report) if "probe" in report else []
    if "verl" in report:
        lines += _verl_lines(report)
    elif "device" in report:  # npu_shim was not importable there: the few facts the probe read itself
        lines.append(("device", str(report["device"])))
        lines.append(("value_model/megatron", _resolution_text(report)))
    if report.get("error"):
        lines.append(("error", report["error"]))
    status = f"{report['status']} (exit {report['exit_code']})"
    failure = report.get("mindspeed_import_error")
    engine_failure = report.get("transformer_engine_import_error")
    if report["status"] == "problem" and failure:
        status += (
            f": MindSpeed is installed but `import {failure['module']}` fails, so verl runs every MindSpeed patch off"
        )
    elif report["status"] == "problem" and engine_failure:
        status += (
            f": MegatronAdaptor is installed but `import {engine_failure['module']}` fails "
            f"({engine_failure['error']}), so Megatron has no Transformer Engine and verl's Megatron models do "
            "not build"
        )
    elif report["status"] == "problem" and (report.get("bridge") or {}).get("import_error"):
        status += ": verl's default Megatron-Bridge does not import, so no Megatron engine of its default config builds"
    elif report["status"] == "not judged":
        status += (
            f": verl looks up {report.get('engine_device')} engines here, not npu; "
            "run the doctor where the workers see an NPU"
        )
    lines.append(("status", status))
    width = max(len(label) for label, _ in lines)
    out = [f"npu_shim {report['npu_shim_version']} doctor: what new interpreters and Ray workers from here get"]
    out += [f"  {label.ljust(width)}  {value}" for label, value in lines]
    if report.get("fixes") and (report.get("verl") or {}).get("importable"):
        out.append("fixes:")
        rows = [
            [fix["fix"], fix["verdict"] + (f" ({WOULD[fix['would']]})" if fix["would"] else ""), fix["reason"]]
            for fix in report["fixes"]
        ]
        out += _table(rows)
    if report.get("registry"):
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
