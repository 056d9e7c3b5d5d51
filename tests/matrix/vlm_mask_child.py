"""A child of tests/matrix/test_upstream_fixes.py: ``vlm_mask_child.py DIRECTORY`` (verl #7372), the shim on or not.

On one gloo rank with Megatron's parallel state (its store a file in ``DIRECTORY``), as verl's caller runs:
``build_vlm_attn_mask_thd`` on a jagged batch on the simulated NPU and then on the release's non-NPU path; prints one
JSON report of both results and the shim's verdicts (none without the shim).
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from verl.models.mcore import model_forward, util

# One gloo rank with Megatron's parallel state (TP = CP = 1), as verl's caller runs: 0.9.1's function reads it.
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(dir=sys.argv[1]), rank=0, world_size=1)
parallel_state.initialize_model_parallel()

ids = torch.nested.nested_tensor([torch.arange(1, 6), torch.arange(1, 4), torch.arange(1, 8)], layout=torch.jagged)


def call() -> dict[str, Any] | None:
    if not hasattr(model_forward, "build_vlm_attn_mask_thd"):  # verl 0.6/0.7
        return None
    padded, mask = model_forward.build_vlm_attn_mask_thd(ids, 0)
    return {"padded": padded.tolist(), "mask": None if mask is None else mask.tolist()}


report = {"npu": getattr(util, "is_npu_available", None), "on_npu": call()}
util.is_npu_available = False  # the release's own path elsewhere, where upstream's fix changes nothing
report["elsewhere"] = call()
hook = sys.modules.get("npu_shim.hook")
report["outcomes"] = {o.fix: o.verdict for o in (hook.outcomes if hook else [])}
parallel_state.destroy_model_parallel()
dist.destroy_process_group()
print(json.dumps(report))
