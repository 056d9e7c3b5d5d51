"""verl's own route on a real local Ray cluster: ``VERL_USE_EXTERNAL_MODULES=npu_shim``, and ``doctor --ray``.

npu_shim is importable in every process (a directory holding a link to the
package, on PYTHONPATH) but no bootstrap is: only ``import verl`` can activate
it. Two clusters, one per way the variable reaches the workers: the driver's
environment (a local cluster inherits it) and a job's ``runtime_env``. In each,
an actor resolves the engine, a subprocess it starts inherits the route, a
process that never imports verl does not load npu_shim, and ``npu-shim doctor
--ray`` run against the cluster reports what a worker of a new job sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, assert_consistent, clean_env, run_in_session

from simulated_npu import SIMULATED_DIR

DRIVER = Path(__file__).with_name("verl_route_driver_child.py")  # its argument: the job's runtime_env, if any


@pytest.fixture
def link(tmp_path: Path) -> Path:
    """A directory that makes npu_shim importable and holds no sitecustomize: no PYTHONPATH bootstrap."""
    directory = tmp_path / "link"
    directory.mkdir()
    (directory / "npu_shim").symlink_to(ROOT / "npu_shim", target_is_directory=True)
    return directory


@pytest.mark.parametrize("reaches_workers", ["driver environment", "job runtime_env"])
def test_verl_imports_the_shim_in_workers_and_the_doctor_reports_a_new_jobs_worker(tmp_path, link, reaches_workers):
    env = clean_env([link, SIMULATED_DIR], RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    if reaches_workers == "driver environment":
        env["VERL_USE_EXTERNAL_MODULES"] = "npu_shim"
        job = []
    else:  # what `npu-shim runtime-env --json` prints for `ray job submit --runtime-env-json`
        printed = subprocess.run(
            [sys.executable, "-m", "npu_shim", "runtime-env", "--json", "--route", "VERL_USE_EXTERNAL_MODULES"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        job = [printed.strip()]
    completed = run_in_session([sys.executable, str(DRIVER), *job], env=env, cwd=tmp_path, timeout=600)
    assert completed.returncode == 0, completed.stderr[-4000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])

    assert result["name"] == "MindspeedEngineWithValueHead"
    assert result["via"] == "VERL_USE_EXTERNAL_MODULES"
    assert result["pid"] != result["driver_pid"]
    assert result["child"] == ["MindspeedEngineWithValueHead", "VERL_USE_EXTERNAL_MODULES"]
    assert result["bare"] == ["False"], "a process that never imports verl loaded npu_shim"
    assert result["pythonpath"] == env["PYTHONPATH"], "this route must not add a bootstrap to PYTHONPATH"

    assert (result["hurried_exit"], result["hurried"]["status"]) == (2, "error")
    assert "within 1 s" in result["hurried"]["error"], result["hurried"]["error"]

    doctor = result["doctor"]
    assert_consistent(doctor)
    assert_consistent(result["hurried"])
    assert doctor["probed_in"].startswith("a Ray worker of the cluster at ")
    assert doctor["probe"]["pid"] not in (result["pid"], result["driver_pid"])
    assert doctor["device"] == "npu"
    if reaches_workers == "driver environment":  # the cluster's own environment has the variable
        assert (result["doctor_exit"], doctor["status"]) == (0, "ok")
        assert doctor["routes"]["effective"] == "VERL_USE_EXTERNAL_MODULES"
    else:  # the doctor's own job has no runtime_env: its worker is the misconfigured one
        assert (result["doctor_exit"], doctor["status"]) == (1, "problem")
        assert doctor["routes"]["effective"] is None
        assert doctor["probe"]["environment"]["VERL_USE_EXTERNAL_MODULES"] is None


def test_verl_route_in_the_driver_leaves_pythonpath_alone(tmp_path, link):
    """`import verl` in the driver activates the shim and adds nothing to os.environ (children inherit the variable)."""
    code = (
        "import os, sys, verl.workers.engine\n"
        "print(sys.modules['npu_shim'].activated_via(), os.environ['PYTHONPATH'] == os.environ['EXPECTED'])"
    )
    pythonpath = os.pathsep.join([str(link), SIMULATED_DIR])
    env = clean_env([link, SIMULATED_DIR], VERL_USE_EXTERNAL_MODULES="npu_shim", EXPECTED=pythonpath)
    completed = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=True
    )
    assert completed.stdout.split()[-2:] == ["VERL_USE_EXTERNAL_MODULES", "True"]
