"""SIMULATED ``mindspeed.megatron_adaptor``, from npu_shim.testing: ``repatch`` as MindSpeed's behaves.

``repatch(config)`` removes every patch, sets each key of ``config`` on the
process-wide argument namespace (``mindspeed.args_utils.get_mindspeed_args()``:
keys persist between calls, unknown keys are stored too, nothing is validated;
a mapping or a namespace is accepted, anything else raises ``TypeError``),
then registers and applies the patches of every feature now on:

- ``context_parallel_size > 1`` wraps the real
  ``megatron.core.parallel_state.initialize_model_parallel``; the ring state is
  built only when that wrapper runs (see ``mindspeed.core.context_parallel.model_parallel_utils``);
- ``use_flash_attn`` and ``use_flash_attn_npu_batch_invariant`` each replace the
  real ``DotProductAttention.forward``: both on raises
  ``RuntimeError: the patch of forward exist !``, leaving the patches removed.

Each call is also recorded in :data:`calls` (a shallow copy of the config and
whether Megatron's parallel state was already initialised) and, with
``NPU_SHIM_SIM_REPATCH_LOG=<file>``, appended to that file as a JSON line.
Like MindSpeed, importing this module applies the features on by default (none).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from mindspeed.args_utils import forget_mindspeed_args, get_mindspeed_args
from mindspeed.core.context_parallel.model_parallel_utils import forget_ring_state
from mindspeed.features_manager import apply_features
from mindspeed.patch_utils import PatchesManager

SIMULATED = True
calls: list[dict[str, Any]] = []


def repatch(config: dict[str, Any]) -> None:
    _record(config)
    PatchesManager.remove_patches()
    args = get_mindspeed_args()
    # MindSpeed releases take a mapping (verl passes a dict) or an argparse namespace; anything
    # else fails there too (TypeError from vars()).
    for key, value in config.items() if hasattr(config, "items") else vars(config).items():
        setattr(args, key, value)
    apply_features(args)


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


def simulate_fresh_process() -> None:
    """Test-only: Megatron unpatched, MindSpeed's arguments and ring state as a new process has them."""
    PatchesManager.remove_patches()
    forget_mindspeed_args()
    forget_ring_state()
    apply_features(get_mindspeed_args())


apply_features(get_mindspeed_args())
