"""The doctor's report is one flat JSON object with the keys ``npu-shim doctor --json`` has always printed, every key
in every report, judged and rendered in the probe; the doctor prints what came back, and makes a report itself only
where the probe gave none, or where it ran another npu_shim (``helpers.doctor`` checks every real run's keys)."""

from __future__ import annotations

import json

import pytest

import npu_shim.doctor
from npu_shim.doctor.render import render
from npu_shim.doctor.report import EXIT_CODES, blank, with_status

# The keys `npu-shim doctor --json` has printed since 0.1.0 (0.2.0 added five of them; after 0.3.0 "problems"
# came and "layout", which restated the fixes' verdicts, went).
KEYS = {
    "status", "exit_code", "error", "problems", "npu_shim_version", "probed_in", "probe", "routes", "megatron_adaptor",
    "device", "assumed_device", "value_model_megatron_resolves", "value_model_megatron_class",
    "value_model_megatron_error", "rollout_ipc",
    "verl", "shim", "torch_npu", "fixes", "unrecognised", "mindspeed", "bridge", "engine_device",
    "registry", "needed_but_off", "mindspeed_installed", "megatron_adaptor_installed",
    "transformer_engine_installed", "mindspeed_import_error", "mindspeed_adaptor_has_repatch",
    "transformer_engine_import_error",
}  # fmt: skip


def doctor_with(answer, monkeypatch) -> tuple[dict, str, int]:
    """The doctor's JSON report, its text and exit status where the probe answered ``answer``."""
    monkeypatch.setattr(npu_shim.doctor, "probe_in_fresh_interpreter", lambda timeout, options: answer)
    text, status = npu_shim.doctor.main()
    return json.loads(npu_shim.doctor.main(as_json=True)[0]), text, status


def test_a_report_without_a_probe_has_every_key_null_where_nothing_was_read(monkeypatch):
    def timed_out(timeout, options):
        raise RuntimeError("the probe did not finish within 600 s")

    monkeypatch.setattr(npu_shim.doctor, "probe_in_fresh_interpreter", timed_out)
    data = json.loads(npu_shim.doctor.main(as_json=True)[0])
    assert set(data) == KEYS
    assert (data["status"], data["exit_code"], data["error"]) == ("error", 2, "the probe did not finish within 600 s")
    assert (data["npu_shim_version"], data["probed_in"]) == (npu_shim.__version__, "a fresh interpreter")
    assert data["probe"] is data["routes"] is data["verl"] is data["shim"] is None
    assert (data["fixes"], data["registry"], data["value_model_megatron_resolves"]) == ([], [], False)
    assert npu_shim.doctor.main()[0].splitlines()[-1].split() == ["status", "error", "(exit", "2)"]


@pytest.mark.parametrize(("status", "exit_code"), [("ok", 0), ("not judged", 0), ("not applicable", 0),
                                                   ("problem", 1), ("error", 2)])  # fmt: skip
def test_the_exit_code_follows_from_the_status(status, exit_code):
    assert with_status(blank(), status)["exit_code"] == exit_code == EXIT_CODES[status]


def test_an_unknown_status_is_refused():
    with pytest.raises(KeyError, match="fine"):
        with_status(blank(), "fine")


def test_a_probe_that_ran_another_npu_shim_is_an_error_that_says_which(monkeypatch):
    """The probe imports the npu_shim of the probed interpreter, which may be another release than the doctor's: its
    report may judge otherwise, so the doctor says so rather than print it as its own."""
    probe = {"python": "/opt/other env/bin/python"}
    answer = {"report": {**blank(), "npu_shim_version": "0.1.0", "probe": probe, "status": "ok"}, "text": "ok"}
    data, text, status = doctor_with(answer, monkeypatch)
    assert (data["status"], status, data["npu_shim_version"]) == ("error", 2, npu_shim.__version__)
    assert data["error"] == (
        f"the probed interpreter imports npu_shim 0.1.0, not this doctor's {npu_shim.__version__}: run its own doctor "
        "('/opt/other env/bin/python' -m npu_shim doctor)"
    )
    assert text == render(data)


@pytest.mark.parametrize("answer", [[], {"error": "x"}, {"report": "ok"}])
def test_an_answer_that_is_no_report_is_an_error_not_a_traceback(monkeypatch, answer):
    data, _, status = doctor_with(answer, monkeypatch)
    assert (data["status"], status) == ("error", 2)
    assert data["error"].startswith("the probe answered ")


def test_the_probes_text_is_printed_as_it_came(monkeypatch):
    report = with_status({**blank(), "npu_shim_version": npu_shim.__version__}, "ok")
    _, text, status = doctor_with({"report": report, "text": "rendered there"}, monkeypatch)
    assert (text, status) == ("rendered there", 0)
