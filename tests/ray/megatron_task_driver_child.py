"""A child of tests/ray/test_megatron_adaptor_ray.py: ``megatron_task_driver_child.py CHECKOUT``, a Ray driver.

Without the shim itself, it starts a local cluster and runs one task that imports ``megatron.core`` twice: once with
a runtime_env that puts the checkout ``CHECKOUT`` first on PYTHONPATH, once without. Prints one JSON report: each
task's MegatronAdaptor stand-in loaded and its record, verl, its process id; what of them the driver imported.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import ray

CHECKOUT = sys.argv[1]


@ray.remote(num_cpus=1)
def megatron_worker() -> dict[str, Any]:
    import megatron.core  # noqa: F401 - what the task does: never verl

    adaptor = sys.modules.get("megatron_adaptor")
    return {
        "adaptor_loaded": adaptor is not None,
        "megatron_first": getattr(adaptor, "MEGATRON_FIRST", None),
        "verl": any(name.partition(".")[0] == "verl" for name in sys.modules),
        "pid": os.getpid(),
    }


ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
try:
    with_shim = {"env_vars": {"PYTHONPATH": os.pathsep.join([CHECKOUT, os.environ["PYTHONPATH"]])}}
    tasks = [megatron_worker.options(runtime_env=with_shim).remote(), megatron_worker.remote()]
    shim, plain = ray.get(tasks, timeout=300)
    driver = [name for name in sys.modules if name.partition(".")[0] in ("megatron", "megatron_adaptor", "npu_shim")]
    print(json.dumps({"shim": shim, "plain": plain, "driver": driver, "driver_pid": os.getpid()}))
finally:
    ray.shutdown()
