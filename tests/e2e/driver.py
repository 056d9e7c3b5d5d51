"""Driver of the end-to-end tests: verl's own workers, spawned by verl's own RayWorkerGroup, on a simulated NPU.

``driver.py PLAN.json`` builds the critic (``value_model``) and the actor role
(``language_model``) as ``RayPPOTrainer.init_workers`` does: verl's config classes,
``RayClassWithInitArgs``, ``create_colocated_worker_cls``, ``RayWorkerGroup(device_name="npu")``
over a ``RayResourcePool`` made as the trainer's ``ResourcePoolManager`` makes it, then
``spawn()``. Each role gets a worker group (and processes) of its own, so that what MindSpeed
is asked in an actor belongs to one engine; with ``colocate`` they share one, as the trainer
runs them: verl's fused worker builds the roles one after the other in one process, the
second engine finding the first one's parallel state and MindSpeed's arguments.

The worker is verl's ``TrainingWorker`` (0.7 and later; it builds the engine in ``__init__``)
or, on 0.6, ``verl.workers.roles.CriticWorker``/``ActorWorker`` (they build it in
``_build_engine``, the first half of ``init_model``; the second half loads weights). A subclass
adds one registered method that reports what the actor built; nothing else is overridden.

It prints one JSON line: per role, each rank's report, or the error Ray carried back from the
actor. The plan is written by test_verl_workers.py; the simulated NPU comes from PYTHONPATH and
``npu_shim`` is imported only in the ``import`` mode (importing it activates the shim).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

PLAN = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
if PLAN["mode"] == "import":  # the shim in the driver only: actors get it through the PYTHONPATH it exports
    sys.path.insert(0, PLAN["root"])
    import npu_shim  # noqa: F401

import ray  # noqa: E402
from verl.single_controller.base.decorator import Dispatch, register  # noqa: E402
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup  # noqa: E402
from verl.single_controller.ray.base import create_colocated_worker_cls  # noqa: E402
from verl.trainer.config import CheckpointConfig  # noqa: E402
from verl.utils.device import get_device_name  # noqa: E402
from verl.workers.config import HFModelConfig, McoreEngineConfig, McoreOptimizerConfig  # noqa: E402

# verl 0.6 has engine-based workers per role and no TrainingWorker (0.7 and later)
HAS_TRAINING_WORKER = importlib.util.find_spec("verl.workers.engine_workers") is not None

ROLE_NAMES = {"value_model": "critic", "language_model": "actor"}  # str(Role.Critic), str(Role.Actor)


class Reports:
    """One method more on verl's worker: what this actor built, and in which process."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)  # refs back, so the driver's wait is bounded
    def npu_shim_e2e_report(self) -> dict[str, Any]:
        import torch.distributed
        from mindspeed.core.context_parallel import model_parallel_utils  # the stand-in's ring state

        if "engine" not in self.__dict__:  # verl 0.6's roles build their engine in init_model
            self._build_engine()
        from megatron.core.transformer import dot_product_attention

        shim = sys.modules.get("npu_shim")
        engine_cls = type(self.engine)
        forward = dot_product_attention.DotProductAttention.forward
        return {
            "pid": os.getpid(),
            "rank": torch.distributed.get_rank(),
            "backend": torch.distributed.get_backend(),
            "device": get_device_name(),
            "worker": f"{type(self).__mro__[1].__module__}.{type(self).__mro__[1].__qualname__}",
            "engine": f"{engine_cls.__module__}.{engine_cls.__qualname__}",
            "engine_added_by_npu_shim": getattr(engine_cls, "__npu_shim__", False) is True,
            "shim_activated_via": shim.activated_via() if shim else None,
            "ring_state": model_parallel_utils.ring_state(),
            # MindSpeed's patches are class-level: what every model in this process gets, when asked
            "attention_forward": f"{forward.__module__}.{forward.__qualname__}",
        }


