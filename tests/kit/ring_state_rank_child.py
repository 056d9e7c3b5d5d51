"""A child of tests/kit/test_mindspeed_standin.py: one of two gloo ranks (the environment gives RANK and
MASTER_ADDR/MASTER_PORT). Prints one JSON report: the ring state the MindSpeed stand-in built when told about CP before
Megatron's parallel state, and when told after it."""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from megatron.core import parallel_state
from mindspeed.megatron_adaptor import repatch, simulate_fresh_process

# MindSpeed's adaptor first, as a process under verl imports it
# isort: split
from mindspeed.core.context_parallel.model_parallel_utils import ring_state

torch.distributed.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=2)
original = parallel_state.initialize_model_parallel
report: dict[str, Any] = {}
# MindSpeed told about CP before Megatron's parallel state exists: its wrapper builds the ring.
repatch({"context_parallel_size": 2})
parallel_state.initialize_model_parallel(context_parallel_size=2)
report["repatch_first"] = ring_state()
parallel_state.destroy_model_parallel()
simulate_fresh_process()
# Told afterwards: the wrapper is installed, but the parallel state was built without it.
parallel_state.initialize_model_parallel(context_parallel_size=2)
repatch({"context_parallel_size": 2})
report["repatch_after"] = ring_state()
report["wrapper_installed_after"] = parallel_state.initialize_model_parallel is not original
parallel_state.destroy_model_parallel()
torch.distributed.destroy_process_group()
print(json.dumps(report))
