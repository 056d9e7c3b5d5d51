"""The doctor never says a wrong word: no advice to install from an index that does not have npu-shim, a failing
verdict where verl or MindSpeed is missing under ``--device npu``, commands that paste as they read, every exit code in
``-h``, the nearest fix name for a misspelt one (and ``--strict``), and a stray ``VERL_ENGINE_DEVICE`` where verl does
not read it. No two lines of one report contradict each other: ``helpers.assert_consistent`` checks every doctor run
of the suite, these included."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
from helpers import ROOT, clean_env, doctor, rendered, run_doctor, shim_source


def test_the_plugin_advice_names_the_checkout_the_doctor_runs_from_never_an_index(synthetic):
    """npu-shim is not on PyPI: `pip install npu-shim` would fail, or install whoever registers the name."""
    run = doctor(clean_env([synthetic("0.9")]), ROOT)  # `python -m npu_shim` from the checkout; no shim there
    reason = run.report["routes"]["verl.plugins"]["reason"]
    python = run.report["probe"]["python"]
    assert f"({shlex.quote(python)} -m pip install {shlex.quote(str(ROOT))}: verl 0.9.0 and later load it)" in reason
    assert "pip install npu-shim" not in rendered(run.report)


def test_an_installed_doctor_names_what_pip_installed_it_from(site, tmp_path):
    """Installed from a folder (or a wheel), PEP 610's direct_url.json says which: that is what to install there."""
    code = "from pathlib import Path; from npu_shim.doctor import command as c; print(c.install_source(Path(c.__file__)"
    code += ".parents[2]))"
    completed = subprocess.run(
        [sys.executable, "-c", code], env=clean_env([site]), cwd=tmp_path, capture_output=True, text=True, check=True
    )
    source = completed.stdout.strip()
    assert source.endswith("npu-shim-source"), source  # tests/helpers.shim_source's copy, which pip installed
    assert 'name = "npu-shim"' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("mindspeed", [True, False], ids=["no verl", "no MindSpeed"])
def test_device_npu_fails_where_verl_or_mindspeed_is_missing(site, synthetic, tmp_path, mindspeed):
    """`RUN npu-shim doctor --device npu` fails the build whose critic would fail: before, no verl was "not
    applicable" (exit 0), and a verl without MindSpeed "ok"."""
    if mindspeed:
        report, status = run_doctor([site], tmp_path, "--device", "npu")
        expected = ["verl is not installed here (--device npu)"]
    else:
        tree = synthetic("0.7.1", with_mindspeed=False)
        (tree / "verl" / "utils" / "device.py").write_text('def get_device_name():\n    return "cuda"\n')
        report, status = run_doctor([site, tree], tmp_path, "--device", "npu", VERL_USE_EXTERNAL_MODULES="npu_shim")
        assert report["value_model_megatron_resolves"] is True  # the lookup alone would have said ok
        expected = ["MindSpeed is not installed: verl's Megatron engines run on an NPU through MindSpeed"]
    assert (status, report["status"], report["problems"]) == (1, "problem", expected)
    assert f"problem (exit 1): {expected[0]}" in rendered(report)


def test_a_route_that_activated_a_shim_with_nothing_to_patch_does_not_say_yes(site, tmp_path):
    """The bootstrap on PYTHONPATH, no verl: it was "PYTHONPATH route yes: ... activated the shim" beside "shim
    inactive"."""
    report, status = run_doctor([site / "npu_shim_bootstrap", site], tmp_path)
    route = report["routes"]["PYTHONPATH"]
    assert (status, report["status"], report["shim"]["active"], route["works"]) == (0, "not applicable", False, False)
    assert route["reason"] == "it activated npu_shim, but verl is not installed: nothing to patch"


