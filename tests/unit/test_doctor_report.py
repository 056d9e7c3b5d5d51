"""The doctor's report is a typed value, and its JSON is that value written out by ``dataclasses.asdict``: one flat
object whose keys are the ones ``npu-shim doctor --json`` has always printed, every key in every report
(``helpers.doctor`` checks every real run reads back the same)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

import npu_shim.doctor
from npu_shim.doctor.render import render
from npu_shim.doctor.report import (
    AdaptorOrder,
    Bridge,
    FixGap,
    FixRow,
    ImportFailure,
    Layout,
    MindSpeedOffer,
    ProbeState,
    PythonpathEntry,
    RegistryRow,
    Report,
    Route,
    Routes,
    ShimState,
    TorchNpu,
    VerlFacts,
    to_json,
)

PROBE = ProbeState(
    python="/usr/bin/python3",
    python_version="3.11.7",
    pid=42,
    environment={"PYTHONPATH": "/opt/npu_shim", "VERL_USE_EXTERNAL_MODULES": None},
    sitecustomize="/opt/npu_shim/sitecustomize.py",
    sitecustomize_is_npu_shim=True,
    activated_at_start="sitecustomize",
    npu_shim_origin="/opt/npu_shim/npu_shim/__init__.py",
    verl_plugin=None,
    verl_import_error=None,
    activated_after_verl="sitecustomize",
    report_error=None,
    pythonpath_entries=[PythonpathEntry("/opt/npu_shim", "/opt/npu_shim/sitecustomize.py", True)],
)
NO_SHIM_THERE = dataclasses.replace(PROBE, report_error="npu_shim is not importable here (ModuleNotFoundError)")
LOOKUP = {"device": "npu", "value_model_megatron_error": "AssertionError: Unknown device: npu"}
FINDINGS = dict(
    verl=VerlFacts(True, True, "0.7.1", "/site/verl", None),
    shim=ShimState(True, "sitecustomize", disabled=False, hook_loaded=True),
    torch_npu=TorchNpu(loaded=True, importable=True, version="2.13.0+simulated"),
    mindspeed_installed=True,
    megatron_adaptor_installed=True,
    mindspeed_import_error=ImportFailure("mindspeed.megatron_adaptor", "ModuleNotFoundError: x", "megatron_adaptor"),
    fixes=[FixRow("value_engine", "applied", "added"), FixRow("shared_repatch", "inactive", "off", would="apply")],
    layout=Layout("0.6/0.7", "0.6/0.7: no value engine"),
    unrecognised=[FixGap("megatron_critic", True)],
    mindspeed=MindSpeedOffer(True, "/site/mindspeed", True, None, ["ring context parallelism"]),
    bridge=Bridge("mbridge", None, None),
    engine_device="npu",
    registry=[RegistryRow("value_model", "megatron", "npu", None, "verl.X", "shim", False)],
)
ROUTES = Routes(
    Route("/opt/npu_shim", True, "activated at start-up"),
    Route(False, False, "not used (the shim comes by PYTHONPATH)", needed=False),
    Route(True, False, "installed; not needed here"),
    effective="PYTHONPATH",
)
FULL = Report(
    "problem",
    npu_shim_version="0.1.0",
    probed_in="a fresh interpreter",
    probe=PROBE,
    routes=ROUTES,
    megatron_adaptor=AdaptorOrder(True, True, [], "first"),
    **LOOKUP,
    **FINDINGS,
)
# The keys `npu-shim doctor --json` has printed since 0.1.0 (0.2.0 added the last five of them).
KEYS = {
    "status", "exit_code", "error", "npu_shim_version", "probed_in", "probe", "routes", "megatron_adaptor",
    "device", "assumed_device", "value_model_megatron_resolves", "value_model_megatron_class",
    "value_model_megatron_error", "rollout_ipc",
    "verl", "shim", "torch_npu", "fixes", "layout", "unrecognised", "mindspeed", "bridge", "engine_device",
    "registry", "needed_but_off", "mindspeed_installed", "megatron_adaptor_installed",
    "transformer_engine_installed", "mindspeed_import_error", "mindspeed_adaptor_has_repatch",
    "transformer_engine_import_error",
}  # fmt: skip


def test_a_full_report_is_one_flat_object_with_the_keys_the_doctor_always_printed():
    data = json.loads(json.dumps(FULL.to_json()))
    assert set(data) == KEYS
    assert (data["status"], data["exit_code"]) == ("problem", 1)
    assert data["registry"] == [
        {"model_type": "value_model", "backend": "megatron", "device": "npu", "vendor": None, "class": "verl.X",
         "origin": "shim", "patched": False}
    ]  # fmt: skip
    assert list(data["routes"]) == ["PYTHONPATH", "VERL_USE_EXTERNAL_MODULES", "verl.plugins", "effective"]
    assert data["routes"]["VERL_USE_EXTERNAL_MODULES"]["needed"] is False
    assert data["routes"]["PYTHONPATH"]["configured"] == "/opt/npu_shim"
    assert data["mindspeed_import_error"] == {
        "module": "mindspeed.megatron_adaptor", "error": "ModuleNotFoundError: x", "missing": "megatron_adaptor"
    }  # fmt: skip
    assert data["value_model_megatron_error"] == "AssertionError: Unknown device: npu"
    assert data["fixes"][1] == {"fix": "shared_repatch", "verdict": "inactive", "reason": "off", "would": "apply"}
    assert data["probe"]["pythonpath_entries"] == [
        {"entry": "/opt/npu_shim", "sitecustomize": "/opt/npu_shim/sitecustomize.py", "npu_shim": True}
    ]


def test_every_shape_reads_back_as_the_same_report():
    no_probe = Report("error", error="no Ray cluster answered", npu_shim_version="0.1.0", probed_in="a Ray worker")
    lookup_only = Report("problem", error="npu_shim is not importable here", probe=NO_SHIM_THERE, **LOOKUP)
    for report in (FULL, no_probe, lookup_only):
        written = json.loads(json.dumps(report.to_json()))
        assert Report.from_json(written) == report
        assert Report.from_json(written).to_json() == written


def test_every_report_has_every_key_null_where_nothing_was_read():
    """A report without a probe (a timeout, no Ray cluster) is read the same way as a full one."""
    data = Report("error", error="timed out", npu_shim_version="0.1.0", probed_in="a fresh interpreter").to_json()
    assert set(data) == KEYS
    assert (data["status"], data["exit_code"], data["error"]) == ("error", 2, "timed out")
    assert data["probe"] is data["routes"] is data["verl"] is data["shim"] is None
    assert (data["fixes"], data["registry"], data["value_model_megatron_resolves"]) == ([], [], False)


def test_the_probes_own_lookup_without_npu_shim_reads_as_a_lookup_only_report():
    """probe.py writes these keys with the standard library where npu_shim is not importable (no status): they are
    the report's own fields, under their own names."""
    source = (Path(npu_shim.doctor.__file__).parent / "probe.py").read_text()
    written = set(re.findall(r'^        "(\w+)": ', source[source.index("def _minimal_verl_facts") :], re.M))
    assert written == {"device", "assumed_device", "value_model_megatron_resolves", "value_model_megatron_error"}
    probed = {
        "probe": json.loads(json.dumps(to_json(NO_SHIM_THERE))),
        "device": "npu",
        "value_model_megatron_resolves": False,
        "value_model_megatron_error": "AssertionError: Unknown device: npu",
    }
    report = Report.from_json(probed)
    assert (report.status, report.exit_code, report.shim, report.routes) == ("error", 2, None, None)
    assert (report.device, report.value_model_megatron_error) == (
        LOOKUP["device"],
        LOOKUP["value_model_megatron_error"],
    )
    assert report.probe == NO_SHIM_THERE


