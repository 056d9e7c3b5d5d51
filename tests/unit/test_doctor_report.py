"""The doctor's report is one flat JSON object with the keys ``npu-shim doctor --json`` has always printed, every key
in every report, judged and rendered in the probe; the doctor prints what came back, and makes a report itself only
where the probe gave none, or where it ran another npu_shim (``helpers.doctor`` checks every real run's keys)."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT, clean_env, doctor
from synthetic_verl import write_layout

from npu_shim.doctor import command
from npu_shim.doctor.report import EXIT_CODES, blank, with_status
from npu_shim.settings import VERSION

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
    monkeypatch.setattr(command, "probe_in_fresh_interpreter", lambda timeout, options: answer)
    text, status = command.main()
    return json.loads(command.main(as_json=True)[0]), text, status


def test_a_report_without_a_probe_has_every_key_null_where_nothing_was_read(monkeypatch):
    def timed_out(timeout, options):
        raise RuntimeError("the probe did not finish within 600 s")

    monkeypatch.setattr(command, "probe_in_fresh_interpreter", timed_out)
    data = json.loads(command.main(as_json=True)[0])
    assert set(data) == KEYS
    assert (data["status"], data["exit_code"], data["error"]) == ("error", 2, "the probe did not finish within 600 s")
    assert (data["npu_shim_version"], data["probed_in"]) == (VERSION, "a fresh interpreter")
    assert data["probe"] is data["routes"] is data["verl"] is data["shim"] is None
    assert (data["fixes"], data["registry"], data["value_model_megatron_resolves"]) == ([], [], False)
    assert command.main()[0].splitlines()[-1].split() == ["status", "error", "(exit", "2)"]


@pytest.mark.parametrize(("status", "exit_code"), [("ok", 0), ("not judged", 0), ("not applicable", 0),
                                                   ("problem", 1), ("error", 2)])  # fmt: skip
def test_the_exit_code_follows_from_the_status(status, exit_code):
    assert with_status(blank(), status)["exit_code"] == exit_code == EXIT_CODES[status]


def test_an_unknown_status_is_refused():
    with pytest.raises(KeyError, match="fine"):
        with_status(blank(), "fine")


def test_a_probed_interpreter_with_another_npu_shim_release_gets_the_lookup_only(tmp_path):
    """The probe imports the npu_shim of the probed interpreter, which may be another release than the doctor's (0.3.0
    had no ``verl_state.answer`` at all): its report code may judge otherwise, so the probe compares the versions once
    and reads the critic's lookup itself, as where npu_shim is not importable."""
    older = tmp_path / "older" / "npu_shim"
    older.mkdir(parents=True)
    (older / "__init__.py").write_text('__version__ = "0.1.0"\n')
    tree = write_layout(tmp_path / "verl-0.7.1", "0.7.1")
    run = doctor(clean_env([older.parent, tree]), ROOT)  # the checkout's doctor, `python -m npu_shim`
    data = run.report
    assert (data["status"], run.status, data["npu_shim_version"]) == ("problem", 1, VERSION)
    assert data["error"] == (
        "npu_shim's report code did not load here (ImportError: this interpreter's npu_shim is 0.1.0, the doctor's "
        f"{VERSION})"
    )
    assert (data["shim"], data["value_model_megatron_resolves"], data["device"]) == (None, False, "npu")
    assert data["problems"] == ["a Megatron critic's engine does not resolve on an NPU"]


@pytest.mark.parametrize("answer", [[], {"error": "x"}, {"report": "ok"}])
def test_an_answer_that_is_no_report_is_an_error_not_a_traceback(monkeypatch, answer):
    data, _, status = doctor_with(answer, monkeypatch)
    assert (data["status"], status) == ("error", 2)
    assert data["error"].startswith("the probe answered ")


def test_the_probes_text_is_printed_as_it_came(monkeypatch):
    report = with_status({**blank(), "npu_shim_version": VERSION}, "ok")
    _, text, status = doctor_with({"report": report, "text": "rendered there"}, monkeypatch)
    assert (text, status) == ("rendered there", 0)
