"""A child of tests/kit/test_parallel_kit.py, in compute mode (no arguments): prints one JSON report.

torch_npu's kernels against plain torch: ``npu_fusion_attention``'s sparse modes, windows and softmax statistics (dense
and TND), what it refuses, its gradient (``npu_fusion_attention_grad``) against autograd, and ``npu_rms_norm``.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.nn.functional as F
import torch_npu
from child_report import attempt, gap, npu

report: dict[str, Any] = {}
torch.manual_seed(0)
N, G, D = 4, 2, 8
scale = D**-0.5


def sdpa(q, k, v, masked_out=None):  # [B, N, S, D] x [B, G, S, D]; masked_out: True where not attended
    allowed = None if masked_out is None else ~masked_out
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)


def statistics(q, k, masked_out=None):  # the row max and row sum of exp(score - max), as a float32 softmax has them
    scores = (q @ k.repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-1, -2)) * scale
    if masked_out is not None:
        scores = scores.masked_fill(masked_out, float("-inf"))
    top = scores.amax(-1)
    return top, torch.exp(scores - top[..., None]).sum(-1)


def band(sq, skv, pre, after, shift=0):
    return torch.tensor([[not (i + shift - pre <= j <= i + shift + after) for j in range(skv)] for i in range(sq)])


def causal(sq, skv, shift=0):
    return torch.tensor([[j > i + shift for j in range(skv)] for i in range(sq)])


def bnsd(rows):
    return rows.transpose(0, 1)[None]


def bsh(x):
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)


def unbsh(x, heads):
    return x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)


compressed = torch.ones(2048, 2048, dtype=torch.bool).triu(1)

# BNSD, a band of one key before each query and none after, through a mask in sparse mode 0
B, S = 2, 6
q, k, v = torch.randn(B, N, S, D), torch.randn(B, G, S, D), torch.randn(B, G, S, D)
out, top, total = torch_npu.npu_fusion_attention(
    npu(q), npu(k), npu(v), N, "BNSD", scale=scale,
    atten_mask=npu(torch.zeros(S, S, dtype=torch.bool)), pre_tockens=1, next_tockens=0,
)[:3]  # fmt: skip
expected_top, expected_total = statistics(q, k, band(S, S, 1, 0))
report["mode0_band"] = gap(out, sdpa(q, k, v, band(S, S, 1, 0)))
report["dense_statistics"] = [
    list(top.shape), str(top.dtype), gap(top[..., 3], expected_top), gap(total[..., 7], expected_total)
]  # fmt: skip
# sparse mode 0 without a mask: the window is ignored (torch_npu's documentation), every key attended
out = torch_npu.npu_fusion_attention(npu(q), npu(k), npu(v), N, "BNSD", scale=scale, pre_tockens=1, next_tockens=0)[0]
report["mode0_no_mask"] = gap(out, sdpa(q, k, v))
# sparse mode 1: the whole mask as given, the window ignored
mask = torch.rand(S, S) > 0.5
mask[:, 0] = False
out = torch_npu.npu_fusion_attention(
    npu(q), npu(k), npu(v), N, "BNSD", scale=scale, atten_mask=npu(mask), sparse_mode=1, pre_tockens=0, next_tockens=0
)[0]
report["mode1"] = gap(out, sdpa(q, k, v, mask))
# sparse mode 4, a band aligned bottom right: 3 queries over 6 keys, two keys before each and none after
short_q = q[:, :, :3]
out = torch_npu.npu_fusion_attention(
    npu(short_q), npu(k), npu(v), N, "BNSD", scale=scale,
    atten_mask=npu(compressed), sparse_mode=4, pre_tockens=2, next_tockens=0,
)[0]  # fmt: skip
report["mode4"] = gap(out, sdpa(short_q, k, v, band(3, S, 2, 0, shift=3)))
attempt(report, "mode3_wrong_mask", lambda: torch_npu.npu_fusion_attention(
    npu(q), npu(k), npu(v), N, "BNSD", atten_mask=npu(torch.zeros(S, S, dtype=torch.bool)), sparse_mode=3
)[0].shape)  # fmt: skip
attempt(
    report, "dropout", lambda: torch_npu.npu_fusion_attention(npu(q), npu(k), npu(v), N, "BNSD", keep_prob=0.9)[0].shape
)
attempt(
    report,
    "prefix_mode",
    lambda: torch_npu.npu_fusion_attention(npu(q), npu(k), npu(v), N, "BNSD", sparse_mode=5)[0].shape,
)

# TND: sequences of 3 and 5 tokens, causal; the statistics [T, N, 8], head-major within each sequence
lengths, ends = [3, 5], [3, 8]
qs, ks, vs = ([torch.randn(n, heads, D) for n in lengths] for heads in (N, G, G))
packed = [npu(torch.cat(part)) for part in (qs, ks, vs)]
out, top, total = torch_npu.npu_fusion_attention(
    *packed, N, "TND", scale=scale, atten_mask=npu(compressed),
    sparse_mode=3, actual_seq_qlen=ends, actual_seq_kvlen=ends,
)[:3]  # fmt: skip
second_top, second_total = statistics(bnsd(qs[1]), bnsd(ks[1]), causal(5, 5))  # [1, N, 5]
flat_top, flat_total = top.cpu().reshape(-1, 8), total.cpu().reshape(-1, 8)
report["tnd_statistics"] = [
    list(top.shape),
    gap(flat_top[3 * N :].reshape(N, 5, 8).permute(2, 0, 1), second_top.expand(8, N, 5)),
    gap(flat_total[3 * N :].reshape(N, 5, 8)[..., 0], second_total[0]),
]
report["tnd_out"] = gap(out, torch.cat([
    sdpa(bnsd(a), bnsd(b), bnsd(c), causal(n, n))[0].transpose(0, 1)
    for a, b, c, n in zip(qs, ks, vs, lengths, strict=True)
]))  # fmt: skip


# the gradient from the forward's output and statistics, against autograd through a plain reference
def grad_check(layout, query, key, value, mask_kwargs, reference):
    leaves = [x.clone().requires_grad_() for x in (query, key, value)]
    expected = reference(*leaves)
    dy = torch.randn_like(expected)
    expected.backward(dy)
    forward = torch_npu.npu_fusion_attention(npu(query), npu(key), npu(value), N, layout, scale=scale, **mask_kwargs)
    grads = torch_npu.npu_fusion_attention_grad(
        npu(query), npu(key), npu(value), npu(dy), N, layout,
        softmax_max=forward[1], softmax_sum=forward[2], attention_in=forward[0], scale_value=scale, **mask_kwargs,
    )  # fmt: skip
    return [str(grads[0].device)] + [gap(ours, leaf.grad) for ours, leaf in zip(grads[:3], leaves, strict=True)]


report["grad_bsh_causal"] = grad_check(
    "BSH", bsh(q), bsh(k), bsh(v), {"sparse_mode": 2},
    lambda a, b, c: bsh(sdpa(unbsh(a, N), unbsh(b, G), unbsh(c, G), causal(S, S))),
)  # fmt: skip
report["grad_tnd_causal"] = grad_check(
    "TND", *[torch.cat(part) for part in (qs, ks, vs)],
    {"sparse_mode": 3, "atten_mask": npu(compressed), "actual_seq_qlen": ends, "actual_seq_kvlen": ends},
    lambda a, b, c: torch.cat([
        sdpa(bnsd(a[s:e]), bnsd(b[s:e]), bnsd(c[s:e]), causal(e - s, e - s))[0].transpose(0, 1)
        for s, e in zip([0, 3], ends, strict=True)
    ]),
)  # fmt: skip

x, gamma = torch.randn(3, 5, 16), torch.randn(16)
y, rstd = torch_npu.npu_rms_norm(npu(x), npu(gamma), epsilon=1e-6)
report["rms_norm"] = [
    str(y.device), list(rstd.shape), gap(y, F.rms_norm(x, (16,), gamma, 1e-6)),
    gap(rstd, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)),
]  # fmt: skip
print(json.dumps(report))