if HAS_TRAINING_WORKER:
    from verl.workers.engine_workers import TrainingWorker, TrainingWorkerConfig

    class ReportingTrainingWorker(TrainingWorker, Reports):
        pass

    def worker_and_config(model_type: str) -> tuple[type, Any]:
        """As RayPPOTrainer.init_workers turns a critic config into a TrainingWorkerConfig."""
        config = TrainingWorkerConfig(
            model_type=model_type,
            model_config=HFModelConfig(path=PLAN["models"][model_type], load_tokenizer=False),
            engine_config=McoreEngineConfig(
                context_parallel_size=PLAN["context_parallel_size"],
                override_transformer_config=PLAN["overrides"].get(model_type, {}),
            ),
            optimizer_config=McoreOptimizerConfig(lr=1e-6),
            checkpoint_config=CheckpointConfig(),
        )
        return ReportingTrainingWorker, config

else:
    from verl.workers.config import McoreActorConfig, McoreCriticConfig
    from verl.workers.roles import ActorWorker, CriticWorker

    class ReportingCriticWorker(CriticWorker, Reports):
        pass

    class ReportingActorWorker(ActorWorker, Reports):
        pass

    def worker_and_config(model_type: str) -> tuple[type, Any]:
        """The configs verl 0.6's role workers read (engine, optim, model_config, checkpoint)."""
        config_cls, worker = (
            (McoreCriticConfig, ReportingCriticWorker)
            if model_type == "value_model"
            else (McoreActorConfig, ReportingActorWorker)
        )
        config = config_cls(
            strategy="megatron",
            engine=McoreEngineConfig(context_parallel_size=PLAN["context_parallel_size"]),
            optim=McoreOptimizerConfig(lr=1e-6),
            model_config=HFModelConfig(path=PLAN["models"][model_type], load_tokenizer=False),
            checkpoint=CheckpointConfig(),
            ppo_micro_batch_size_per_gpu=1,
        )
        return worker, config


def spawn(model_types: list[str], pool: RayResourcePool) -> dict[str, RayWorkerGroup]:
    """The worker groups of roles colocated in one process, as init_workers makes them per resource pool.

    verl's fused worker builds the roles in the order of ``class_dict``, one after the other.
    """
    class_dict = {}
    for model_type in model_types:
        worker, config = worker_and_config(model_type)
        class_dict[ROLE_NAMES[model_type]] = RayClassWithInitArgs(cls=ray.remote(worker), config=config)
    colocated = create_colocated_worker_cls(class_dict=class_dict)
    group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=colocated, device_name=get_device_name())
    groups = group.spawn(prefix_set=class_dict.keys())
    return {model_type: groups[ROLE_NAMES[model_type]] for model_type in model_types}


def collect(groups: dict[str, RayWorkerGroup]) -> dict[str, Any]:
    """Each rank's report per role, or the error of the actor (creation or method) as Ray carried it back."""
    pending = {model_type: group.npu_shim_e2e_report() for model_type, group in groups.items()}
    results: dict[str, Any] = {}
    for model_type, refs in pending.items():
        try:
            results[model_type] = {"reports": ray.get(refs, timeout=PLAN["timeout"])}
        except ray.exceptions.GetTimeoutError:
            raise
        except ray.exceptions.RayError as error:
            results[model_type] = {"error_type": type(error).__name__, "error": str(error)}
    return results


def main() -> dict[str, Any]:
    ray.init(
        address="local",
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=PLAN["ray_temp_dir"],
        **PLAN["ray_init"],
    )
    try:
        # as ResourcePoolManager.create_resource_pool, one pool; max_colocate_count: the processes per worker
        # (the trainer's 3 would ask Ray for more CPUs than this machine kind has)
        pool = RayResourcePool(
            process_on_nodes=[PLAN["workers"]],
            use_gpu=True,
            max_colocate_count=PLAN["max_colocate_count"],
            name_prefix="global_pool",
        )
        if PLAN["colocate"]:  # every role in one process per worker, as the trainer runs them
            groups = spawn(PLAN["roles"], pool)
        else:  # one process per role, so that what MindSpeed is asked in an actor belongs to one engine
            groups = {model_type: group for role in PLAN["roles"] for model_type, group in spawn([role], pool).items()}
        return {
            "driver_pid": os.getpid(),
            "driver_device": get_device_name(),
            "driver_shim": sys.modules["npu_shim"].activated_via() if "npu_shim" in sys.modules else None,
            "roles": collect(groups),
        }
    finally:
        ray.shutdown()


if __name__ == "__main__":
    print(json.dumps(main(), default=str))
