"""Reference implementations of the torch_npu kernels that compute in compute mode (plain, unfused PyTorch).

Written from torch_npu's published signatures and documentation, never from its code:

- ``npu_fusion_attention``: the layouts ``BSH``, ``SBH``, ``BSND``, ``BNSD`` and ``TND`` (packed sequences,
  cut by ``actual_seq_qlen``/``actual_seq_kvlen``, torch_npu's cumulative ends), grouped key/value heads,
  ``scale``, and ``sparse_mode`` 0 to 4 as torch_npu documents them (``atten_mask``: ``True`` masks a
  position out):

  - 0, no mask: every position is attended, ``pre_tockens``/``next_tockens`` are ignored; with a mask: the
    mask, and only keys within ``pre_tockens`` before and ``next_tockens`` after each query (top left);
  - 1: the mask as given, the window ignored;
  - 2 and 3: causal, aligned top left and bottom right (the mask, if given, is the compressed 2048 x 2048
    one, as torch_npu requires);
  - 4: the window aligned bottom right.

  It returns what torch_npu returns: the output (the query's dtype), ``softmax_max`` and ``softmax_sum``
  (float32, each row's value repeated 8 times: ``[B, N, Sq, 8]``, or ``[T, N, 8]`` for ``TND`` laid out per
  sequence head-major, ``[N, s_i, 8]`` after one another), an empty ``softmax_out``, and seed, offset and
  numels 0 (no dropout). The statistics are what ring attention merges blocks with (MindSpeed's
  context parallelism).
- ``npu_fusion_attention_grad``: the gradients of query, key and value (and an empty ``dpse`` and ``dsink``), from the
  forward's output (``attention_in``) and statistics, as the real kernel takes them: recomputed with the
  statistics given, which for a block of ring attention are the merged ones.
- ``npu_rms_norm``: ``(y, rstd)``.

Their parameters are those torch_npu 2.10.0.post4 registers (names, order, defaults: ``npu_rms_norm``'s first is
``input``, as a keyword call must name it there), with no ``**kwargs``: a misspelt keyword fails as on torch_npu
(tests/conformance checks this against the images' wheels). Dropout (``keep_prob < 1``, ``dropout_mask``), ``pse``,
``padding_mask``, ``prefix``, ``sink``, a ``softmax_layout`` and sparse modes 5 to 8 are refused, never silently
ignored. Softmax runs in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["npu_fusion_attention", "npu_fusion_attention_grad", "npu_rms_norm"]

_NO_WINDOW = 2147483647  # torch_npu's default pre_tockens / next_tockens
_COMPRESSED_MASK = (2048, 2048)  # the mask torch_npu wants in sparse modes 2 to 4
_STATISTIC_WIDTH = 8  # torch_npu repeats each row's softmax max and sum this many times
_LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")


def _checked_layout(kernel: str, input_layout: str, options: dict[str, Any]) -> str:
    """The layout, upper-cased; what is not modelled refused, never ignored."""
    if any(options.get(name) is not None for name in ("pse", "padding_mask", "prefix", "sink", "dropout_mask")):
        raise NotImplementedError(
            f"{kernel} (simulated): pse, padding_mask, prefix, sink and dropout_mask are not modelled"
        )
    if options["softmax_layout"]:
        raise NotImplementedError(f"{kernel} (simulated): softmax_layout={options['softmax_layout']!r} is not modelled")
    if options["keep_prob"] < 1.0:
        raise NotImplementedError(f"{kernel} (simulated): dropout (keep_prob={options['keep_prob']}) is not modelled")
    if options["sparse_mode"] not in (0, 1, 2, 3, 4):
        raise NotImplementedError(f"{kernel} (simulated): sparse_mode={options['sparse_mode']} is not modelled")
    layout = input_layout.upper()
    if layout not in _LAYOUTS:
        raise NotImplementedError(f"{kernel} (simulated): input_layout={input_layout!r}")
    return layout


def _masks(options: dict[str, Any], device: Any) -> Callable[[int, int], torch.Tensor | None]:
    """The masked-out positions for a query length and a key length, as the kernel's options say."""
    return lambda query_length, key_length: _mask(
        options["atten_mask"],
        options["sparse_mode"],
        pre=options["pre_tockens"],
        after=options["next_tockens"],
        query_length=query_length,
        key_length=key_length,
        device=device,
    )


def _window(query_length: int, key_length: int, *, pre: int, after: int, offset: int, device: Any) -> torch.Tensor:
    """True outside the keys from ``pre`` before to ``after`` after each query (shifted right by ``offset``)."""
    rows = torch.arange(query_length, device=device).unsqueeze(1) + offset
    columns = torch.arange(key_length, device=device).unsqueeze(0)
    return (columns < rows - pre) | (columns > rows + after)


