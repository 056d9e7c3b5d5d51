"""A child of tests/ray/test_switches_ray.py: ``switches_driver_child.py``, a Ray driver on verl's route.

Starts a local cluster whose environment has ``VERL_USE_EXTERNAL_MODULES=npu_shim`` (npu_shim importable, no
bootstrap) and no NPU; three actors import verl's engines, each with its own ``runtime_env``: none, one fix turned off
(``NPU_SHIM_DISABLED_FIXES``), the log line hidden (``NPU_SHIM_LOG_LEVEL``). Then ``npu-shim doctor --ray`` with and
without ``--device npu``. Prints one JSON report; Ray sends the actors' stderr to this driver's stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import ray


class Engines:
    def report(self) -> dict[str, Any]:
        from verl.workers.engine import EngineRegistry

        hook = sys.modules["npu_shim.hook"]
        return {
            "value_devices": sorted(map(str, EngineRegistry._engines["value_model"]["megatron"])),
            "outcomes": {outcome.fix: outcome.verdict for outcome in hook.outcomes},
        }


# One class each: Ray prefixes a line of an actor's stderr with its class's name.
Plain = ray.remote(num_cpus=0)(type("Plain", (Engines,), {}))
OneFixOff = ray.remote(num_cpus=0)(type("OneFixOff", (Engines,), {}))
Quiet = ray.remote(num_cpus=0)(type("Quiet", (Engines,), {}))


def doctor(address: str, *options: str) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, "-m", "npu_shim", "doctor", "--json", "--timeout", "240", "--ray", address, *options],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    return {"exit": completed.returncode, "report": json.loads(completed.stdout)}


ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
try:
    actors = {
        "plain": Plain.remote(),
        "one_fix_off": OneFixOff.options(
            runtime_env={"env_vars": {"NPU_SHIM_DISABLED_FIXES": "value_engine"}}
        ).remote(),
        "quiet": Quiet.options(runtime_env={"env_vars": {"NPU_SHIM_LOG_LEVEL": "WARNING"}}).remote(),
    }
    result: dict[str, Any] = {name: ray.get(actor.report.remote(), timeout=300) for name, actor in actors.items()}
    address = ray.get_runtime_context().gcs_address
    result["doctor"] = doctor(address)
    result["doctor_npu"] = doctor(address, "--device", "npu")
    time.sleep(3)  # Ray forwards workers' stderr to the driver's in batches: let the last ones arrive
    print(json.dumps(result))
finally:
    ray.shutdown()
