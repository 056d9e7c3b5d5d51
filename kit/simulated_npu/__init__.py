"""A kit for CPU-only CI of Ascend code paths: a SIMULATED NPU and a MindSpeed stand-in.

Useful to anyone testing verl's NPU paths (or other code that branches on an Ascend NPU) on a machine
without one; npu_shim's own tests are its first users.

What it can show: that code which asks "is there an NPU?" (``torch.npu``,
``verl.utils.device.get_device_name()``) takes its NPU branch, which engine class
verl's registry resolves, that engine constructors run on CPU ranks with real
Megatron parallel state, with which config and when MindSpeed's ``repatch`` is
called, and what that repatch does to the real megatron-core where verl depends
on it: context parallelism's ring state (built only if the repatch came before
the parallel state), arguments that persist between calls, and the
duplicate-patch error of fusion plus batch-invariant attention. What it cannot
show by default: anything that runs on an NPU (every ``torch_npu.npu_*`` kernel raises),
and every other MindSpeed patch (not modelled).

Two modes. The default "runs nothing": the npu device exists but holds no tensor, and
``device_count() == 0``, which keeps verl's ``set_random_seed`` away from Megatron's CUDA RNG
tracker; it costs nothing at import, and the registry, repatch and ring-state tests rely on it.
**Compute mode** is opt-in (``NPU_SHIM_SIM_COMPUTE=1`` in the environment before ``torch_npu`` is
imported; ``simulate_npu(compute=True)``; ``simulated_npu_env(compute=True)``): tensors live on
``npu:0`` and compute on the CPU (a wrapper subclass over CPU tensors, ``torch_npu._compute``),
``torch_npu.contrib.transfer_to_npu`` sends CUDA calls there (MindSpeed's adaptor imports it, as the
real one does), ``npu_fusion_attention`` (with its softmax statistics), its gradient and ``npu_rms_norm``
have reference implementations, mixed-device ops raise as on a device, saved npu tensors load with
``torch.load``'s defaults, ``torch.autocast("npu")`` works and memory figures count; the MindSpeed stand-in
stands in for Transformer Engine's layers and apex's ``FusedAdam``, and computes its context-parallel
(ring) attention across ranks. So verl's Megatron engines run ``initialize()``, ``infer_batch``,
``train_batch``, ``save_checkpoint`` and ``load_checkpoint`` on one gloo rank or several, at tensor,
pipeline and context parallel sizes above one (``tests/matrix/train_probe.py``; 10-20 s a process on 2
cores). The arithmetic is the CPU's: compute mode shows that code paths run and what they compute, not
NPU numerics or speed.

Both stand-ins live in :data:`SIMULATED_DIR`, which must come before the real
packages on ``sys.path``; a ``torch.backends`` entry point next to the stand-in
``torch_npu`` makes ``import torch`` load it, as the real one is loaded.

- In a script: ``simulate_npu()`` before importing verl.
- For child processes (Ray workers included): ``env = simulated_npu_env()``.
- verl's own workers on a local Ray cluster: ``ray.init(**ray_npu_resources(workers))`` gives
  the ``NPU`` resource verl's ``RayWorkerGroup(device_name="npu")`` asks for; the stand-in
  ``torch_npu`` registers an ``hccl`` process-group backend (gloo underneath) for the
  ``init_process_group("cpu:gloo,npu:hccl")`` of verl's workers; ``tiny_model_dir()`` writes a
  config-only Hugging Face model for ``HFModelConfig(path=..., load_tokenizer=False)``.
- In pytest: ``pytest_plugins = ["simulated_npu.pytest_plugin"]`` gives the
  fixtures ``simulated_npu`` and ``repatch_calls``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SIMULATED_DIR = str(Path(__file__).parent / "simulated")
# The MegatronAdaptor stand-in (top-level ``megatron_adaptor``), which MindSpeed core_r0.17.0/core_r0.18.0 import at
# ``import mindspeed``: on the path only for those lines, so that leaving it out shows what a missing MA does.
MEGATRON_ADAPTOR_DIR = str(Path(__file__).parent / "simulated_megatron_adaptor")
MEGATRON_ADAPTOR_LINES = ("core_r0.17.0", "core_r0.18.0")
# The TransformerEngineNPU stand-in (``transformer_engine``, with its package metadata), installed beside MA on those
# lines, as the images install both: with it Megatron's own TE classes wrap TENPU's layers.
TRANSFORMER_ENGINE_NPU_DIR = str(Path(__file__).parent / "simulated_transformer_engine_npu")
REPATCH_LOG_VARIABLE = "NPU_SHIM_SIM_REPATCH_LOG"
MINDSPEED_LINE_VARIABLE = "NPU_SHIM_SIM_MINDSPEED"  # which MindSpeed line the stand-in behaves as
COMPUTE_VARIABLE = "NPU_SHIM_SIM_COMPUTE"  # "1": npu tensors compute on the CPU (read when torch_npu is imported)
MINDSPEED_LINES = (
    "core_r0.16.0",
    "2.3.0_core_r0.12.1",
    "f2b0977e",
    "core_r0.17.0",
    "core_r0.18.0",
    "master",
    "2.1.0_core_r0.12.1",
)

__all__ = [
    "COMPUTE_VARIABLE",
    "MEGATRON_ADAPTOR_DIR",
    "MEGATRON_ADAPTOR_LINES",
    "SIMULATED_DIR",
    "TRANSFORMER_ENGINE_NPU_DIR",
    "fresh_mindspeed",
    "mindspeed_line",
    "ray_npu_resources",
    "read_repatch_log",
    "rendezvous",
    "repatch_calls",
    "ring_state",
    "simulate_npu",
    "simulated_cann_home",
    "simulated_npu_env",
    "tiny_model_dir",
]


def simulate_npu(compute: bool = False) -> None:
    """Make this process see one simulated Ascend NPU. Call it before importing verl.

    ``compute=True``: in compute mode (npu tensors compute on the CPU); call it before anything
    imports ``torch_npu`` (with the simulated directory on ``sys.path``, ``import torch`` does).
    """
    if "verl" in sys.modules and "torch_npu" not in sys.modules:
        raise RuntimeError(
            "verl decides at import whether there is an NPU: call simulated_npu.simulate_npu() before importing verl"
        )
    if compute:
        os.environ[COMPUTE_VARIABLE] = "1"
    if SIMULATED_DIR not in sys.path:
        sys.path.insert(0, SIMULATED_DIR)
    line = os.environ.get(MINDSPEED_LINE_VARIABLE, "").strip()
    if line in MEGATRON_ADAPTOR_LINES:
        for position, directory in enumerate((MEGATRON_ADAPTOR_DIR, TRANSFORMER_ENGINE_NPU_DIR), 1):
            if directory not in sys.path:
                sys.path.insert(sys.path.index(SIMULATED_DIR) + position, directory)
    import torch_npu

    if not getattr(torch_npu, "SIMULATED", False):
        raise RuntimeError(f"a real torch_npu ({torch_npu.__file__}) shadows the simulated one; not simulating")
    if compute and not torch_npu._compute.enabled():
        raise RuntimeError(
            "the simulated torch_npu was imported before simulate_npu(compute=True) and does not compute; "
            f"set {COMPUTE_VARIABLE}=1 before it is imported"
        )


def simulated_npu_env(
    env: Mapping[str, str] | None = None,
    repatch_log: str | os.PathLike[str] | None = None,
    mindspeed_line: str | None = None,
    compute: bool = False,
    megatron_adaptor: bool = True,
    *,
    transformer_engine_npu: bool = True,
) -> dict:
    """A copy of ``env`` (default ``os.environ``) in which Python processes see the simulated NPU.

    ``mindspeed_line`` (one of :data:`MINDSPEED_LINES`) makes the MindSpeed stand-in behave as
    that line; without it, as ``env`` says, else as ``core_r0.16.0``. ``compute=True`` puts them in
    compute mode (npu tensors compute on the CPU); without it, as ``env`` says. On the lines that
    import MegatronAdaptor (:data:`MEGATRON_ADAPTOR_LINES`) its stand-in is installed too, unless
    ``megatron_adaptor=False``: then ``import mindspeed`` fails there, as without the real MA; and the
    TransformerEngineNPU stand-in, unless ``transformer_engine_npu=False``: then Megatron has no Transformer Engine.
    """
    result = dict(os.environ if env is None else env)
    ours = (SIMULATED_DIR, MEGATRON_ADAPTOR_DIR, TRANSFORMER_ENGINE_NPU_DIR)
    entries = [entry for entry in result.get("PYTHONPATH", "").split(os.pathsep) if entry and entry not in ours]
    if mindspeed_line is not None:
        if mindspeed_line not in MINDSPEED_LINES:
            raise ValueError(f"mindspeed_line={mindspeed_line!r}: the stand-in simulates {', '.join(MINDSPEED_LINES)}")
        result[MINDSPEED_LINE_VARIABLE] = mindspeed_line
    line = result.get(MINDSPEED_LINE_VARIABLE, "").strip()
    three_layers = line in MEGATRON_ADAPTOR_LINES
    adaptor = [MEGATRON_ADAPTOR_DIR] if megatron_adaptor and three_layers else []
    engine = [TRANSFORMER_ENGINE_NPU_DIR] if transformer_engine_npu and three_layers else []
    result["PYTHONPATH"] = os.pathsep.join([*entries, SIMULATED_DIR, *adaptor, *engine])
    if repatch_log is not None:
        result[REPATCH_LOG_VARIABLE] = os.fspath(repatch_log)
    if compute:
        result[COMPUTE_VARIABLE] = "1"
    return result


def _simulated_adaptor() -> Any:
    import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)

    if not getattr(megatron_adaptor, "SIMULATED", False):
        raise RuntimeError("mindspeed.megatron_adaptor is the real one, not simulated_npu's stand-in")
    return megatron_adaptor


def repatch_calls() -> list[dict[str, Any]]:
    """The calls to the stand-in ``mindspeed.megatron_adaptor.repatch`` made in this process (a live list)."""
    return _simulated_adaptor().calls


def fresh_mindspeed(line: str | None = None) -> None:
    """Put the MindSpeed stand-in back as a new process has it: Megatron unpatched, default arguments,
    no ring state; ``line`` (one of :data:`MINDSPEED_LINES`) makes it that line from now on.

    MindSpeed's arguments persist between ``repatch`` calls in one process, as they do when verl
    builds colocated roles' engines one after the other: call this between engines only to
    model engines built in processes of their own."""
    _simulated_adaptor().simulate_fresh_process(line)


def mindspeed_line() -> str:
    """The MindSpeed line the stand-in behaves as in this process."""
    _simulated_adaptor()
    from mindspeed import lines

    return lines.current().name


def ring_state() -> dict[str, list[int] | None]:
    """This rank's context-parallel ring as the MindSpeed stand-in built it (``None`` values: never built)."""
    _simulated_adaptor()
    from mindspeed.core.context_parallel import model_parallel_utils

    return model_parallel_utils.ring_state()


