"""A real local Ray cluster: the shim reaches the actor processes where verl builds its engines.

Runs in the verl 0.7.1 environment (verl depends on Ray). Each driver is a fresh
interpreter with a clean environment; the cluster is loopback-only, small, bounded
in time and always shut down.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import ROOT, clean_env, run_in_session

from simulated_npu import SIMULATED_DIR

DRIVER = Path(__file__).with_name("runtime_env_driver_child.py")


def drive(tmp_path, **env: str) -> list[str]:
    completed = run_in_session(
        [sys.executable, str(DRIVER), str(ROOT)],
        env=clean_env([SIMULATED_DIR], RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", **env),
        cwd=tmp_path,
        timeout=420,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_an_actor_gets_the_shim_from_the_runtime_env_helper_alone(tmp_path):
    # import npu_shim in the driver, and no shim at all, are covered with verl's own workers in tests/e2e.
    name, activated_via, actor_pid, driver_pid = drive(tmp_path, NPU_SHIM_PROPAGATE="0")
    assert name == "MindspeedEngineWithValueHead"
    assert activated_via == "sitecustomize"
    assert actor_pid != driver_pid