def test_every_command_the_doctor_prints_pastes_as_it_reads(synthetic, tmp_path):
    """A checkout in a folder with a space: the suggested PYTHONPATH and pip commands, pasted into a shell, name it
    whole (they were `export PYTHONPATH=/srv/my dir/...:$PYTHONPATH`), and keep what VERL_USE_EXTERNAL_MODULES holds."""
    checkout = shim_source(tmp_path / "my dir")
    run = doctor(clean_env([synthetic("0.9")]), checkout)  # `python -m npu_shim` from that checkout
    routes = run.report["routes"]
    export = re.search(r"\(export (PYTHONPATH=.*)\)$", routes["PYTHONPATH"]["reason"]).group(1)

    def pasted(before: dict[str, str]) -> str:
        script = f'export {export}; printf %s "$PYTHONPATH"'
        return subprocess.run(["bash", "-c", script], env=before, capture_output=True, text=True, check=True).stdout

    bootstrap, rest = pasted({"PYTHONPATH": "/elsewhere"}).split(":")
    assert (bootstrap.startswith(str(checkout)), rest) == (True, "/elsewhere")
    assert pasted({}) == bootstrap  # no trailing ":", which would put each process's working directory on sys.path
    assert (ROOT / "npu_shim_bootstrap" / "sitecustomize.py").read_text() == (
        ROOT / bootstrap.replace(str(checkout), str(ROOT)) / "sitecustomize.py"
    ).read_text()
    pip = re.search(r"-m pip install (.*): verl 0.9.0", routes["verl.plugins"]["reason"]).group(1)
    assert shlex.split(pip) == [str(checkout)]
    named = doctor(clean_env([synthetic("0.9")], VERL_USE_EXTERNAL_MODULES="json,os"), checkout).report
    hint = re.search(
        r"\(export (VERL_USE_EXTERNAL_MODULES=.*)\)$", named["routes"]["VERL_USE_EXTERNAL_MODULES"]["reason"]
    )
    assert shlex.split(hint.group(1)) == ["VERL_USE_EXTERNAL_MODULES=json,os,npu_shim"]


def test_doctor_help_lists_every_exit_code():
    completed = subprocess.run(
        [sys.executable, "-m", "npu_shim", "doctor", "-h"],
        env=clean_env([ROOT]),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    codes = re.findall(r"^  ([0-2])  (\S+)", completed.stdout, re.M)
    assert codes == [("0", "ok;"), ("1", "problem:"), ("2", "no")], completed.stdout
    help_text = " ".join(completed.stdout.split())
    for cause in ("turned off", "Megatron-Bridge", "MindSpeed is missing", "--device npu", "--strict", "--timeout"):
        assert cause in help_text, cause


@pytest.mark.parametrize(
    ("strict", "expected"),
    [({}, (0, "ok")), ({"NPU_SHIM_STRICT": "1"}, (1, "problem")), ("--strict", (1, "problem"))],
    ids=["default", "NPU_SHIM_STRICT=1", "--strict"],
)
def test_a_misspelt_fix_name_gets_the_nearest_and_strict_fails_on_it(site, synthetic, tmp_path, strict, expected):
    args, env = ((strict,), {}) if isinstance(strict, str) else ((), strict)
    report, status = run_doctor(
        [site, synthetic("0.7.1")], tmp_path, *args,
        VERL_USE_EXTERNAL_MODULES="npu_shim", NPU_SHIM_DISABLED_FIXES="value_engin", **env,
    )  # fmt: skip
    assert (status, report["status"]) == expected
    assert report["shim"]["unknown_fixes"] == ["value_engin"]
    assert "no fix is named value_engin (did you mean value_engine?): ignored" in rendered(report)
    if expected[0]:
        assert report["problems"] == ["NPU_SHIM_DISABLED_FIXES names no fix value_engin (strict)"]


def test_a_stray_verl_engine_device_does_not_change_a_verl_that_never_reads_it(site, synthetic, tmp_path):
    """verl before 0.9 looks its engines up for the device it sees, whatever VERL_ENGINE_DEVICE says: a critic that
    fails on this NPU host is still a problem (exit 1), not "not judged" (exit 0)."""
    report, status = run_doctor([site, synthetic("0.7.1")], tmp_path, VERL_ENGINE_DEVICE="cpu")
    assert (status, report["status"], report["engine_device"]) == (1, "problem", "npu")
    assert "VERL_ENGINE_DEVICE" not in rendered(report)


def test_verl_0_9_looks_its_engines_up_for_verl_engine_device_and_the_doctor_follows(site, synthetic, tmp_path):
    """verl 0.9 reads VERL_ENGINE_DEVICE before the device it sees: set to cpu on this NPU host, its critic is looked
    up for cpu, which the doctor does not judge (exit 0), saying why."""
    report, status = run_doctor([site, synthetic("0.9")], tmp_path, VERL_ENGINE_DEVICE="cpu")
    assert (status, report["status"], report["engine_device"]) == (0, "not judged", "cpu")
    assert "npu (engines looked up for cpu: VERL_ENGINE_DEVICE)" in rendered(report)


def test_the_json_of_every_report_holds_the_problems_it_names(site, synthetic, tmp_path):
    report, _ = run_doctor([site, synthetic("0.7.1")], tmp_path)
    assert report["problems"] == ["a Megatron critic's engine does not resolve on an NPU"]
    assert json.loads(json.dumps(report)) == report
