"""A real local Ray cluster: the shim reaches the actor processes where verl builds its engines.

Runs in the verl 0.7.1 environment (verl depends on Ray). Each driver is a fresh
interpreter with a clean environment; the cluster is loopback-only, small, bounded
in time and always shut down.
"""

from __future__ import annotations

import json
import sys
import textwrap

from helpers import ROOT, clean_env, run_in_session

from npu_shim.testing import SIMULATED_DIR

ACTOR = """
import ray

@ray.remote(num_cpus=1)
class Critic:
    def engine(self):
        import os, sys
        from verl.workers.engine import EngineRegistry
        try:
            name = EngineRegistry.get_engine_cls("value_model", "megatron").__name__
        except AssertionError as error:
            name = str(error)
        return [name, sys.modules["npu_shim"].activated_via() if "npu_shim" in sys.modules else None, os.getpid()]

try:
    print(json.dumps([*ray.get(Critic.remote().engine.remote(), timeout=300), os.getpid()]))
finally:
    ray.shutdown()
"""


def drive(setup: str, tmp_path, **env: str) -> list[str]:
    script = tmp_path / "driver.py"
    script.write_text(f"import json, os, sys\nsys.path.insert(0, {str(ROOT)!r})\n" + textwrap.dedent(setup) + ACTOR)
    completed = run_in_session(
        [sys.executable, str(script)],
        env=clean_env([SIMULATED_DIR], RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", **env),
        cwd=tmp_path,
        timeout=420,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


RAY_INIT = "ray.init(num_cpus=2, include_dashboard=False, _node_ip_address='127.0.0.1'{extra})\n"


def test_an_actor_gets_the_shim_from_the_runtime_env_helper_alone(tmp_path):
    # import npu_shim in the driver, and no shim at all, are covered with verl's own workers in tests/e2e.
    setup = "import npu_shim.propagation\nimport ray\n" + RAY_INIT.format(
        extra=", runtime_env=npu_shim.propagation.ray_runtime_env()"
    )
    name, activated_via, actor_pid, driver_pid = drive(setup, tmp_path, NPU_SHIM_PROPAGATE="0")
    assert name == "MindspeedEngineWithValueHead"
    assert activated_via == "sitecustomize"
    assert actor_pid != driver_pid