def _mask(
    atten_mask: torch.Tensor | None,
    sparse_mode: int,
    *,
    pre: int,
    after: int,
    query_length: int,
    key_length: int,
    device: Any,
) -> torch.Tensor | None:
    """The positions masked out (True), broadcastable to ``[B, N, Sq, Skv]``; None: none."""
    if sparse_mode == 0:
        if atten_mask is None:
            return None
        window = _window(query_length, key_length, pre=pre, after=after, offset=0, device=device)
        return atten_mask.bool()[..., :query_length, :key_length] | window
    if sparse_mode == 1:
        if atten_mask is None:
            raise ValueError("npu_fusion_attention (simulated): sparse_mode=1 needs the whole atten_mask")
        return atten_mask.bool()[..., :query_length, :key_length]
    if atten_mask is not None and tuple(atten_mask.shape[-2:]) != _COMPRESSED_MASK:
        raise ValueError(
            f"npu_fusion_attention (simulated): sparse_mode={sparse_mode} takes the compressed 2048 x 2048 atten_mask, "
            f"not one of {tuple(atten_mask.shape)}"
        )
    bottom_right = key_length - query_length
    if sparse_mode == 2:
        return _window(query_length, key_length, pre=_NO_WINDOW, after=0, offset=0, device=device)
    if sparse_mode == 3:
        return _window(query_length, key_length, pre=_NO_WINDOW, after=0, offset=bottom_right, device=device)
    return _window(query_length, key_length, pre=pre, after=after, offset=bottom_right, device=device)  # 4: band


