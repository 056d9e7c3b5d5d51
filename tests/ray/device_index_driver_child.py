"""A child of tests/ray/test_ray_npu_device_index.py: ``device_index_driver_child.py WORKERS``, a Ray driver.

Its environment (the test's) holds ``ASCEND_RT_VISIBLE_DEVICES`` and
``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES``, the simulated NPU on PYTHONPATH and the checkout there or not
(the shim in every process, or none). It starts a local cluster with one ``NPU`` per visible device, and verl's own
``RayWorkerGroup(device_name="npu")`` spawns ``WORKERS`` workers of a bare verl ``Worker`` (one ``NPU`` each), whose
``__init__`` runs verl's ``_setup_env_cuda_visible_devices``. Prints one JSON object: each rank's report (Ray's NPU
id, ``LOCAL_RANK``, the device torch_npu has current, the shim's verdict), or the error Ray carried back from the
workers.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import ray
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

WORKERS = int(sys.argv[1])
TIMEOUT = 240


class Probe(Worker):
    """verl's Worker and one method that only reads."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)  # refs back, so the driver's wait is bounded
    def npu_shim_device_report(self) -> dict[str, Any]:
        import torch

        hook = sys.modules.get("npu_shim.hook")
        outcomes = {outcome.fix: outcome.verdict for outcome in hook.outcomes} if hook is not None else {}
        return {
            "npu_ids": ray.get_runtime_context().get_accelerator_ids()["NPU"],
            "visible": os.environ.get("ASCEND_RT_VISIBLE_DEVICES"),
            "local_rank": os.environ.get("LOCAL_RANK"),
            "current_device": torch.npu.current_device(),
            "verdict": outcomes.get("ray_npu_device_index"),
        }


def main() -> dict[str, Any]:
    devices = len(os.environ["ASCEND_RT_VISIBLE_DEVICES"].split(","))
    ray.init(num_cpus=WORKERS, resources={"NPU": devices}, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        pool = RayResourcePool(process_on_nodes=[WORKERS], use_gpu=True, max_colocate_count=1, name_prefix="pool")
        group = RayWorkerGroup(
            resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(Probe)), device_name="npu"
        )
        try:
            return {"reports": ray.get(group.npu_shim_device_report(), timeout=TIMEOUT)}
        except ray.exceptions.GetTimeoutError:
            raise
        except ray.exceptions.RayError as error:  # a worker died in __init__: verl's set_device raised there
            return {"error_type": type(error).__name__, "error": str(error)}
    finally:
        ray.shutdown()


if __name__ == "__main__":
    print(json.dumps(main()))
