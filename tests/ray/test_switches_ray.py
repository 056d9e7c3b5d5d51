"""In Ray workers, as verl runs them: the log line, one fix turned off, and ``doctor --device npu`` where no NPU is.

One local cluster on a machine without an NPU (the kit is not on the path), verl's route in the cluster's
environment: what a Dockerfile's ``ENV VERL_USE_EXTERNAL_MODULES=npu_shim`` gives every worker.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, assert_consistent, clean_env, run_in_session

DRIVER = Path(__file__).with_name("switches_driver_child.py")
VERL = importlib.metadata.version("verl")
VERSION = re.search(r'^VERSION = "(.+)"', (ROOT / "npu_shim" / "settings.py").read_text(), re.M)[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """The driver's report, and its stderr (where Ray writes what the workers wrote to theirs)."""
    link = tmp_path_factory.mktemp("link")
    (link / "npu_shim").symlink_to(ROOT / "npu_shim", target_is_directory=True)  # importable, no bootstrap
    env = clean_env([link], VERL_USE_EXTERNAL_MODULES="npu_shim", RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    completed = run_in_session([sys.executable, str(DRIVER)], env=env, cwd=link, timeout=900)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stderr


DEVICE_FIXES = ("npu_smi_card",)  # verl.utils.device's: its own line, at `import verl`, before the engine package's


def _changed(outcomes: dict[str, str]) -> list[str]:
    """The lines a worker whose fixes had ``outcomes`` writes: one a module whose fixes applied (verl.utils.device's,
    then all of verl's engine package's)."""
    applied = [fix for fix, verdict in outcomes.items() if verdict == "applied"]
    modules = [[fix for fix in applied if fix in DEVICE_FIXES], [fix for fix in applied if fix not in DEVICE_FIXES]]
    line = f"npu_shim {VERSION}: changed verl {VERL} in this process: {{}} (NPU_SHIM_LOG_LEVEL=WARNING hides this line)"
    return [line.format(", ".join(fixes)) for fixes in modules if fixes]


def _worker_lines(stderr: str, actor: str) -> list[str]:
    """What the actor class ``actor`` wrote to its stderr, as Ray shows it in the driver's: ``(Plain pid=N) line``
    (colour codes aside)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", stderr)
    return [line.split(") ", 1)[1] for line in plain.splitlines() if re.match(rf"\({actor} pid=\d+\) ", line)]


def _shown(line: str, lines: list[str]) -> bool:
    """``line`` is one of ``lines``, whatever the worker's logging set-up put before it (Ray's workers have one)."""
    return any(shown.endswith(line) for shown in lines)


def test_a_worker_the_shim_changes_says_so_in_the_drivers_console(cluster):
    report, stderr = cluster
    assert report["plain"]["value_devices"] == ["cuda", "npu"]
    lines = _worker_lines(stderr, "Plain")
    expected = _changed(report["plain"]["outcomes"])
    assert all(_shown(line, lines) for line in expected), stderr
    assert sum("npu_shim" in line for line in lines) == len(expected), "once: through the worker's logging, not ours"


def test_one_fix_turned_off_in_a_jobs_runtime_env_stays_off_in_its_worker(cluster):
    report, stderr = cluster
    outcomes = report["one_fix_off"]["outcomes"]
    assert outcomes["value_engine"] == "disabled"
    assert report["one_fix_off"]["value_devices"] == ["cuda"], "verl's registry as it ships"
    assert outcomes == {**report["plain"]["outcomes"], "value_engine": "disabled"}, "the others as without it"
    assert all(_shown(line, _worker_lines(stderr, "OneFixOff")) for line in _changed(outcomes)), stderr


def test_the_log_level_hides_the_line_in_its_worker_only(cluster):
    report, stderr = cluster
    assert report["quiet"]["outcomes"] == report["plain"]["outcomes"]
    assert not [line for line in _worker_lines(stderr, "Quiet") if "npu_shim" in line], stderr


def test_the_doctor_judges_a_worker_without_an_npu_as_on_an_npu_host_when_asked(cluster):
    report, _ = cluster
    plain, assumed = report["doctor"], report["doctor_npu"]
    assert_consistent(plain["report"])
    assert_consistent(assumed["report"])
    assert (plain["exit"], plain["report"]["status"]) == (0, "not judged")
    assert plain["report"]["device"] == "cpu"
    # the lookup is made for npu and resolves; the worker lacks the kit, MindSpeed with it: a problem on an NPU host
    assert (assumed["exit"], assumed["report"]["status"]) == (1, "problem")
    assert assumed["report"]["problems"] == [
        "MindSpeed is not installed: verl's Megatron engines run on an NPU through MindSpeed"
    ]
    assert (assumed["report"]["device"], assumed["report"]["assumed_device"]) == ("cpu", "npu")
    assert assumed["report"]["value_model_megatron_class"].endswith(".MindspeedEngineWithValueHead")
    assert assumed["report"]["probed_in"].startswith("a Ray worker of the cluster at ")
