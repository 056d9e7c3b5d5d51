"""SIMULATED MindSpeed ring attention (``megatron_cp_algo``, causal, packed sequences): what it computes.

Written from what MindSpeed's ring attention does (``mindspeed/core/context_parallel/ring_context_parallel/``
on ``2.3.0_core_r0.12.1`` and ``core_r0.16.0``, the same algorithm on both), never from its code:

- verl cuts each packed sequence (padded to a multiple of ``2 * tp * cp``) into ``2 * cp`` chunks and
  gives CP rank ``r`` chunks ``r`` and ``2 * cp - 1 - r``, one after the other; ``cu_seqlens_q_padded``
  holds the global offsets, so this rank's sequences end at ``cu_seqlens_q_padded // cp``;
- the ranks pass their key/value blocks around the ring MindSpeed built when Megatron's parallel state was
  initialised (:mod:`mindspeed.core.context_parallel.model_parallel_utils`; without it MindSpeed's own
  ``AssertionError``); at each step this rank attends to the block it holds, as the chunks' global positions
  allow: its own block causally (``sparse_mode=3`` with the compressed mask), an earlier rank's block with
  all its queries against that block's first chunk, a later rank's block with only its second chunk's
  queries against the whole block (no mask, ``pre_tockens = next_tockens =`` the block's length);
- each block goes through ``torch_npu.npu_fusion_attention`` (layout ``TND``), and the blocks are merged
  from the softmax statistics it returns (the output cast back to its dtype after each merge, as MindSpeed's
  unfused update does);
- the backward passes the blocks around again with their key/value gradients, each block's gradients from
  ``torch_npu.npu_fusion_attention_grad`` with the merged output and statistics.

Not modelled (each refused with an error): double ring windows (``cp_window_size > 1``), the ``general`` mask
type, SBH (unpacked) inputs, dropout, and MindSpeed's other CP algorithms (Ulysses, hybrid, adaptive).
"""

from __future__ import annotations

from typing import Any

import torch

_COMPRESSED_MASK_SIZE = 2048  # MindSpeed's causal mask for fusion attention, which sparse mode 3 takes


