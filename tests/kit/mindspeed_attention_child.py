"""A child of tests/kit/test_compute_mode.py, in compute mode (no arguments): prints one JSON report.

The MindSpeed stand-in's fusion attention after ``repatch``, per line, against torch's attention (whole and packed
sequences); Megatron's unfused forward under MindSpeed's generate-mask wrapper; and which attention class a
Transformer-Engine-spec model gets, per line and CP size.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
import torch_npu  # noqa: F401 - the simulated device
from child_report import gap, npu

# Megatron's modules first, then MindSpeed's adaptor: the order this check has always imported them in
# isort: split
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType

# isort: split
import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)

report: dict[str, Any] = {}


def within(x: torch.Tensor, start: int, end: int) -> torch.Tensor:  # [n, s, d] of one sequence
    return x[start:end].transpose(0, 1)


torch.manual_seed(0)
S, B, N, G, D = 5, 2, 4, 2, 8
q, k, v = torch.randn(S, B, N, D), torch.randn(S, B, G, D), torch.randn(S, B, G, D)
# what Megatron's attention gets and gives: [s, b, n, d] in, [s, b, n * d] out
expected = (
    F.scaled_dot_product_attention(
        q.permute(1, 2, 0, 3),
        k.permute(1, 2, 0, 3),
        v.permute(1, 2, 0, 3),
        is_causal=True,
        scale=D**-0.5,
        enable_gqa=True,
    )
    .permute(2, 0, 1, 3)
    .reshape(S, B, N * D)
)
# the attributes of Megatron's attention module the forward reads
layer = SimpleNamespace(
    attn_mask_type=AttnMaskType.causal, softmax_scale=D**-0.5, config=SimpleNamespace(use_flash_attn=True)
)

for line in ("core_r0.16.0", "2.3.0_core_r0.12.1"):
    megatron_adaptor.simulate_fresh_process(line)
    megatron_adaptor.repatch({"use_flash_attn": True})
    forward = DotProductAttention.forward
    out = forward(layer, npu(q), npu(k), npu(v), None, attn_mask_type=AttnMaskType.causal)
    report[line] = {
        "forward": f"{forward.__module__}.{forward.__qualname__}",
        "device": str(out.device),
        "gap": gap(out, expected),
    }
    # packed sequences (thd) of 3 and 2 tokens, each padded to 4 as verl pads them: the padded starts delimit them
    t_q, t_k, t_v = torch.randn(8, N, D), torch.randn(8, G, D), torch.randn(8, G, D)
    starts, padded_starts = torch.tensor([0, 3, 5]), torch.tensor([0, 4, 8])
    packed = SimpleNamespace(qkv_format="thd", cu_seqlens_q=starts, cu_seqlens_kv=starts,
                             cu_seqlens_q_padded=padded_starts, cu_seqlens_kv_padded=padded_starts)  # fmt: skip
    expected_packed = torch.cat(
        [
            F.scaled_dot_product_attention(
                within(t_q, a, b), within(t_k, a, b), within(t_v, a, b), is_causal=True, scale=D**-0.5, enable_gqa=True
            ).transpose(0, 1)
            for a, b in ((0, 4), (4, 8))
        ]
    ).reshape(8, N * D)
    out = forward(
        layer, npu(t_q), npu(t_k), npu(t_v), None, attn_mask_type=AttnMaskType.causal, packed_seq_params=packed
    )
    report[line]["packed_gap"] = gap(out, expected_packed)
    megatron_adaptor.repatch({"use_flash_attn": False})
    report[line]["without_fusion"] = DotProductAttention.forward.__qualname__

# Without fusion attention, Megatron's forward under the generate-mask wrapper: with no mask given on a
# causal layer, MindSpeed's get_attention_mask wants the config's micro_batch_size (nothing under verl sets it)
megatron_adaptor.simulate_fresh_process("2.3.0_core_r0.12.1")
megatron_adaptor.repatch({"use_flash_attn": False})
try:
    DotProductAttention.forward(
        SimpleNamespace(attn_mask_type=AttnMaskType.causal, config=SimpleNamespace()), npu(q), npu(k), npu(v), None
    )
    report["unfused_without_mask"] = "ran"
except RuntimeError as error:
    report["unfused_without_mask"] = str(error)

# Which attention a Transformer-Engine-spec model (verl's) gets, per line and CP size, where MindSpeed stands in for
# Transformer Engine (core_r0.17.0 and core_r0.18.0 have TransformerEngineNPU: tests/kit/test_transformer_engine_npu.py)
import megatron.core.extensions.transformer_engine as te  # noqa: E402 - after the lines above, as verl's model build

report["te_attention"] = {}
for line in ("core_r0.16.0", "2.3.0_core_r0.12.1", "master"):
    megatron_adaptor.simulate_fresh_process(line)
    for size in (1, 2):
        megatron_adaptor.repatch({"use_flash_attn": True, "context_parallel_size": size})
        cls = te.TEDotProductAttention
        report["te_attention"][f"{line} CP {size}"] = f"{cls.__module__}.{cls.__qualname__}"
print(json.dumps(report))