def read_repatch_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The calls recorded in other processes through ``simulated_npu_env(repatch_log=path)``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line]


def ray_npu_resources(workers: int = 1, max_colocate_count: int = 3) -> dict[str, Any]:
    """Keyword arguments for ``ray.init`` so that verl can place ``workers`` NPU workers on a CPU machine.

    On the ``npu`` device verl's ``RayResourcePool`` asks one placement-group bundle
    ``{"CPU": max_colocate_count, "NPU": 1}`` per worker (the trainer's ``ResourcePoolManager``
    uses 3); the worker groups of up to that many roles share those bundles, each actor taking
    ``resources={"NPU": 1/max_colocate_count}``. Ray's resources are counted, not measured: pass the
    pool's own ``max_colocate_count``, and keep ``workers * max_colocate_count`` within the machine's cores.
    """
    return {"num_cpus": max_colocate_count * workers, "resources": {"NPU": workers}}


def tiny_model_dir(directory: str | os.PathLike[str], architecture: str = "Qwen2ForCausalLM") -> str:
    """Write a config-only Hugging Face model (no weights, no tokenizer) into ``directory``; return its path.

    Enough for ``HFModelConfig(path=..., load_tokenizer=False)`` and for building verl's engines and
    workers, which read the config; ``...ForTokenClassification`` for a critic (value model).
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": [architecture],
        "model_type": "qwen2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 256,
        "max_position_embeddings": 128,
        "torch_dtype": "bfloat16",
    }
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(path)


def simulated_cann_home(directory: str | os.PathLike[str], version: str = "8.3.RC1") -> str:
    """Write a CANN toolkit's install info file under ``directory`` (``<arch>-linux/ascend_toolkit_install.info``,
    where the toolkit's installer puts it); return ``directory``, for ``ASCEND_HOME_PATH``.

    Its ``version=`` line is what verl's ``get_npu_versions`` reads (CANN 8.3.RC1 is the least IPC needs); the other
    keys are those public copies of the file show, with the kit's values. Nothing else of CANN is there.
    """
    import platform

    arch = platform.machine()
    folder = Path(directory) / f"{arch}-linux"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        "package_name=Ascend-cann-toolkit",
        f"version={version}",
        f"arch={arch}",
        "os=linux",
        f"path={folder}",
    ]
    (folder / "ascend_toolkit_install.info").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(directory)


def rendezvous(world_size: int) -> tuple[Any, dict[str, str]]:
    """A TCPStore for one group of ``world_size`` rank processes, hosted in this process, and the environment
    that points their ``init_process_group`` (env://) at it; keep the store until the ranks have ended.

    Every rank is the store's client, as under torchrun (``TORCHELASTIC_USE_AGENT_STORE``), and the store listens
    on a port the kernel gave it. A port picked free beforehand could be taken by another process before rank 0
    listened on it: rank 0 then died of EADDRINUSE and its peers waited for it until their timeout.
    """
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)
    address = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "TORCHELASTIC_USE_AGENT_STORE": "True"}
    return store, address
