"""A child of tests/kit/test_transformer_engine_npu.py: one of two CP ranks, in compute mode on ``core_r0.18.0``.

No arguments; the environment gives ``RANK`` and ``MASTER_ADDR``/``MASTER_PORT``. Megatron's ``TEDotProductAttention``
over TransformerEngineNPU's ring at CP 2 on this rank's chunks, and TENPU's attention at CP 1 over the whole sequences
(ring_case.py's case), both against causal attention in plain torch: prints one JSON report of the ring and the
differences of outputs and gradients.
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
import mindspeed.megatron_adaptor  # noqa: E402, F401 - after the process group, before Megatron's modules

# isort: split
from megatron.core import parallel_state  # noqa: E402
from megatron.core.extensions.transformer_engine import TEDotProductAttention  # noqa: E402
from megatron.core.transformer.enums import AttnMaskType  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402
from transformer_engine.pytorch import DotProductAttention  # noqa: E402

parallel_state.initialize_model_parallel(context_parallel_size=2)
config = TransformerConfig(
    num_layers=1, hidden_size=32, num_attention_heads=4, num_query_groups=2, context_parallel_size=2,
    attention_dropout=0.0, params_dtype=torch.float32,
)  # fmt: skip
attention = TEDotProductAttention(config, 1, AttnMaskType.causal, "self")
report["ring"] = attention.cp_global_ranks

case = verl_chunks(rank)
mine, cu, T = case.mine, case.cu, case.T
leaves = [npu(x[mine]).requires_grad_() for x in (case.q, case.k, case.v)]
out = attention(*leaves, None, AttnMaskType.causal, packed_seq_params=case.packed)
out.backward(npu(case.dy[mine].reshape(len(mine), -1)))

# CP 1: TENPU's attention over the whole sequence, no CP group
whole = DotProductAttention(case.N, case.D, num_gqa_groups=case.G, attn_mask_type="padding_causal", qkv_format="thd")
whole_leaves = [npu(x).requires_grad_() for x in (case.q, case.k, case.v)]
whole_out = whole(*whole_leaves, None, cu_seqlens_q=cu, cu_seqlens_kv=cu)
whole_out.backward(npu(case.dy.reshape(T, -1)))

expected, reference_leaves = causal_reference(case)
expected = expected.reshape(T, -1)
report["cp2"] = [str(out.device), list(out.shape), gap(out, expected[mine])]
report["cp2_grads"] = [
    gap(leaf.grad, reference.grad[mine]) for leaf, reference in zip(leaves, reference_leaves, strict=True)
]
report["cp2_vs_cp1"] = gap(out, whole_out.detach().cpu()[mine])
report["cp1"] = gap(whole_out, expected)
report["cp1_grads"] = [
    gap(leaf.grad, reference.grad) for leaf, reference in zip(whole_leaves, reference_leaves, strict=True)
]
print(json.dumps(report))
