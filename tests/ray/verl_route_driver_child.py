"""A child of tests/ray/test_verl_route.py: ``verl_route_driver_child.py [RUNTIME_ENV]``, a Ray driver on verl's route.

Starts a local cluster (with the job runtime_env ``RUNTIME_ENV``, JSON, where given); an actor resolves verl's Megatron
critic engine and starts two interpreters (one that imports verl, one that does not); then ``npu-shim doctor --ray``
against the cluster, with time to answer and with 1 s. Prints one JSON report of all of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import ray

RESOLVE = (
    "import sys; from verl.workers.engine import EngineRegistry; "
    "print(EngineRegistry.get_engine_cls('value_model', 'megatron').__name__, sys.modules['npu_shim'].activated_via())"
)
BARE = "import sys; print('npu_shim' in sys.modules)"


def run(code: str) -> list[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False).stdout.split()


@ray.remote(num_cpus=1)
class Critic:
    def report(self) -> dict[str, Any]:
        from verl.workers.engine import EngineRegistry

        try:
            name = EngineRegistry.get_engine_cls("value_model", "megatron").__name__
        except AssertionError as error:
            name = str(error)
        return {
            "name": name,
            "via": sys.modules["npu_shim"].activated_via() if "npu_shim" in sys.modules else None,
            "child": run(RESOLVE),
            "bare": run(BARE),
            "pid": os.getpid(),
            "pythonpath": os.environ.get("PYTHONPATH"),
        }


job = {"runtime_env": json.loads(sys.argv[1])} if len(sys.argv) > 1 else {}
ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", **job)
try:
    result = ray.get(Critic.remote().report.remote(), timeout=300)
    doctor = subprocess.run(
        [sys.executable, "-m", "npu_shim", "doctor", "--json", "--timeout", "240",
         "--ray", ray.get_runtime_context().gcs_address],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    result.update(driver_pid=os.getpid(), doctor_exit=doctor.returncode, doctor=json.loads(doctor.stdout))
    # a cluster that is there, asked for an answer sooner than a worker can import verl and report
    hurried = subprocess.run(
        [sys.executable, "-m", "npu_shim", "doctor", "--json", "--timeout", "1",
         "--ray", ray.get_runtime_context().gcs_address],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    result.update(hurried_exit=hurried.returncode, hurried=json.loads(hurried.stdout))
    print(json.dumps(result))
finally:
    ray.shutdown()
