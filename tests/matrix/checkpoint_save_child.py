"""A child of tests/matrix/test_upstream_fixes.py: ``checkpoint_save_child.py DIRECTORY`` (verl #6322), on the CPU.

After ``import verl`` (the shim on or not), a distributed checkpoint (a tensor and a flattened one) saved in
``DIRECTORY`` and loaded back with megatron-core's own ``dist_checkpointing`` on one gloo rank; prints one JSON
report: loaded back equal, or the error, and the shim's verdicts.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def main(directory: str) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import verl  # noqa: F401 - the shim's hooks are registered where verl is imported, as in verl's workers

    # A CPU-only harness: megatron-core synchronizes the accelerator before it writes; there is none here.
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: "cpu"
    dist.init_process_group("gloo", init_method="file://" + os.path.join(directory, "store"), rank=0, world_size=1)
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor

    weights, flat = torch.arange(16.0).reshape(4, 4), torch.arange(16.0) * 2

    # megatron-core 0.17 and later have no flattened tensors (their distributed optimizer saves its state otherwise)
    flattened = hasattr(ShardedTensor, "from_rank_offsets_flat")

    def state(weights: torch.Tensor, flat: torch.Tensor) -> dict[str, ShardedTensor]:
        # a plain tensor, and a flattened one as the distributed optimizer saves its state (megatron records how to
        # reshape it: the Metadata's mcore_data)
        tensors = {"w": ShardedTensor.from_rank_offsets("w", weights, replica_id=0)}
        if flattened:
            flat_range = slice(0, 16)
            tensors["f"] = ShardedTensor.from_rank_offsets_flat(
                "f", flat, (4, 4), flattened_range=flat_range, replica_id=0
            )
        return tensors

    report: dict[str, Any] = {"flattened": flattened}
    os.makedirs(directory + "/ckpt")
    try:
        dist_checkpointing.save(state(weights, flat), directory + "/ckpt")
        loaded = dist_checkpointing.load(state(torch.zeros(4, 4), torch.zeros(16)), directory + "/ckpt")
        report["loaded_back"] = torch.equal(loaded["w"], weights) and (not flattened or torch.equal(loaded["f"], flat))
    except Exception as error:  # the test asserts which error the release gives
        report["error"] = f"{type(error).__name__}: {error}"
    hook = sys.modules.get("npu_shim.hook")
    report["outcomes"] = {o.fix: o.verdict for o in (hook.outcomes if hook else [])}
    dist.destroy_process_group()
    return report


# Guarded, imports too: megatron-core's writer starts a multiprocessing Manager in a spawn context, which imports this
# file again (a program given as `-c` text, as this one was, is not imported again).
if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
