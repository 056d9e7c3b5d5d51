"""A Ray worker that imports Megatron, and never verl, gets MegatronAdaptor first from npu_shim (issue 34).

vLLM's EngineCore and worker subprocesses under Ray never import verl: verl's VERL_USE_EXTERNAL_MODULES cannot
order their imports, npu_shim's bootstrap on PYTHONPATH can. One local cluster, the driver without the shim:
one task whose runtime_env puts the checkout first on PYTHONPATH, one without it (the kit's MegatronAdaptor
stand-in on the path of both).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import ROOT, clean_env, run_in_session

from simulated_npu import simulated_npu_env

DRIVER = Path(__file__).with_name("megatron_task_driver_child.py")


def test_a_ray_task_that_imports_megatron_gets_megatron_adaptor_first_from_the_shim_on_pythonpath(tmp_path):
    env = simulated_npu_env(clean_env(), mindspeed_line="core_r0.18.0")
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    completed = run_in_session([sys.executable, str(DRIVER), str(ROOT)], env, tmp_path, 420)
    assert completed.returncode == 0, completed.stderr[-4000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["driver"] == []  # the driver imported none of them: the workers did their own imports
    shim, plain = result["shim"], result["plain"]
    assert len({shim["pid"], plain["pid"], result["driver_pid"]}) == 3
    assert (shim["adaptor_loaded"], shim["megatron_first"], shim["verl"]) == (True, [], False)
    assert (plain["adaptor_loaded"], plain["verl"]) == (False, False)
