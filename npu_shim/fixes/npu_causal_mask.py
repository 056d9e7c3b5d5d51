"""Backport of verl #7055 to verl 0.8.0: the NPU attention mask built as bool, without float32 S x S tensors.

Mirrors: ``verl.models.mcore.util._build_npu_attn_mask`` of verl 0.9.0.
Missing when: it is exactly 0.8.0's: two float32 S x S tensors on an NPU's padded path (8 GiB at 32k tokens).
Does: rebinds it to :func:`build_npu_attn_mask` (its one caller looks the name up at call time). Same mask.
"""

from __future__ import annotations

from typing import Any

from npu_shim.recognition import Rebinding

NAME = "npu_causal_mask"
WATCHES = "verl.models.mcore.util"


def build_npu_attn_mask(original_attention_mask: Any) -> Any:
    """``[B, S]`` padding mask to the ``[B, 1, S, S]`` bool mask npu_fusion_attention takes: True where masked."""
    import torch

    seq_len = original_attention_mask.shape[-1]
    device = original_attention_mask.device
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril_()
    visible = original_attention_mask.unsqueeze(-1) & original_attention_mask.unsqueeze(-2)
    visible &= causal
    return (~visible).unsqueeze(1).contiguous()


MASK_BUILDER = Rebinding(
    fix=NAME,
    source="verl/models/mcore/util.py:_build_npu_attn_mask",
    missing_in=("0.8.0",),
    fixed_in=("0.9.0", "0.9.1"),
    change="verl #7055",
    if_left="each padded forward on an NPU holds two float32 S x S tensors for its mask (8 GiB at 32k tokens)",
    replacement=build_npu_attn_mask,
    applied="now builds the mask as bool",
)
FIX = MASK_BUILDER.as_fix(WATCHES)
