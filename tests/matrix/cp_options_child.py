"""One rank of two: verl's actor engine at CP = 2 with MindSpeed's double-ring options, built and initialised.

``cp_options_child.py MODE OUT --rank R --world-size 2 --jobs JOB[,JOB] [--bridge B]`` (MASTER_ADDR/MASTER_PORT
from the environment, the simulated NPU in compute mode: see :func:`start`). Each JOB is one or more cases of
:data:`CASES` joined by ``-``, whose engines are built one after the other in one process, as verl builds colocated
roles' (MindSpeed keeps every argument any of them set); between jobs Megatron's parallel state and MindSpeed are put
back as a new process has them (``train_probe.as_a_new_job``: the kit's stand-in only, so one job per process with
real MindSpeed). Per engine: ``EngineRegistry.new`` (the repatch, then the device mesh) and ``initialize()`` (the
model build), and where it stopped. Used by tests/matrix/test_cp_options.py and tests/real_mindspeed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import probe
import train_probe

CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "overlap": {"use_cp_send_recv_overlap": True},
    "window": {"cp_window_size": 2},
}
CONTEXT_PARALLEL = 2


def start(mode: str, output: Path, *options: str, ahead: tuple[str, ...] = (), **variables: str) -> Any:
    """This file under one activation in a fresh interpreter, in compute mode (``ahead``: as ``probe.start``)."""
    compute = {train_probe.COMPUTE_VARIABLE: "1"}
    return probe.start(mode, output, *options, script=__file__, ahead=ahead, **compute, **variables)


def start_ranks(mode: str, directory: Path, jobs: str, *options: str, ahead: tuple[str, ...] = ()) -> list[Any]:
    """Two rank processes of one activation running ``jobs``, and their outputs."""
    outputs = [directory / f"{mode}-{jobs.replace(',', '_')}-rank{rank}.json" for rank in range(CONTEXT_PARALLEL)]
    ranks = ("--world-size", str(CONTEXT_PARALLEL), "--jobs", jobs, *options)
    return probe.start_group(
        outputs, lambda rank, output, address: start(mode, output, "--rank", str(rank), *ranks, ahead=ahead, **address)
    )


def run_pairs(
    pairs: dict[str, tuple[str, str, tuple[str, ...]]], directory: Path, ahead: tuple[str, ...] = ()
) -> dict[str, list[dict[str, Any]]]:
    """name -> both ranks' reports, for pairs of (mode, jobs, options) all started at once."""
    started = {}
    for name, (mode, jobs, options) in pairs.items():
        folder = directory / name.replace(" ", "_")
        folder.mkdir(parents=True)
        started[name] = start_ranks(mode, folder, jobs, *options, ahead=ahead)
    flat = {(name, rank): process for name, ranks in started.items() for rank, (process, _) in enumerate(ranks)}
    failed = {key: stderr for key, (status, stderr) in probe.finish(flat).items() if status}
    assert not failed, "\n".join(
        f"{name} rank {rank} failed:\n{stderr[-4000:]}" for (name, rank), stderr in failed.items()
    )
    return {name: [json.loads(output.read_text()) for _, output in ranks] for name, ranks in started.items()}


def te_attention_init() -> dict[str, Any]:
    """Megatron's ``TEDotProductAttention.__init__`` as MindSpeed left it: wrapped or not, and the wrapper's code."""
    from megatron.core.extensions import transformer_engine

    init = transformer_engine.TEDotProductAttention.__init__
    code = getattr(init, "__code__", None)
    return {"wrapped": hasattr(init, "__wrapped__"), "code": getattr(code, "co_qualname", getattr(code, "co_name", ""))}


def build(override: dict[str, Any], model_dir: Path, bridge: str) -> dict[str, Any]:
    """The actor's engine as ``train_probe.build_engine`` builds it at CP = 2, with ``override``; then initialised."""
    from megatron.core import parallel_state
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import HFModelConfig, McoreEngineConfig, McoreOptimizerConfig
    from verl.workers.engine import EngineRegistry

    result: dict[str, Any] = {"override": override, "stage": "build"}
    try:
        model_config = HFModelConfig(path=str(model_dir))
        model_config.model_type = "language_model"
        engine_config = McoreEngineConfig(
            micro_batch_size_per_gpu=2,
            use_remove_padding=True,
            dtype="bfloat16",
            context_parallel_size=CONTEXT_PARALLEL,
            vanilla_mbridge=bridge == train_probe.MBRIDGE,
            override_transformer_config=dict(override),
        )
        optimizer_config = McoreOptimizerConfig(
            lr=train_probe.LEARNING_RATE, total_training_steps=train_probe.TOTAL_TRAINING_STEPS
        )
        engine = EngineRegistry.new(
            "language_model", "megatron", model_config, engine_config, optimizer_config, CheckpointConfig()
        )
        result["te_attention_init"] = te_attention_init()
        result["stage"] = "initialize"
        engine.initialize()
        result["core_attention"] = train_probe.core_attention(engine)
        result["stage"] = "done"
    except Exception as error:  # reported, not raised: the test says what was expected
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc().splitlines()[-12:]
        result.setdefault("te_attention_init", te_attention_init())
        print(f"cp_options_child: {override}: {result['stage']}: {traceback.format_exc()}", file=sys.stderr)
    result["parallel_state_initialized"] = parallel_state.model_parallel_is_initialized()
    return result


def main(mode: str, rank: int, world_size: int, jobs: list[list[str]], bridge: str) -> dict[str, Any]:
    import torch

    report = probe.load_verl(mode)
    report["rank"] = rank
    report["bridge"] = bridge
    report["test_adaptations"] = train_probe.adapt_mbridge_to_megatron() if bridge == train_probe.MBRIDGE else []
    torch.distributed.init_process_group("cpu:gloo,npu:hccl", rank=rank, world_size=world_size)
    report["jobs"] = {}
    with tempfile.TemporaryDirectory() as directory:
        model_dir = train_probe.write_model_dir(Path(directory) / "actor", "actor", bridge=bridge)
        for index, job in enumerate(jobs):
            if index:
                train_probe.as_a_new_job()
            report["jobs"]["-".join(job)] = [build(CASES[case], model_dir, bridge) for case in job]
    torch.distributed.destroy_process_group()
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=probe.MODES)
    parser.add_argument("output", type=Path)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, default=CONTEXT_PARALLEL)
    parser.add_argument("--jobs", required=True, help=f"comma-separated; each one or more of {sorted(CASES)} by '-'")
    parser.add_argument("--bridge", choices=train_probe.BRIDGES, default=train_probe.MBRIDGE)
    arguments = parser.parse_args()
    if arguments.world_size != CONTEXT_PARALLEL:
        raise SystemExit(f"--world-size {CONTEXT_PARALLEL}: context parallelism over every rank")
    chosen = [job.split("-") for job in arguments.jobs.split(",") if job]
    unknown = sorted({case for job in chosen for case in job} - set(CASES))
    if unknown:
        raise SystemExit(f"unknown cases {unknown}: use {sorted(CASES)}")
    # torch loads the stand-in torch_npu at `import torch`, which reads the variable: set by start() before that
    if os.environ.get(train_probe.COMPUTE_VARIABLE) != "1":
        raise SystemExit(f"{train_probe.COMPUTE_VARIABLE}=1 is needed (start() sets it)")
    result = main(arguments.mode, arguments.rank, arguments.world_size, chosen, arguments.bridge)
    arguments.output.write_text(json.dumps(result, indent=2, default=str))
