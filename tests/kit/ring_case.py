"""One context-parallel case for the kit's ring attentions (MindSpeed's, TransformerEngineNPU's), for child programs.

Imported by ``ring_attention_rank_child.py`` (tests/kit/test_parallel_kit.py) and ``tenpu_ring_attention_rank_child.py``
(tests/kit/test_transformer_engine_npu.py), each run as a script from this folder. verl's layout on two CP ranks:
sequences padded to a multiple of ``2 * cp``, cut into ``2 * cp`` chunks, rank ``r`` holding chunks ``r`` and
``2 * cp - 1 - r``; grouped key/value heads; two packed sequences. :func:`verl_chunks` gives the inputs (``q, k, v,
dy`` whole, ``mine`` this rank's rows, ``cu`` the starts, ``packed`` Megatron's ``PackedSeqParams``);
:func:`causal_reference` computes causal attention over each whole sequence with plain torch, ``expected``
``[T, N, D]``, and its gradients in ``reference_leaves``.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F


def verl_chunks(rank: int) -> SimpleNamespace:
    from megatron.core.packed_seq_params import PackedSeqParams

    torch.manual_seed(0)
    N, G, D, cp = 4, 2, 8, 2
    lengths = [8, 12]
    T = sum(lengths)
    q, k, v, dy = torch.randn(T, N, D), torch.randn(T, G, D), torch.randn(T, G, D), torch.randn(T, N, D)
    mine, start = [], 0
    for length in lengths:
        chunk = length // (2 * cp)
        mine += list(range(start + chunk * rank, start + chunk * (rank + 1)))
        mine += list(range(start + length - chunk * (rank + 1), start + length - chunk * rank))
        start += length
    cu = torch.tensor([0, 8, 20], dtype=torch.int32)
    packed = PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=cu,
        cu_seqlens_kv=cu,
        cu_seqlens_q_padded=cu,
        cu_seqlens_kv_padded=cu,
        max_seqlen_q=12,
        max_seqlen_kv=12,
    )
    return SimpleNamespace(N=N, G=G, D=D, T=T, lengths=lengths, q=q, k=k, v=v, dy=dy, mine=mine, cu=cu, packed=packed)


def causal_reference(case: SimpleNamespace) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``expected`` (``[T, N, D]``, backward through ``case.dy`` done) and the leaves holding its gradients."""
    reference_leaves = [x.clone().requires_grad_() for x in (case.q, case.k, case.v)]
    rows, start = [], 0
    for length in case.lengths:
        part = [x[start : start + length].transpose(0, 1)[None] for x in reference_leaves]
        attended = F.scaled_dot_product_attention(*part, is_causal=True, scale=case.D**-0.5, enable_gqa=True)
        rows.append(attended[0].transpose(0, 1))
        start += length
    expected = torch.cat(rows)
    expected.backward(case.dy)
    return expected, reference_leaves
