"""SIMULATED ``mindspeed.megatron_adaptor``, from simulated_npu: ``repatch`` as MindSpeed's behaves.

Importing it applies the features MindSpeed's default arguments turn on (none of the
modelled ones). ``repatch(config)`` removes every patch, sets each key of ``config`` on
the process-wide argument namespace (``mindspeed.args_utils.get_full_args()``: keys persist
between calls, unknown keys are stored too, nothing is validated; a mapping is required,
as ``config.items()`` is what MindSpeed reads), then registers and applies the pre-patches, then the
patches, of every feature now on, for the simulated line (:mod:`mindspeed.lines`):

- ``context_parallel_size > 1`` (lines with ring CP): Megatron's ``DotProductAttention``
  becomes MindSpeed's context-parallel class and ``parallel_state.initialize_model_parallel``
  is wrapped; the ring state is built only when that wrapper runs;
- ``use_flash_attn`` at CP < 2 replaces ``DotProductAttention.forward``;
- ``use_flash_attn_npu_batch_invariant`` (``core_r0.16.0``) replaces it too (and
  ``TEDotProductAttention.forward``): with fusion attention also registered, ``RuntimeError: the
  patch of forward exist !``, the patches left removed;
- the generate-mask feature, on by default, wraps ``DotProductAttention.forward`` at CP < 2, from
  import on: Megatron's forward is a wrapper (bearing the wrapped function's name) wherever it runs.

In compute mode (the stand-in torch_npu's ``NPU_SHIM_SIM_COMPUTE=1``), importing it first imports
``torch_npu.contrib.transfer_to_npu``, as MindSpeed's own ``megatron_adaptor`` does on
``2.3.0_core_r0.12.1`` and ``core_r0.16.0`` (CUDA calls then go to the NPU; on ``core_r0.17.0`` and
``core_r0.18.0`` the MegatronAdaptor stand-in did that when ``mindspeed`` imported it), and the basic features
that let Megatron's models build there are applied too (:mod:`mindspeed.compute`), apex's ``FusedAdam``
(MindSpeed's AdamW) among them.

On ``2.1.0_core_r0.12.1`` there is no ``repatch`` at all. Each call is recorded in
:data:`calls` (a shallow copy of the config and whether Megatron's parallel state was
already initialised) and, with ``NPU_SHIM_SIM_REPATCH_LOG=<file>``, appended to that file
as a JSON line.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

from mindspeed import compute, lines
from mindspeed.args_utils import forget_mindspeed_args, get_full_args, get_mindspeed_args
from mindspeed.core.context_parallel.model_parallel_utils import forget_ring_state
from mindspeed.features_manager import MindSpeedFeaturesManager, forget_generated_mask
from mindspeed.patch_utils import MindSpeedPatchesManager

if compute.compute_mode() and not lines.current().megatron_adaptor_package:  # there MegatronAdaptor's (imported)
    from torch_npu.contrib import transfer_to_npu  # noqa: F401

    compute.install_apex_dummy()  # before anything imports Megatron's optimizers, as MindSpeed's create_dummy

SIMULATED = True
calls: list[dict[str, Any]] = []


def repatch(args: dict[str, Any]) -> None:
    _record(args)
    MindSpeedFeaturesManager.remove_patches()
    full_args = get_full_args()
    for key, value in args.items():
        setattr(full_args, key, value)
    MindSpeedFeaturesManager.apply_features_pre_patches(full_args)
    MindSpeedFeaturesManager.apply_features_patches(full_args)


def _record(config: Any) -> None:
    parallel_state = sys.modules.get("megatron.core.parallel_state")
    record = {
        "config": dict(config) if isinstance(config, dict) else config,
        "parallel_state_initialized": bool(parallel_state and parallel_state.model_parallel_is_initialized()),
        "pid": os.getpid(),
    }
    calls.append(record)
    log = os.environ.get("NPU_SHIM_SIM_REPATCH_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write(json.dumps(record, default=str) + "\n")


def simulate_fresh_process(line: str | None = None) -> None:
    """Test-only: Megatron unpatched, MindSpeed's arguments and ring state as a new process has them.

    ``line`` simulates another MindSpeed line from now on (``repatch`` then exists or not as there).
    """
    MindSpeedPatchesManager.forget()
    if line is not None:
        lines.select(line)
        # its CP wrappers exist only on the lines that have them, as decided when it is imported
        importlib.reload(sys.modules["mindspeed.core.context_parallel.model_parallel_utils"])
    forget_mindspeed_args()
    forget_ring_state()
    forget_generated_mask()
    _expose_repatch()
    _patch_features()


def _expose_repatch() -> None:
    """``from mindspeed.megatron_adaptor import repatch`` fails on a line without it, as on 2.1.0_core_r0.12.1."""
    module = sys.modules[__name__]
    if lines.current().repatch:
        module.repatch = repatch_function
    else:
        vars(module).pop("repatch", None)


def _patch_features() -> None:
    """At import, as MindSpeed's ``patch_features``: the pre-patches, then the patches, of the default arguments."""
    MindSpeedFeaturesManager.apply_features_pre_patches(get_mindspeed_args())
    MindSpeedFeaturesManager.apply_features_patches(get_mindspeed_args())


repatch_function = repatch
_expose_repatch()
_patch_features()
