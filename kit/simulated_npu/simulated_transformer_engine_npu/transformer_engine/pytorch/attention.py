"""SIMULATED TENPU ``DotProductAttention``: TE's attention API over the kit's fusion attention and ring.

Megatron's ``TEDotProductAttention`` hands it the heads, the query groups, the mask type by name, the softmax scale
and, at context parallel size > 1, the CP group, its global ranks and ``cp_comm_type``; its ``forward`` takes
``qkv_format`` (``sbhd``, or ``thd`` for packed sequences with ``cu_seqlens_*``) and returns ``[s, b, h * d]`` or
``[t, h * d]``.

- One CP rank: ``torch_npu.npu_fusion_attention`` (``SBH`` or ``TND``), causal for ``causal``/``padding_causal``.
- CP > 1 (``p2p``, TE's default and the only ``cp_comm_type`` modelled): the causal ring over the CP group's ranks in
  order, on verl's load-balanced chunks (rank ``r`` holds chunks ``r`` and ``2 * cp - 1 - r`` of each sequence). It
  is the same algorithm as MindSpeed's ring on the other lines, so the kit computes both with one implementation,
  loaded from the MindSpeed stand-in's file: TENPU does not import MindSpeed (real MindSpeed may be the one on the
  path). MindSpeed 0.18 puts ``cp_window_size`` and ``use_cp_send_recv_overlap`` on the instance before the first
  forward (its ``TEDotProductAttention.__init__`` wrapper); any other value than the defaults is refused.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

_RING_FILE = Path(__file__).parents[3] / "simulated/mindspeed/core/context_parallel/ring_context_parallel.py"
_RING_MODULE = "_simulated_npu_ring_attention"
_CAUSAL = ("causal", "padding_causal")


def _ring() -> ModuleType:
    module = sys.modules.get(_RING_MODULE)
    if module is None:
        spec = importlib.util.spec_from_file_location(_RING_MODULE, _RING_FILE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[_RING_MODULE] = module
    return module


class DotProductAttention(torch.nn.Module):
    def __init__(  # noqa: PLR0917 - TE's signature
        self,
        num_attention_heads: int,
        kv_channels: int | tuple[int, int],
        num_gqa_groups: int | None = None,
        attention_dropout: float = 0.0,
        qkv_format: str = "sbhd",
        attn_mask_type: str = "causal",
        window_size: Any = None,
        sequence_parallel: bool = False,
        tp_size: int = 1,
        get_rng_state_tracker: Any = None,
        tp_group: Any = None,
        layer_number: int | None = None,
        attention_type: str = "self",
        cp_group: Any = None,
        cp_global_ranks: list[int] | None = None,
        cp_stream: Any = None,
        cp_comm_type: str = "p2p",
        softmax_scale: float | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        refused = sorted(name for name, value in options.items() if value)
        if window_size is not None and tuple(window_size) != (-1, 0):
            refused.append("window_size")
        if refused:
            raise NotImplementedError(f"simulated TransformerEngineNPU DotProductAttention: {', '.join(refused)}")
        head_dim = kv_channels if isinstance(kv_channels, int) else kv_channels[0]
        self.num_attention_heads = num_attention_heads
        self.attention_dropout = attention_dropout
        self.qkv_format = qkv_format
        self.attn_mask_type = attn_mask_type
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
        self.layer_number = layer_number
        self.tp_group = tp_group
        self.cp_window_size = 1
        self.use_cp_send_recv_overlap = False
        self.set_context_parallel_group(cp_group, cp_global_ranks, cp_stream, cp_comm_type)

    def set_context_parallel_group(
        self, cp_group: Any, cp_global_ranks: list[int] | None, cp_stream: Any, cp_comm_type: str = "p2p"
    ) -> None:
        self.cp_group = cp_group
        self.cp_global_ranks = list(cp_global_ranks) if cp_global_ranks else None
        self.cp_stream = cp_stream
        self.cp_comm_type = cp_comm_type

    def forward(  # noqa: PLR0917 - TE's signature
        self,
        query_layer: torch.Tensor,
        key_layer: torch.Tensor,
        value_layer: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        qkv_format: str | None = None,
        cu_seqlens_q: torch.Tensor | None = None,
        cu_seqlens_kv: torch.Tensor | None = None,
        cu_seqlens_q_padded: torch.Tensor | None = None,
        cu_seqlens_kv_padded: torch.Tensor | None = None,
        max_seqlen_q: int | None = None,
        max_seqlen_kv: int | None = None,
        attn_mask_type: str | None = None,
        core_attention_bias_type: str = "no_bias",
        core_attention_bias: torch.Tensor | None = None,
        **options: Any,
    ) -> torch.Tensor:
        layout = qkv_format or self.qkv_format
        mask_type = attn_mask_type or self.attn_mask_type
        refused = sorted(name for name, value in options.items() if value)
        if core_attention_bias_type != "no_bias" or core_attention_bias is not None:
            refused.append("core_attention_bias")
        if self.training and self.attention_dropout > 0:
            refused.append("attention_dropout")
        if layout not in ("sbhd", "thd"):
            refused.append(f"qkv_format={layout!r}")
        if refused:
            raise NotImplementedError(f"simulated TransformerEngineNPU DotProductAttention: {', '.join(refused)}")
        starts_q = cu_seqlens_q_padded if cu_seqlens_q_padded is not None else cu_seqlens_q
        starts_kv = cu_seqlens_kv_padded if cu_seqlens_kv_padded is not None else cu_seqlens_kv
        if self.cp_global_ranks and len(self.cp_global_ranks) > 1:
            return self._ring_attention(query_layer, key_layer, value_layer, layout, mask_type, starts_q)
        from torch_npu._kernels import fusion_attention_in_megatron_layout

        return fusion_attention_in_megatron_layout(
            query_layer,
            key_layer,
            value_layer,
            scale=self.softmax_scale,
            causal=mask_type in _CAUSAL,
            mask=attention_mask,
            starts_q=starts_q if layout == "thd" else None,
            starts_kv=starts_kv,
        )

    def _ring_attention(  # noqa: PLR0917
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        layout: str,
        mask_type: str,
        starts_q: torch.Tensor | None,
    ) -> torch.Tensor:
        refused = []
        if self.cp_comm_type != "p2p":
            refused.append(f"cp_comm_type={self.cp_comm_type!r}")
        if self.cp_window_size != 1:
            refused.append("double-ring context parallelism (cp_window_size != 1)")
        if self.use_cp_send_recv_overlap:
            refused.append("send/receive overlap (use_cp_send_recv_overlap)")
        if layout != "thd" or mask_type not in _CAUSAL:
            refused.append("ring attention other than causal over packed (thd) sequences")
        if refused:
            raise NotImplementedError(f"simulated TransformerEngineNPU ring attention: {', '.join(refused)}")
        output = _ring().ringattn_context_parallel(
            query,
            key,
            value,
            ring_ranks=self.cp_global_ranks,
            group=self.cp_group,
            packed_seq_params=SimpleNamespace(cu_seqlens_q_padded=starts_q, cu_seqlens_q=starts_q),
            softmax_scale=self.softmax_scale,
        )
        return output.reshape(output.shape[0], -1)
