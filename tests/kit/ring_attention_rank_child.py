"""A child of tests/kit/test_parallel_kit.py: one of two CP ranks running MindSpeed's ring attention, in compute mode.

No arguments; the environment gives ``RANK``, ``MASTER_ADDR``/``MASTER_PORT`` and ``ORDER``: ``repatch first``
(MindSpeed told about CP before Megatron's parallel state: it builds its ring) or ``mesh first`` (it never does).
Prints one JSON report: the attention class MindSpeed put in Megatron's place, and its output and gradients on this
rank's chunks against causal attention over the whole sequences (ring_case.py), or the error of its first forward.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch_npu  # noqa: F401 - the simulated device
from child_report import gap, npu
from ring_case import causal_reference, verl_chunks

report: dict[str, Any] = {}
rank = int(os.environ["RANK"])
torch.distributed.init_process_group("cpu:gloo,npu:hccl", rank=rank, world_size=2)
# MindSpeed's adaptor after the process group and before Megatron's modules, as the check always imported them
# isort: split
import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: E402, PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)

# isort: split
from megatron.core import parallel_state  # noqa: E402
from megatron.core.transformer.dot_product_attention import DotProductAttention  # noqa: E402
from megatron.core.transformer.enums import AttnMaskType  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

ORDER = os.environ["ORDER"]  # "repatch first": MindSpeed builds its ring; "mesh first": it never does
if ORDER == "mesh first":
    parallel_state.initialize_model_parallel(context_parallel_size=2)
megatron_adaptor.repatch({"context_parallel_size": 2})
if ORDER == "repatch first":
    parallel_state.initialize_model_parallel(context_parallel_size=2)
config = TransformerConfig(
    num_layers=1, hidden_size=32, num_attention_heads=4, num_query_groups=2, context_parallel_size=2,
    attention_dropout=0.0,
)  # fmt: skip
attention = DotProductAttention(config, 1, AttnMaskType.causal, "self")  # what MindSpeed put in its place
report["class"] = f"{type(attention).__module__}.{type(attention).__qualname__}"

case = verl_chunks(rank)
expected, reference_leaves = causal_reference(case)
mine = case.mine
leaves = [npu(x[mine]).requires_grad_() for x in (case.q, case.k, case.v)]
try:
    out = attention(*leaves, None, packed_seq_params=case.packed)
    out.backward(npu(case.dy[mine]))
except AssertionError as error:
    report["error"] = str(error)
else:
    report["out"] = [str(out.device), list(out.shape), gap(out, expected[mine])]
    report["grads"] = [
        gap(leaf.grad, reference.grad[mine]) for leaf, reference in zip(leaves, reference_leaves, strict=True)
    ]
print(json.dumps(report))