def _local_ends(packed_seq_params: Any, cp_size: int) -> list[int]:
    """Where this rank's part of each sequence ends in its packed tokens (global padded offsets over ``cp``)."""
    padded = getattr(packed_seq_params, "cu_seqlens_q_padded", None)
    offsets = padded if padded is not None else packed_seq_params.cu_seqlens_q
    return [int(offset) // cp_size for offset in offsets.tolist()[1:]]


def _halves(ends: list[int], device: Any) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Token indices of each local sequence's first chunk and second chunk, and the halves' cumulative ends."""
    first, second, half_ends = [], [], []
    start = total = 0
    for end in ends:
        half = (end - start) // 2
        first.extend(range(start, start + half))
        second.extend(range(start + half, end))
        total += half
        half_ends.append(total)
        start = end
    as_index = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
    return as_index(first), as_index(second), half_ends


def _statistic_rows(statistic: torch.Tensor, ends: list[int], heads: int) -> torch.Tensor:
    """torch_npu's TND statistic (``[T, N, 8]``, head-major per sequence) as one value per row: ``[T, N]``."""
    flat = statistic.reshape(-1, statistic.shape[-1])[:, 0]
    rows, start = [], 0
    for end in ends:
        rows.append(flat[start * heads : end * heads].reshape(heads, end - start).transpose(0, 1))
        start = end
    return torch.cat(rows)


def _statistic_layout(rows: torch.Tensor, ends: list[int], width: int = 8) -> torch.Tensor:
    """``[T, N]`` back to torch_npu's TND layout, as the gradient kernel takes it."""
    parts, start = [], 0
    for end in ends:
        parts.append(rows[start:end].transpose(0, 1).unsqueeze(-1).expand(-1, -1, width).reshape(-1))
        start = end
    return torch.cat(parts).reshape(rows.shape[0], rows.shape[1], width).contiguous()


class _Ring:
    """This rank's neighbours on the ring of key/value blocks, and the exchange of one block per step."""

    def __init__(self, ranks: list[int], group: Any) -> None:
        position = ranks.index(torch.distributed.get_rank())
        self.position, self.size, self.group = position, len(ranks), group
        self.next, self.previous = ranks[(position + 1) % len(ranks)], ranks[(position - 1) % len(ranks)]

    def block_at(self, step: int) -> int:
        """The CP rank whose block this rank holds after ``step`` exchanges."""
        return (self.position - step) % self.size

    def pass_on(self, block: torch.Tensor) -> torch.Tensor:
        received = torch.empty_like(block)
        sent = torch.distributed.isend(block.contiguous(), self.next, group=self.group)
        arriving = torch.distributed.irecv(received, self.previous, group=self.group)
        sent.wait()
        arriving.wait()
        return received


def _block_rows(own: int, other: int, rows: dict[str, Any]) -> tuple[Any, Any, list[int], list[int], bool]:
    """For this rank's block ``own`` against ``other``'s: query rows, key rows, their ends, and causal or not."""
    if other == own:
        return None, None, rows["ends"], rows["ends"], True
    if other < own:  # an earlier rank's block: all queries come after its first chunk, before its second
        return None, rows["first"], rows["ends"], rows["half_ends"], False
    return rows["second"], None, rows["half_ends"], rows["ends"], False  # a later one: only the second chunk sees it


def _select(tensor: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    return tensor if index is None else tensor.index_select(0, index)


def _fusion(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, layout: dict[str, Any]) -> tuple[Any, ...]:
    import torch_npu

    causal = layout["causal"]
    return torch_npu.npu_fusion_attention(
        q,
        k,
        v,
        heads,
        "TND",
        atten_mask=layout["mask"] if causal else None,
        scale=layout["scale"],
        pre_tockens=k.shape[0],
        next_tockens=0 if causal else k.shape[0],
        sparse_mode=3 if causal else 0,
        actual_seq_qlen=layout["q_ends"],
        actual_seq_kvlen=layout["kv_ends"],
    )


Partial = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # attention over some keys: output, row max, row sum


def _merge(merged: Partial, block: Partial) -> Partial:
    """Two partial softmax attentions over disjoint keys as one: rows ``[t, n]``, outputs ``[t, n, d]``."""
    output, row_max, row_sum = merged
    block_output, block_max, block_sum = block
    merged_max = torch.maximum(row_max, block_max)
    earlier = torch.exp(row_max - merged_max) * row_sum
    later = torch.exp(block_max - merged_max) * block_sum
    merged_sum = earlier + later
    merged = output.float() * (earlier / merged_sum).unsqueeze(-1) + block_output.float() * (
        later / merged_sum
    ).unsqueeze(-1)
    return merged.to(output.dtype), merged_max, merged_sum


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: _Ring, plan: dict[str, Any]):  # noqa: PLR0917 - autograd's
        heads = q.shape[1]
        own = ring.position
        merged: Partial | None = None
        block = torch.stack([k, v])
        for step in range(ring.size):
            other = ring.block_at(step)
            q_index, kv_index, q_ends, kv_ends, causal = _block_rows(own, other, plan)
            layout = {**plan, "q_ends": q_ends, "kv_ends": kv_ends, "causal": causal}
            k_block, v_block = _select(block[0], kv_index), _select(block[1], kv_index)
            result = _fusion(_select(q, q_index), k_block, v_block, heads, layout)
            partial = (result[0], *(_statistic_rows(statistic, q_ends, heads) for statistic in result[1:3]))
            if merged is None:  # step 0: this rank's own block, every query row
                merged = partial
            elif q_index is None:
                merged = _merge(merged, partial)
            else:
                rows = _merge(tuple(whole.index_select(0, q_index) for whole in merged), partial)
                merged = tuple(whole.index_copy(0, q_index, part) for whole, part in zip(merged, rows, strict=True))
            if step + 1 < ring.size:
                block = ring.pass_on(block)
        output, row_max, row_sum = merged
        ctx.save_for_backward(q, k, v, output, row_max, row_sum)
        ctx.ring, ctx.plan = ring, plan
        return output

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor):
        import torch_npu

        q, k, v, output, row_max, row_sum = ctx.saved_tensors
        ring, plan = ctx.ring, ctx.plan
        heads = q.shape[1]
        grad_q = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        block = torch.stack([k, v])
        grad_block = torch.zeros(block.shape, dtype=torch.float32, device=q.device)
        for step in range(ring.size):
            q_index, kv_index, q_ends, kv_ends, causal = _block_rows(ring.position, ring.block_at(step), plan)
            gradients = torch_npu.npu_fusion_attention_grad(
                _select(q, q_index),
                _select(block[0], kv_index),
                _select(block[1], kv_index),
                _select(grad_output, q_index),
                heads,
                "TND",
                atten_mask=plan["mask"] if causal else None,
                softmax_max=_statistic_layout(_select(row_max, q_index), q_ends),
                softmax_sum=_statistic_layout(_select(row_sum, q_index), q_ends),
                attention_in=_select(output, q_index),
                scale_value=plan["scale"],
                pre_tockens=_select(block[0], kv_index).shape[0],
                next_tockens=0 if causal else _select(block[0], kv_index).shape[0],
                sparse_mode=3 if causal else 0,
                actual_seq_qlen=q_ends,
                actual_seq_kvlen=kv_ends,
            )
            if q_index is None:
                grad_q += gradients[0].float()
            else:
                grad_q.index_add_(0, q_index, gradients[0].float())
            for which in (0, 1):
                if kv_index is None:
                    grad_block[which] += gradients[1 + which].float()
                else:
                    grad_block[which].index_add_(0, kv_index, gradients[1 + which].float())
            # each block travels on with its gradients; after a full turn both are back with their owner
            block, grad_block = ring.pass_on(block), ring.pass_on(grad_block)
        return grad_q.to(q.dtype), grad_block[0].to(k.dtype), grad_block[1].to(v.dtype), None, None


def ringattn_context_parallel(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    ring_ranks: list[int],
    group: Any,
    packed_seq_params: Any,
    softmax_scale: float,
) -> torch.Tensor:
    """Causal ring attention of this rank's ``[T, N, D]`` queries over every CP rank's keys and values."""
    cp_size = len(ring_ranks)
    ends = _local_ends(packed_seq_params, cp_size)
    if ends[-1] != query.shape[0]:
        raise ValueError(
            f"simulated MindSpeed ring attention: the packed sequences end at {ends[-1]} tokens on this rank, "
            f"the query has {query.shape[0]} (is this verl's context-parallel chunk layout?)"
        )
    first, second, half_ends = _halves(ends, query.device)
    mask = torch.ones(_COMPRESSED_MASK_SIZE, _COMPRESSED_MASK_SIZE, dtype=torch.bool, device=query.device).triu(1)
    plan = {
        "ends": ends,
        "half_ends": half_ends,
        "first": first,
        "second": second,
        "scale": softmax_scale,
        "mask": mask,
    }
    return RingAttention.apply(query, key, value, _Ring(ring_ranks, group), plan)