def _repeat_groups(tensor: torch.Tensor, heads: int) -> torch.Tensor:
    groups = tensor.shape[1]
    return tensor if groups == heads else tensor.repeat_interleave(heads // groups, dim=1)


def _scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    scores = torch.matmul(q.float(), _repeat_groups(k, q.shape[1]).float().transpose(-1, -2)) * scale
    return scores if mask is None else scores.masked_fill(mask, float("-inf"))


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[B, N, Sq, D] x [B, G, Skv, D] -> output [B, N, Sq, D], and each row's max and sum ([B, N, Sq], float32)."""
    scores = _scores(q, k, mask, scale)
    # a row with every position masked attends to nothing (zeros), not to NaN
    probabilities = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    row_max = scores.amax(dim=-1, keepdim=True)
    finite_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    row_sum = torch.exp(scores - finite_max).sum(dim=-1)
    output = torch.matmul(probabilities, _repeat_groups(v, q.shape[1]).float()).to(q.dtype)
    return output, row_max.squeeze(-1), row_sum


def _attend_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    grad_output: torch.Tensor,
    output: torch.Tensor,
    row_max: torch.Tensor,
    row_sum: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`_attend`'s output, its probabilities recomputed from the row statistics given."""
    heads, groups = q.shape[1], k.shape[1]
    scores = _scores(q, k, mask, scale)
    finite_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max).unsqueeze(-1)
    safe_sum = torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum)).unsqueeze(-1)
    probabilities = torch.exp(scores - finite_max) / safe_sum
    grad_output = grad_output.float()
    repeated_v = _repeat_groups(v, heads).float()
    grad_probabilities = torch.matmul(grad_output, repeated_v.transpose(-1, -2))
    row_dot = (grad_output * output.float()).sum(dim=-1, keepdim=True)
    grad_scores = probabilities * (grad_probabilities - row_dot) * scale
    grad_q = torch.matmul(grad_scores, _repeat_groups(k, heads).float())
    grad_k = torch.matmul(grad_scores.transpose(-1, -2), q.float())
    grad_v = torch.matmul(probabilities.transpose(-1, -2), grad_output)
    if heads != groups:  # each key/value head served heads // groups query heads
        batch, _, length, dim = grad_k.shape
        grad_k = grad_k.reshape(batch, groups, heads // groups, length, dim).sum(dim=2)
        grad_v = grad_v.reshape(batch, groups, heads // groups, length, grad_v.shape[-1]).sum(dim=2)
    return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)


# --- layouts ------------------------------------------------------------------------------------


def _to_bnsd(tensor: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    if layout == "BNSD":
        return tensor
    if layout == "BSND":
        return tensor.transpose(1, 2)
    batch_first = tensor if layout == "BSH" else tensor.transpose(0, 1)
    batch, length, hidden = batch_first.shape
    return batch_first.reshape(batch, length, heads, hidden // heads).transpose(1, 2)


def _from_bnsd(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BNSD":
        return tensor
    if layout == "BSND":
        return tensor.transpose(1, 2)
    batch, heads, length, dim = tensor.shape
    merged = tensor.transpose(1, 2).reshape(batch, length, heads * dim)
    return merged if layout == "BSH" else merged.transpose(0, 1)


def _kv_heads(query: torch.Tensor, key: torch.Tensor, layout: str, heads: int) -> int:
    """Key/value heads in a hidden-size layout: the key's width over the query's head size."""
    return key.shape[-1] * heads // query.shape[-1] if layout in ("BSH", "SBH") else heads


def _ends(lengths: Any, name: str) -> list[int]:
    if lengths is None:
        raise ValueError(f"npu_fusion_attention (simulated): TND needs {name}")
    values = lengths.tolist() if isinstance(lengths, torch.Tensor) else list(lengths)
    return [int(value) for value in values if int(value) > 0]  # a leading 0 (a cu_seqlens tensor) adds nothing


def _sequences(actual_seq_qlen: Any, actual_seq_kvlen: Any) -> tuple[list[slice], list[slice]]:
    """The packed sequences' query rows and key rows."""
    query_ends, key_ends = _ends(actual_seq_qlen, "actual_seq_qlen"), _ends(actual_seq_kvlen, "actual_seq_kvlen")
    if len(query_ends) != len(key_ends):
        raise ValueError("npu_fusion_attention (simulated): actual_seq_qlen and actual_seq_kvlen differ in length")
    starts_q, starts_k = [0, *query_ends[:-1]], [0, *key_ends[:-1]]
    return [slice(a, b) for a, b in zip(starts_q, query_ends, strict=True)], [
        slice(a, b) for a, b in zip(starts_k, key_ends, strict=True)
    ]


def _tnd_to_bnsd(rows: torch.Tensor) -> torch.Tensor:
    return rows.transpose(0, 1).unsqueeze(0)  # [s, n, d] -> [1, n, s, d]


def _statistic(values: torch.Tensor) -> torch.Tensor:
    return values.unsqueeze(-1).expand(*values.shape, _STATISTIC_WIDTH).contiguous()


def _tnd_statistic_rows(statistic: torch.Tensor, rows: slice, heads: int) -> torch.Tensor:
    """One sequence's rows of a ``[T, N, 8]`` TND statistic (head-major within each sequence): ``[1, N, s]``."""
    flat = statistic.reshape(-1, _STATISTIC_WIDTH)[rows.start * heads : rows.stop * heads, 0]
    return flat.reshape(heads, rows.stop - rows.start).unsqueeze(0)


# --- the kernels ----------------------------------------------------------------------------------


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
    softmax_layout: str = "",
    sink: torch.Tensor | None = None,
    dropout_mask: torch.Tensor | None = None,
    seed: int = 0,
    offset: int = 0,
) -> tuple[Any, ...]:
    options = locals()  # the arguments by name, as the helpers read them
    layout = _checked_layout("npu_fusion_attention", input_layout, options)
    mask_for = _masks(options, query.device)
    if layout == "TND":
        output = torch.zeros_like(query, dtype=query.dtype)
        maxima, sums = [], []
        for rows_q, rows_k in zip(*_sequences(actual_seq_qlen, actual_seq_kvlen), strict=True):
            q, k, v = _tnd_to_bnsd(query[rows_q]), _tnd_to_bnsd(key[rows_k]), _tnd_to_bnsd(value[rows_k])
            out, row_max, row_sum = _attend(q, k, v, mask_for(q.shape[2], k.shape[2]), scale)
            output[rows_q] = out[0].transpose(0, 1)
            maxima.append(_statistic(row_max[0]).reshape(-1))  # [N, s, 8], head-major within the sequence
            sums.append(_statistic(row_sum[0]).reshape(-1))
        shape = (query.shape[0], query.shape[1], _STATISTIC_WIDTH)
        softmax_max, softmax_sum = torch.cat(maxima).reshape(shape), torch.cat(sums).reshape(shape)
    else:
        q = _to_bnsd(query, layout, head_num)
        groups = _kv_heads(query, key, layout, head_num)
        k, v = _to_bnsd(key, layout, groups), _to_bnsd(value, layout, groups)
        out, row_max, row_sum = _attend(q, k, v, mask_for(q.shape[2], k.shape[2]), scale)
        output = _from_bnsd(out, layout)
        softmax_max, softmax_sum = _statistic(row_max), _statistic(row_sum)
    return output, softmax_max, softmax_sum, query.new_empty(0), 0, 0, 0


def fusion_attention_in_megatron_layout(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    scale: float,
    causal: bool,
    mask: torch.Tensor | None = None,
    starts_q: torch.Tensor | None = None,
    starts_kv: torch.Tensor | None = None,
) -> torch.Tensor:
    """Kit-private: how the kit's MindSpeed and TransformerEngineNPU stand-ins both call :func:`npu_fusion_attention`
    on Megatron's tensors. ``[s, b, n, d]`` queries (``[s, b, g, d]`` keys and values) as ``SBH``, out
    ``[s, b, n * d]``; with ``starts_q`` (cumulative sequence starts), packed ``[t, n, d]`` as ``TND``, out
    ``[t, n * d]``. A given ``mask`` (``True`` masks out) is applied as it is (sparse mode 0); without one,
    ``causal`` is sparse mode 2."""
    sparse_mode = 2 if mask is None and causal else 0
    heads = query.shape[-2]
    if starts_q is not None:
        output = npu_fusion_attention(
            query,
            key,
            value,
            heads,
            "TND",
            atten_mask=mask,
            scale=scale,
            sparse_mode=sparse_mode,
            actual_seq_qlen=starts_q.tolist()[1:],
            actual_seq_kvlen=(starts_kv if starts_kv is not None else starts_q).tolist()[1:],
        )[0]
        return output.reshape(output.shape[0], -1)
    length, batch = query.shape[0], query.shape[1]
    return npu_fusion_attention(
        query.reshape(length, batch, -1),
        key.reshape(key.shape[0], batch, -1),
        value.reshape(value.shape[0], batch, -1),
        heads,
        "SBH",
        atten_mask=mask,
        scale=scale,
        sparse_mode=sparse_mode,
    )[0]


def npu_fusion_attention_grad(  # noqa: PLR0917 - torch_npu's published signature
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    dy: torch.Tensor,
    head_num: int,
    input_layout: str,
    *,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    softmax_max: torch.Tensor | None = None,
    softmax_sum: torch.Tensor | None = None,
    softmax_in: torch.Tensor | None = None,
    attention_in: torch.Tensor | None = None,
    scale_value: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = _NO_WINDOW,
    next_tockens: int = _NO_WINDOW,
    inner_precise: int = 0,
    seed: int = 0,
    offset: int = 0,
    numels: int = 0,
    prefix: Any = None,
    actual_seq_qlen: Any = None,
    actual_seq_kvlen: Any = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    softmax_layout: str = "",
    sink: torch.Tensor | None = None,
) -> tuple[Any, ...]:
    options = locals()  # the arguments by name, as the helpers read them
    layout = _checked_layout("npu_fusion_attention_grad", input_layout, options)
    if softmax_max is None or softmax_sum is None or attention_in is None:
        raise ValueError("npu_fusion_attention_grad (simulated): needs softmax_max, softmax_sum and attention_in")
    mask_for = _masks(options, query.device)
    if layout == "TND":
        grad_q, grad_k, grad_v = torch.zeros_like(query), torch.zeros_like(key), torch.zeros_like(value)
        heads = query.shape[1]
        for rows_q, rows_k in zip(*_sequences(actual_seq_qlen, actual_seq_kvlen), strict=True):
            q, k, v = _tnd_to_bnsd(query[rows_q]), _tnd_to_bnsd(key[rows_k]), _tnd_to_bnsd(value[rows_k])
            gradients = _attend_backward(
                q,
                k,
                v,
                grad_output=_tnd_to_bnsd(dy[rows_q]),
                output=_tnd_to_bnsd(attention_in[rows_q]),
                row_max=_tnd_statistic_rows(softmax_max, rows_q, heads),
                row_sum=_tnd_statistic_rows(softmax_sum, rows_q, heads),
                mask=mask_for(q.shape[2], k.shape[2]),
                scale=scale_value,
            )
            grad_q[rows_q] = gradients[0][0].transpose(0, 1)
            grad_k[rows_k] = gradients[1][0].transpose(0, 1)
            grad_v[rows_k] = gradients[2][0].transpose(0, 1)
    else:
        q = _to_bnsd(query, layout, head_num)
        groups = _kv_heads(query, key, layout, head_num)
        k, v = _to_bnsd(key, layout, groups), _to_bnsd(value, layout, groups)
        gradients = _attend_backward(
            q,
            k,
            v,
            grad_output=_to_bnsd(dy, layout, head_num),
            output=_to_bnsd(attention_in, layout, head_num),
            row_max=softmax_max[..., 0],
            row_sum=softmax_sum[..., 0],
            mask=mask_for(q.shape[2], k.shape[2]),
            scale=scale_value,
        )
        grad_q, grad_k, grad_v = (_from_bnsd(gradient, layout) for gradient in gradients)
    # dpse and dsink: empty without pse and sink (dsink float32, as torch_npu's meta function gives it)
    return grad_q, grad_k, grad_v, query.new_empty(0), torch.empty(0, device=query.device)


def npu_rms_norm(input: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """RMS norm over ``gamma``'s dimensions (the last ones): ``y`` in the input's dtype, ``rstd`` in float32."""
    dims = tuple(range(input.dim() - gamma.dim(), input.dim()))
    values = input.float()
    rstd = torch.rsqrt(values.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    return (values * rstd * gamma.float()).to(input.dtype), rstd