@pytest.mark.parametrize(("status", "exit_code"), [("ok", 0), ("not judged", 0), ("not applicable", 0),
                                                   ("problem", 1), ("error", 2)])  # fmt: skip
def test_the_exit_code_follows_from_the_status(status, exit_code):
    assert Report(status).exit_code == exit_code
    assert dataclasses.replace(FULL, status=status).to_json()["exit_code"] == exit_code


def test_an_unknown_status_is_refused():
    with pytest.raises(ValueError, match="unknown status 'fine'"):
        Report("fine")


def test_a_report_missing_a_key_is_refused_by_name():
    data = FULL.to_json()
    del data["shim"]["hook_loaded"]
    with pytest.raises(ValueError, match=r"ShimState: no hook_loaded"):
        Report.from_json(data)
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        Report.from_json([])
    data = FULL.to_json()
    data["fixes"] = "applied"
    with pytest.raises(ValueError, match=r"Report\.fixes: expected a JSON list, got str"):
        Report.from_json(data)


def test_a_probe_report_another_npu_shim_wrote_is_an_error_not_a_traceback(monkeypatch):
    """The probe imports the npu_shim of the probed interpreter, which may be another release than the doctor's."""
    older = FULL.to_json()
    del older["routes"], older["torch_npu"]
    monkeypatch.setattr(npu_shim.doctor, "probe_in_fresh_interpreter", lambda timeout, device: older)
    report = npu_shim.doctor.collect()
    assert (report.status, report.exit_code) == ("error", 2)
    assert report.error == f"the probe's report is not one npu_shim {npu_shim.__version__} reads: Report: no torch_npu"
    assert report.probed_in == "a fresh interpreter"
    assert render(report).splitlines()[-1].split() == ["status", "error", "(exit", "2)"]
