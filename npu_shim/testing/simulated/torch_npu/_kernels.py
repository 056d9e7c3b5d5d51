"""Reference implementations of the torch_npu kernels that compute in compute mode (plain, unfused PyTorch).

Only ``npu_fusion_attention``, the kernel MindSpeed's fusion attention and Hugging Face's NPU path call.
Its arguments follow torch_npu's published signature; what is implemented: the layouts ``BSH``, ``SBH``,
``BSND``, ``BNSD`` and ``TND`` (packed sequences, cut by ``actual_seq_qlen``/``actual_seq_kvlen``,
torch_npu's cumulative ends), grouped key/value heads, ``atten_mask`` (``True`` masks a position out),
``sparse_mode`` 0 (the mask as given), 2 and 3 (causal, aligned top left and bottom right), and
``scale``. Dropout (``keep_prob < 1``), ``pse``, ``padding_mask`` and windowed ``pre_tockens``/
``next_tockens`` are rejected rather than silently ignored. Softmax runs in float32; the output has the
query's dtype. The first element of the returned tuple is the attention output, as torch_npu's.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["npu_fusion_attention"]

_NO_WINDOW = 2147483647  # torch_npu's default pre_tockens / next_tockens: no window
_CAUSAL_MODES = {2: "top_left", 3: "bottom_right"}


def _causal_mask(query_length: int, key_length: int, align: str, device: torch.device) -> torch.Tensor:
    offset = key_length - query_length if align == "bottom_right" else 0
    rows = torch.arange(query_length, device=device).unsqueeze(1)
    columns = torch.arange(key_length, device=device).unsqueeze(0)
    return columns > rows + offset  # True: masked out


def _attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """[B, N, Sq, D] x [B, G, Skv, D] -> [B, N, Sq, D]; G divides N (grouped key/value heads)."""
    heads, groups = query.shape[1], key.shape[1]
    if heads != groups:
        key = key.repeat_interleave(heads // groups, dim=1)
        value = value.repeat_interleave(heads // groups, dim=1)
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    probabilities = torch.softmax(scores, dim=-1)
    # a row with every position masked attends to nothing (zeros), not to NaN
    probabilities = torch.nan_to_num(probabilities, nan=0.0)
    return torch.matmul(probabilities, value.float()).to(query.dtype)


def _mask_for(
    atten_mask: torch.Tensor | None, sparse_mode: int, query_length: int, key_length: int, device: torch.device
) -> torch.Tensor | None:
    if sparse_mode in _CAUSAL_MODES:
        return _causal_mask(query_length, key_length, _CAUSAL_MODES[sparse_mode], device)
    if sparse_mode != 0:
        raise NotImplementedError(f"npu_fusion_attention (simulated): sparse_mode={sparse_mode}")
    if atten_mask is None:
        return None
    return atten_mask.bool()[..., :query_length, :key_length]


def npu_fusion_attention(  # noqa: PLR0917 - torch_npu's published signature, positional as there
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = _NO_WINDOW,
    next_tockens: int = _NO_WINDOW,
    inner_precise: int = 0,
    prefix: Any = None,
    actual_seq_qlen: Any = None,
    actual_seq_kvlen: Any = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    **kwargs: Any,
) -> tuple[Any, ...]:
    if pse is not None or padding_mask is not None or keep_prob < 1.0:
        raise NotImplementedError("npu_fusion_attention (simulated): pse, padding_mask and dropout are not modelled")
    if sparse_mode == 0 and (pre_tockens < _NO_WINDOW or next_tockens < _NO_WINDOW) and atten_mask is None:
        raise NotImplementedError("npu_fusion_attention (simulated): windowed attention is not modelled")
    layout = input_layout.upper()
    if layout == "TND":
        output = _packed(
            query,
            key,
            value,
            atten_mask=atten_mask,
            scale=scale,
            sparse_mode=sparse_mode,
            actual_seq_qlen=actual_seq_qlen,
            actual_seq_kvlen=actual_seq_kvlen,
        )
    else:
        output = _dense(
            query,
            key,
            value,
            head_num=head_num,
            layout=layout,
            atten_mask=atten_mask,
            scale=scale,
            sparse_mode=sparse_mode,
        )
    empty = query.new_empty(0)
    return output, empty, empty, empty, 0, 0, 0


def _dense(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    head_num: int,
    layout: str,
    atten_mask: torch.Tensor | None,
    scale: float,
    sparse_mode: int,
) -> torch.Tensor:
    def to_bnsd(tensor: torch.Tensor) -> torch.Tensor:
        if layout == "BNSD":
            return tensor
        if layout == "BSND":
            return tensor.transpose(1, 2)
        if layout in ("BSH", "SBH"):
            batch_first = tensor if layout == "BSH" else tensor.transpose(0, 1)
            heads = head_num if tensor is query else tensor.shape[-1] * head_num // query.shape[-1]
            batch, length, hidden = batch_first.shape
            return batch_first.reshape(batch, length, heads, hidden // heads).transpose(1, 2)
        raise NotImplementedError(f"npu_fusion_attention (simulated): input_layout={layout!r}")

    q, k, v = to_bnsd(query), to_bnsd(key), to_bnsd(value)
    mask = _mask_for(atten_mask, sparse_mode, q.shape[2], k.shape[2], q.device)
    out = _attend(q, k, v, mask, scale)  # [B, N, S, D]
    if layout == "BNSD":
        return out
    if layout == "BSND":
        return out.transpose(1, 2)
    batch, heads, length, dim = out.shape
    merged = out.transpose(1, 2).reshape(batch, length, heads * dim)
    return merged if layout == "BSH" else merged.transpose(0, 1)


def _ends(lengths: Any) -> list[int]:
    values = lengths.tolist() if isinstance(lengths, torch.Tensor) else list(lengths)
    return [int(value) for value in values if int(value) > 0]  # a leading 0 (a cu_seqlens tensor) adds nothing


def _packed(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    atten_mask: torch.Tensor | None,
    scale: float,
    sparse_mode: int,
    actual_seq_qlen: Any,
    actual_seq_kvlen: Any,
) -> torch.Tensor:
    """[T, N, D]: each sequence attends within itself."""
    if actual_seq_qlen is None or actual_seq_kvlen is None:
        raise ValueError("npu_fusion_attention (simulated): TND needs actual_seq_qlen and actual_seq_kvlen")
    query_ends, key_ends = _ends(actual_seq_qlen), _ends(actual_seq_kvlen)
    output = torch.zeros_like(query)
    query_start = key_start = 0
    for query_end, key_end in zip(query_ends, key_ends, strict=True):
        q = query[query_start:query_end].transpose(0, 1).unsqueeze(0)
        k = key[key_start:key_end].transpose(0, 1).unsqueeze(0)
        v = value[key_start:key_end].transpose(0, 1).unsqueeze(0)
        mask = _mask_for(atten_mask, sparse_mode, q.shape[2], k.shape[2], q.device)
        output[query_start:query_end] = _attend(q, k, v, mask, scale).squeeze(0).transpose(0, 1)
        query_start, key_start = query_end, key_end
    return output
