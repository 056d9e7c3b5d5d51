"""A child of tests/ray/test_ray_workers.py: ``runtime_env_driver_child.py CHECKOUT``, a Ray driver.

With the checkout ``CHECKOUT`` on sys.path, starts a local cluster whose runtime_env is npu_shim's
``ray_runtime_env()`` alone; an actor resolves verl's Megatron critic engine. Prints one JSON list: the engine class's
name (or verl's error), how npu_shim was activated in the actor, the actor's and the driver's process ids.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, sys.argv[1])
import npu_shim.propagation

# the shim before Ray, as the driver this test stands for imports them
# isort: split
import ray

ray.init(
    num_cpus=2,
    include_dashboard=False,
    _node_ip_address="127.0.0.1",
    runtime_env=npu_shim.propagation.ray_runtime_env(),
)


@ray.remote(num_cpus=1)
class Critic:
    def engine(self) -> list:
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
