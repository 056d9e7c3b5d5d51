"""verl #6762 (``npu_smi_card``): the vLLM rollout's IPC decision on hosts without NPU 1, on this release's own code.

Two children (npu_smi_card_child.py), one with the shim and one without, each deciding every case below through
verl's own ``is_support_ipc`` 20 times (a rollout's start and its weight syncs) on the simulated host: the kit's
``npu-smi`` (its cards set per case), a CANN install info file under ``ASCEND_HOME_PATH``, the simulated torch_npu.
verl 0.6.1 has no probe: there the test reads that its code never runs ``npu-smi``. And the doctor (``--device npu``)
on the host whose cards are 4-7 names the decision and the card.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import ROOT, clean_env, doctor, run_python_file

from simulated_npu import simulated_cann_home, simulated_npu_env

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
HAS_PROBE = VERL not in ("0.6.1",)
HERE = Path(__file__).parent
BIN = Path(sys.executable).parent  # where the kit's console script npu-smi is installed
NO_NPU_SMI = "/usr/bin:/bin"
VERL_ERROR = "RuntimeError: Failed to execute npu-smi command"
OLD = "25.2.0"  # a driver below the 25.3.rc1 IPC needs

CASES = {
    "card 0": {"NPU_SHIM_SIM_NPU_IDS": "0"},
    "cards 4-7": {"NPU_SHIM_SIM_NPU_IDS": "4-7"},
    "cards 4-7, visible": {"NPU_SHIM_SIM_NPU_IDS": "4-7", "ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"},
    "cards 4-7, visible, old driver": {"NPU_SHIM_SIM_NPU_SOFTWARE": OLD},
    "A3 card 2, die 5 visible": {"NPU_SHIM_SIM_NPU_IDS": "2", "NPU_SHIM_SIM_NPU_CHIPS": "2",
                                 "ASCEND_RT_VISIBLE_DEVICES": "5", "NPU_SHIM_SIM_NPU_SOFTWARE": None},
    "card 1 present": {"NPU_SHIM_SIM_NPU_IDS": None, "NPU_SHIM_SIM_NPU_CHIPS": None, "ASCEND_RT_VISIBLE_DEVICES": None},
    "card 1 present, old driver": {"NPU_SHIM_SIM_NPU_SOFTWARE": OLD},
    "card 1 present, old CANN": {"NPU_SHIM_SIM_NPU_SOFTWARE": None, "ASCEND_HOME_PATH": "{old_cann}"},
    "no CANN info file": {"ASCEND_HOME_PATH": "{empty}"},
    "no npu-smi": {"ASCEND_HOME_PATH": "{cann}", "PATH": NO_NPU_SMI},
    "A5, no npu-smi": {"NPU_SHIM_SIM_DEVICE_NAME": "Ascend950PR"},
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[bool, dict]:
    """Each case's outcome with the shim (True) and without (False), and the shim's stderr."""
    if not (BIN / "npu-smi").exists():
        pytest.fail(f"no npu-smi in {BIN}: reinstall the kit (simulated-npu), whose console script it is")
    tmp = tmp_path_factory.mktemp("npu_smi_card")
    paths = {
        "cann": simulated_cann_home(tmp / "cann"),
        "old_cann": simulated_cann_home(tmp / "old-cann", version="8.2.RC1"),
        "empty": str(tmp),
    }
    cases = {
        name: {key: value.format(**paths) if value else value for key, value in variables.items()}
        for name, variables in CASES.items()
    }
    result: dict = {}
    for shim in (True, False):
        env = clean_env([ROOT] if shim else [], PATH=f"{BIN}{os.pathsep}{NO_NPU_SMI}", ASCEND_HOME_PATH=paths["cann"])
        env["NPU_SHIM_SIM_NPU_SMI_LOG"] = str(tmp / f"calls-{shim}.log")
        run = run_python_file(HERE / "npu_smi_card_child.py", simulated_npu_env(env), json.dumps(cases), cwd=tmp)
        assert run.report["shim"] is shim
        result[shim] = run.report["cases"]
        result[f"stderr-{shim}"] = run.stderr
    return result


needs_probe = pytest.mark.skipif(not HAS_PROBE, reason=f"verl {VERL} has no npu-smi probe (checked by its own test)")


def test_a_release_without_the_probe_never_runs_npu_smi():
    if HAS_PROBE:
        pytest.skip(f"verl {VERL} has the probe: the tests below")
    from importlib.util import find_spec

    (package,) = find_spec("verl").submodule_search_locations  # read, not imported
    assert "npu-smi" not in (Path(package) / "utils" / "device.py").read_text(encoding="utf-8")


@needs_probe
@pytest.mark.parametrize("case", ["card 0", "cards 4-7", "cards 4-7, visible"])
def test_without_the_shim_a_host_without_npu_1_fails_with_verls_error(runs, case):
    answer = runs[False][case]["answer"]
    assert isinstance(answer, str) and answer.startswith(VERL_ERROR) and "exit status 215" in answer, answer


@needs_probe
@pytest.mark.parametrize(
    "case, calls",
    [
        ("card 0", ["info -l", "info -t board -i 0"]),
        ("cards 4-7", ["info -l", "info -t board -i 4"]),
        ("cards 4-7, visible", ["info -t board -i 4"]),  # the variable names the card: one call in 20 checks
        ("cards 4-7, visible, old driver", ["info -t board -i 4"]),
        ("A3 card 2, die 5 visible", ["info -t board -i 5", "info -t board -i 2"]),  # die 5 is on card 2
    ],
)
def test_with_the_shim_ipc_is_decided_once_from_a_card_the_host_has(runs, case, calls):
    outcome = runs[True][case]
    assert outcome["answer"] is (case != "cards 4-7, visible, old driver"), outcome
    assert outcome["agreed"] and outcome["warnings"] == [], outcome
    assert outcome["calls"] == calls
    assert outcome["card"] == calls[-1].rpartition(" ")[2]


@needs_probe
@pytest.mark.parametrize(
    "case, upstream",
    [("card 1 present", True), ("card 1 present, old driver", False), ("card 1 present, old CANN", False)],
)
def test_where_card_1_answers_the_decision_is_upstreams(runs, case, upstream):
    assert runs[False][case]["answer"] is upstream, runs[False][case]
    assert len(runs[False][case]["calls"]) == 20  # verl asks npu-smi at every check
    assert runs[True][case]["answer"] is upstream and runs[True][case]["agreed"], runs[True][case]
    assert len(runs[True][case]["calls"]) == 2 and runs[True][case]["warnings"] == []  # info -l, then card 0, once


@needs_probe
@pytest.mark.parametrize("case, why", [("no npu-smi", "npu-smi could not be run"), ("no CANN info file", "CANN")])
def test_where_nothing_can_be_read_the_rollout_takes_shared_memory_with_one_warning(runs, case, why):
    assert runs[False][case]["answer"].startswith("RuntimeError: Error checking IPC support"), runs[False][case]
    outcome = runs[True][case]
    assert outcome["answer"] is False and outcome["agreed"], outcome
    assert len(outcome["warnings"]) == 1 and why in outcome["warnings"][0], outcome["warnings"]
    assert "shared memory" in outcome["warnings"][0]
    assert outcome["npu_smi_found"] is (case != "no npu-smi")


@needs_probe
def test_an_a5_answers_without_npu_smi_where_verl_knows_the_a5(runs):
    outcome, upstream = runs[True]["A5, no npu-smi"], runs[False]["A5, no npu-smi"]
    assert upstream["answer"].startswith("RuntimeError: Error checking IPC support"), upstream  # 0.9.1 asks first
    if VERL == "0.9.1":  # the release whose code answers an A5 without versions
        assert outcome["answer"] is True and outcome["calls"] == [] and outcome["warnings"] == [], outcome
    else:  # no A5 rule in this release's code: as any host without npu-smi
        assert outcome["answer"] is False and len(outcome["warnings"]) == 1, outcome


@needs_probe
def test_the_log_line_names_the_fix(runs):
    line = next(line for line in runs["stderr-True"].splitlines() if "changed verl" in line)
    assert "npu_smi_card" in line, line


@needs_probe
def test_the_doctor_names_the_rollouts_decision_and_its_card(tmp_path):
    cann = simulated_cann_home(tmp_path / "cann")
    env = clean_env([ROOT], PATH=f"{BIN}{os.pathsep}{NO_NPU_SMI}", ASCEND_HOME_PATH=cann, NPU_SHIM_SIM_NPU_IDS="4-7")
    report = doctor(simulated_npu_env(env), tmp_path, "--device", "npu").report
    assert report["rollout_ipc"] == "IPC: npu-smi's board of NPU 4: Software Version 25.3.rc1.2, CANN 8.3.rc1"
