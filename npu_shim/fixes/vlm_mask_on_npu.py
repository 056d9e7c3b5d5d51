"""Backport of verl #7372 to verl 0.8.0 and 0.9.0: a VLM's THD attention mask on an NPU too.

Mirrors: ``verl.models.mcore.util.build_vlm_attn_mask_thd`` after #7372 (not 0.9.1's TP x CP padding, #7702).
Missing when: it is exactly 0.8.0's or 0.9.0's, whose ``None`` mask on an NPU counts padding as real tokens, silently.
Does: rebinds the name in ``verl.models.mcore.model_forward`` (its caller imported it by name) and in ``util``.
"""

from __future__ import annotations

from typing import Any

from npu_shim.recognition import Rebinding

NAME = "vlm_mask_on_npu"
WATCHES = "verl.models.mcore.model_forward"
UTIL = "verl.models.mcore.util"


def build_vlm_attn_mask_thd(input_ids: Any, pad_token_id: int | None = None) -> tuple[Any, Any]:
    """Jagged ``input_ids`` to ``[B, S_max]`` padded ids and the bool mask of each row's real tokens."""
    import torch

    padded = input_ids.to_padded_tensor(pad_token_id)
    lengths = input_ids.offsets().diff().to(padded.device)
    positions = torch.arange(padded.shape[1], device=padded.device)
    return padded, positions.unsqueeze(0) < lengths.unsqueeze(1)


MASK_BUILDER = Rebinding(
    fix=NAME,
    source="verl/models/mcore/util.py:build_vlm_attn_mask_thd",
    missing_in=("0.8.0", "0.9.0"),
    fixed_in=("0.9.1",),
    change="verl #7372",
    if_left="a vision-language model on an NPU with use_remove_padding counts the padding as real tokens, silently",
    replacement=build_vlm_attn_mask_thd,
    applied="now returns the mask on an NPU too",
    bound_in=(WATCHES, UTIL),  # its caller's name for it, judged, then where it is defined
)
FIX = MASK_BUILDER.as_fix(WATCHES)
