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
adds registered methods that report what the actor built (and the critic's value head, which the
reference needs); nothing else is overridden.

With ``train`` in the plan (verl 0.7 and later; the simulated NPU in compute mode, a tiny model
with weights from ``tests/matrix/train_probe.py``), the driver then plays the trainer's part for the
critic: the calls ``RayPPOTrainer`` makes on the critic's worker group, in its order and with batches
made as it makes them (``init_workers``: ``reset``, ``set_loss_fn``; ``_compute_values``:
``infer_batch``; ``_update_critic``: ``train_mini_batch``), and reports values, metrics and the
float32 Hugging Face reference.

It prints one JSON line: per role, each rank's report, or the error Ray carried back from the
actor. The plan is written by test_verl_workers.py; the simulated NPU comes from PYTHONPATH and
``npu_shim`` is imported only in the ``import`` mode (importing it activates the shim).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
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
    """Methods more on verl's worker, which only read: what this actor built, and in which process."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def npu_shim_e2e_value_head(self) -> list[list[float]]:
        """The critic's value head as the engine holds it: mbridge initialises it, so the reference reads it here."""
        heads = [
            parameter.detach().cpu().float().tolist()
            for chunk in self.engine.module
            for name, parameter in chunk.named_parameters()
            if name.endswith("output_layer.weight")
        ]
        if len(heads) != 1:
            raise RuntimeError(f"{len(heads)} value heads among the engine's parameters")
        return heads[0]

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
        engine: dict[str, Any] = {}
        optimizer: dict[str, Any] = {"lr": 1e-6}
        if PLAN.get("train"):  # the engine computes: train_probe's settings (bf16, one micro-batch of both sequences)
            import train_probe

            engine = {
                "micro_batch_size_per_gpu": 2,
                "infer_micro_batch_size_per_gpu": 2,
                "sequence_parallel": False,
                "use_dist_checkpointing": False,
                "dtype": "bfloat16",
                # init_workers copies these from the critic config (ppo_[infer_]max_token_len_per_gpu, 32768 by
                # default); the engine's micro-batching multiplies them even without dynamic batch sizes
                "max_token_len_per_gpu": 32768,
                "infer_max_token_len_per_gpu": 32768,
            }
            # Megatron's lr scheduler needs a total (more than the two updates made); lr and clipping as
            # train_probe's, with which the critic's loss descends on one batch
            optimizer = {"lr": train_probe.LEARNING_RATE, "total_training_steps": 8, "clip_grad": 1.0}
        config = TrainingWorkerConfig(
            model_type=model_type,
            # the value forward reads the tokenizer's pad id; without train nothing runs, and no tokenizer is written
            model_config=HFModelConfig(path=PLAN["models"][model_type], load_tokenizer=bool(PLAN.get("train"))),
            engine_config=McoreEngineConfig(
                context_parallel_size=PLAN["context_parallel_size"],
                override_transformer_config=PLAN["overrides"].get(model_type, {}),
                **engine,
            ),
            optimizer_config=McoreOptimizerConfig(**optimizer),
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


def jsonable(value: Any) -> Any:
    """Metrics as JSON: numbers (tensors too) as floats, containers element by element, the rest as text."""
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
        return float(value.item())
    return float(value) if isinstance(value, (int, float)) else str(value)


def play_trainer_for_critic(critic: RayWorkerGroup) -> dict[str, Any]:
    """The calls RayPPOTrainer makes on the critic's worker group, with batches made as it makes them.

    One fixed batch (train_probe's: two sequences, left- and right-padded): values, an update, values
    again, a second update; the second pair shows the update changed the critic.
    """
    import torch
    import train_probe
    from verl.protocol import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    began = time.perf_counter()
    # init_workers' calls for a TrainingWorker critic (0.8: always; 0.7.1: with use_legacy_worker_impl="disable",
    # where its trainer converts only FSDP critic configs, so custom code makes these calls for Megatron):
    # reset builds the model and loads the weights; the loss is verl's value_loss bound to the critic's config
    critic.reset()
    # the critic config the trainer binds holds the critic's HFModelConfig
    model_config = HFModelConfig(path=PLAN["models"]["value_model"])
    critic.set_loss_fn(train_probe.loss_function("critic", model_config))
    padded = train_probe.padded_batch()
    # fit() adds these to every step's meta_info before the critic sees the batch
    meta = {
        "global_token_num": padded["attention_mask"].sum(dim=-1).tolist(),
        "temperature": 1.0,
    }

    def trainer_batch(extra: dict[str, Any]) -> Any:
        batch = DataProto.from_dict(tensors={**padded, **extra}, meta_info=dict(meta))
        return left_right_2_no_padding(batch.to_tensordict())

    def compute_values() -> Any:  # RayPPOTrainer._compute_values
        data = trainer_batch({})
        tu.assign_non_tensor(data, compute_loss=False)
        output = critic.infer_batch(data).get()
        return no_padding_2_padding(tu.get(output, "values"), data).float()

    def update_critic(values: Any) -> dict[str, Any]:  # RayPPOTrainer._update_critic
        data = trainer_batch({"values": values, **train_probe.role_tensors("critic", padded)})
        # ppo_mini_batch_size * rollout.n = the whole batch, one epoch, as the critic config would say
        mini_batch = padded["input_ids"].shape[0]
        tu.assign_non_tensor(
            data,
            global_batch_size=mini_batch,
            mini_batch_size=mini_batch,
            epochs=1,
            seed=train_probe.SEED,
            dataloader_kwargs={"shuffle": False},
        )
        output = critic.train_mini_batch(data).get()
        return jsonable(dict(tu.get(output, "metrics")))

    values = compute_values()
    head = torch.tensor(critic.npu_shim_e2e_value_head()[0])
    model_dir = Path(PLAN["models"]["value_model"])
    expected = train_probe.reference("critic", model_dir, padded, head)
    # the trainer's order: the update's old values are what the critic just computed
    first = update_critic(values)
    values_after = compute_values()
    # the same batch and old values again, so that the two losses differ only by the first update
    second = update_critic(values)
    return {
        "values": values.tolist(),
        "values_shape": list(values.shape),
        "values_after_update": values_after.tolist(),
        "reference": expected.tolist(),
        "response_mask": padded["response_mask"].tolist(),
        "tolerance": train_probe.TOLERANCE,
        "updates": [first, second],
        "seconds": round(time.perf_counter() - began, 2),
    }


def main() -> dict[str, Any]:
    if PLAN.get("train"):  # train_probe: the tiny model with weights, the batch, the loss, the reference
        sys.path.insert(0, str(Path(PLAN["root"]) / "tests" / "matrix"))
        import train_probe

        train_probe.write_model_dir(Path(PLAN["models"]["value_model"]), "critic")
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
        report = {
            "driver_pid": os.getpid(),
            "driver_device": get_device_name(),
            "driver_shim": sys.modules["npu_shim"].activated_via() if "npu_shim" in sys.modules else None,
            "roles": collect(groups),
        }
        if PLAN.get("train") and "reports" in report["roles"]["value_model"]:
            try:
                report["critic_steps"] = play_trainer_for_critic(groups["value_model"])
            except ray.exceptions.RayError as error:  # as collect(): the actor's error, for the test to show
                report["critic_steps"] = {"error_type": type(error).__name__, "error": str(error)}
        return report
    finally:
        ray.shutdown()


if __name__ == "__main__":
    print(json.dumps(main(), default=str))
