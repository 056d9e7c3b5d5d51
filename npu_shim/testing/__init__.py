"""A kit for CPU-only CI of Ascend code paths: a SIMULATED NPU and a MindSpeed stand-in.

What it can show: that code which asks "is there an NPU?" (``torch.npu``,
``verl.utils.device.get_device_name()``) takes its NPU branch, which engine class
verl's registry resolves, that engine constructors run on CPU ranks with real
Megatron parallel state, with which config and when MindSpeed's ``repatch`` is
called, and what that repatch does to the real megatron-core where verl depends
on it: context parallelism's ring state (built only if the repatch came before
the parallel state), arguments that persist between calls, and the
duplicate-patch error of fusion plus batch-invariant attention. What it cannot
show: anything that runs on an NPU (every ``torch_npu.npu_*`` kernel raises),
and every other MindSpeed patch (not modelled).

Both stand-ins live in :data:`SIMULATED_DIR`, which must come before the real
packages on ``sys.path``; a ``torch.backends`` entry point next to the stand-in
``torch_npu`` makes ``import torch`` load it, as the real one is loaded.

- In a script: ``simulate_npu()`` before importing verl.
- For child processes (Ray workers included): ``env = simulated_npu_env()``.
- In pytest: ``pytest_plugins = ["npu_shim.testing.pytest_plugin"]`` gives the
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
REPATCH_LOG_VARIABLE = "NPU_SHIM_SIM_REPATCH_LOG"

__all__ = [
    "SIMULATED_DIR",
    "fresh_mindspeed",
    "read_repatch_log",
    "repatch_calls",
    "ring_state",
    "simulate_npu",
    "simulated_npu_env",
]


def simulate_npu() -> None:
    """Make this process see one simulated Ascend NPU. Call it before importing verl."""
    if "verl" in sys.modules and "torch_npu" not in sys.modules:
        raise RuntimeError(
            "verl decides at import whether there is an NPU: call npu_shim.testing.simulate_npu() before importing verl"
        )
    if SIMULATED_DIR not in sys.path:
        sys.path.insert(0, SIMULATED_DIR)
    import torch_npu

    if not getattr(torch_npu, "SIMULATED", False):
        raise RuntimeError(f"a real torch_npu ({torch_npu.__file__}) shadows the simulated one; not simulating")


def simulated_npu_env(env: Mapping[str, str] | None = None, repatch_log: str | os.PathLike[str] | None = None) -> dict:
    """A copy of ``env`` (default ``os.environ``) in which Python processes see the simulated NPU."""
    result = dict(os.environ if env is None else env)
    entries = [entry for entry in result.get("PYTHONPATH", "").split(os.pathsep) if entry and entry != SIMULATED_DIR]
    result["PYTHONPATH"] = os.pathsep.join([*entries, SIMULATED_DIR])
    if repatch_log is not None:
        result[REPATCH_LOG_VARIABLE] = os.fspath(repatch_log)
    return result


def _simulated_adaptor() -> Any:
    from mindspeed import megatron_adaptor

    if not getattr(megatron_adaptor, "SIMULATED", False):
        raise RuntimeError("mindspeed.megatron_adaptor is the real one, not npu_shim.testing's stand-in")
    return megatron_adaptor


def repatch_calls() -> list[dict[str, Any]]:
    """The calls to the stand-in ``mindspeed.megatron_adaptor.repatch`` made in this process (a live list)."""
    return _simulated_adaptor().calls


def fresh_mindspeed() -> None:
    """Put the MindSpeed stand-in back as a new process has it: Megatron unpatched, default arguments,
    no ring state. MindSpeed's arguments persist between ``repatch`` calls, so tests that build
    several engines in one process call this between them (a real worker builds each in its own)."""
    _simulated_adaptor().simulate_fresh_process()


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
