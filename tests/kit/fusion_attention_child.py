"""A child of tests/kit/test_compute_mode.py, in compute mode (no arguments): prints one JSON report.

``torch_npu.npu_fusion_attention`` in each layout (BSH, SBH, BNSD, TND) and sparse mode, against torch's
``scaled_dot_product_attention`` with masks built here: the largest difference of each.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.nn.functional as F
import torch_npu
from child_report import gap, npu

report: dict[str, Any] = {}


torch.manual_seed(0)


def reference(q, k, v, masked_out=None, scale=None):
    # [B, N, S, D] with G key/value heads; masked_out: True where a position is not attended
    allowed = None if masked_out is None else ~masked_out
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)


def causal(query_length, key_length, bottom_right=False):
    shift = key_length - query_length if bottom_right else 0
    return torch.tensor([[j > i + shift for j in range(key_length)] for i in range(query_length)])


B, N, G, S, D = 2, 4, 2, 6, 8
q, k, v = torch.randn(B, N, S, D), torch.randn(B, G, S, D), torch.randn(B, G, S, D)
scale = D**-0.5


def bsh(x):  # [B, n, S, D] -> [B, S, n * D]
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)


def unbsh(x, heads):
    return x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)


def bnsd(x):  # one sequence's [n, heads, D] -> [1, heads, n, D]
    return x.transpose(0, 1)[None]


def sbh(x):
    return bsh(x).transpose(0, 1)


# BSH, grouped key/value heads, an explicit mask (True: masked out), every row keeps its first key
mask = torch.rand(B, 1, S, S) > 0.6
mask[..., 0] = False
out = torch_npu.npu_fusion_attention(
    npu(bsh(q)), npu(bsh(k)), npu(bsh(v)), N, "BSH", atten_mask=npu(mask), scale=scale
)[0]
report["BSH_mask"] = [str(out.device), gap(unbsh(out.cpu(), N), reference(q, k, v, mask, scale))]

# SBH, causal aligned top left (sparse_mode 2)
out = torch_npu.npu_fusion_attention(npu(sbh(q)), npu(sbh(k)), npu(sbh(v)), N, "SBH", scale=scale, sparse_mode=2)[0]
report["SBH_causal"] = gap(unbsh(out.cpu().transpose(0, 1), N), reference(q, k, v, causal(S, S), scale))

# BNSD, fewer queries than keys, causal aligned bottom right (sparse_mode 3)
short_q = q[:, :, :3]
out = torch_npu.npu_fusion_attention(npu(short_q), npu(k), npu(v), N, "BNSD", scale=scale, sparse_mode=3)[0]
report["BNSD_bottom_right"] = gap(out, reference(short_q, k, v, causal(3, S, bottom_right=True), scale))

# the default scale is 1.0, as torch_npu's (callers pass 1/sqrt(D) themselves)
out = torch_npu.npu_fusion_attention(npu(bsh(q)), npu(bsh(k)), npu(bsh(v)), N, "BSH")[0]
report["default_scale"] = gap(unbsh(out.cpu(), N), reference(q, k, v, None, 1.0))

# TND: packed sequences of lengths 3 and 5, cumulative ends; each attends causally within itself only
lengths = [3, 5]
qs = [torch.randn(n, N, D) for n in lengths]
ks = [torch.randn(n, G, D) for n in lengths]
vs = [torch.randn(n, G, D) for n in lengths]
ends = [3, 8]
out = torch_npu.npu_fusion_attention(
    npu(torch.cat(qs)),
    npu(torch.cat(ks)),
    npu(torch.cat(vs)),
    N,
    "TND",
    scale=scale,
    sparse_mode=3,
    actual_seq_qlen=ends,
    actual_seq_kvlen=ends,
)[0]
expected = torch.cat(
    [
        reference(bnsd(qi), bnsd(ki), bnsd(vi), causal(n, n), scale)[0].transpose(0, 1)
        for qi, ki, vi, n in zip(qs, ks, vs, lengths, strict=True)
    ]
)
report["TND_causal"] = gap(out, expected)
print(json.dumps(report))
