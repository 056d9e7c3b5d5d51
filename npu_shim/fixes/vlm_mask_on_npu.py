"""Backport of verl #7372 to verl 0.8.0 and 0.9.0: a VLM's THD attention mask on an NPU too.

Mirrors: ``verl.models.mcore.util.build_vlm_attn_mask_thd`` after #7372, which pads the jagged
(THD) ``input_ids`` and returns the mask of each row's real tokens on every device. (0.9.1's
also pads the width to a multiple of TP x CP, a later change, #7702, that this does not carry.)
Missing when: the function is exactly 0.8.0's or 0.9.0's (the same code), which returns
``(padded input_ids, None)`` when ``is_npu_available``: with ``use_remove_padding`` a
vision-language model on an NPU (Qwen3.5-VL with Megatron/MindSpeed-Bridge) then counts the
padding as real tokens, silently.
Does: rebinds the name in ``verl.models.mcore.model_forward``, whose ``gptmodel_forward_model_engine``
is its one caller and imported it by name, and in ``verl.models.mcore.util``, to
:func:`build_vlm_attn_mask_thd`. Watching ``model_forward`` covers both: it imports ``util`` first.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from npu_shim import fingerprint
from npu_shim.changes import ChangeSet
from npu_shim.fixes import ALREADY_APPLIED, APPLIED, NATIVE, NOT_APPLICABLE, Outcome, is_ours, mark_as_ours

NAME = "vlm_mask_on_npu"
WATCHES = "verl.models.mcore.model_forward"
UTIL = "verl.models.mcore.util"
UPSTREAM_NAME = "build_vlm_attn_mask_thd"
# `scripts/fingerprints.py <wheels> --member verl/models/mcore/util.py --function build_vlm_attn_mask_thd`
WITHOUT_7372: fingerprint.KnownCode = {
    (3, 10): {"af19a87b15f60f07651ccaafa6f624a8": "0.8.0, 0.9.0"},
    (3, 11): {"c75d807b14745d22737eea6e53fb8feb": "0.8.0, 0.9.0"},
    (3, 12): {"3fe99141f976bd96f8e6b6ecfbfbbd82": "0.8.0, 0.9.0"},
    (3, 13): {"523bcfcea3608400ccc73c00af8b46c6": "0.8.0, 0.9.0"},
}
WITH_7372: fingerprint.KnownCode = {
    (3, 10): {"a6cd84faeb22f8d605c37dd1ecdf81de": "0.9.1"},
    (3, 11): {"3784d0dec52960882abd6322173d74a3": "0.9.1"},
    (3, 12): {"e6dd139f15a9b10999d2ecbba592c993": "0.9.1"},
    (3, 13): {"e44bee43e3e801a0d2d8a3b83802e602": "0.9.1"},
}


def build_vlm_attn_mask_thd(input_ids: Any, pad_token_id: int | None = None) -> tuple[Any, Any]:
    """Jagged ``input_ids`` to ``[B, S_max]`` padded ids and the bool mask of each row's real tokens."""
    import torch

    padded = input_ids.to_padded_tensor(pad_token_id)
    lengths = input_ids.offsets().diff().to(padded.device)
    positions = torch.arange(padded.shape[1], device=padded.device)
    return padded, positions.unsqueeze(0) < lengths.unsqueeze(1)


mark_as_ours(build_vlm_attn_mask_thd)


def apply(model_forward: ModuleType, changes: ChangeSet) -> Outcome:
    util = sys.modules.get(UTIL)
    current = getattr(model_forward, UPSTREAM_NAME, None)
    if is_ours(current):
        return Outcome(NAME, ALREADY_APPLIED, f"{UPSTREAM_NAME} is npu_shim's, bound earlier in this process")
    release = fingerprint.known_release(current, WITHOUT_7372)
    if release:
        for module in (util, model_forward):
            if module is not None and fingerprint.known_release(getattr(module, UPSTREAM_NAME, None), WITHOUT_7372):
                changes.setattr(module, UPSTREAM_NAME, build_vlm_attn_mask_thd)
        return Outcome(
            NAME, APPLIED, f"{UPSTREAM_NAME} (the code of verl {release}) now returns the mask on an NPU too"
        )
    if fingerprint.known_release(current, WITH_7372):
        return Outcome(NAME, NATIVE, f"{UPSTREAM_NAME} returns the mask on every device (verl #7372)")
    if current is None:
        return Outcome(NAME, NOT_APPLICABLE, f"{WATCHES} has no {UPSTREAM_NAME} (< 0.8.0)")
    return Outcome(NAME, NOT_APPLICABLE, f"{UPSTREAM_NAME} is not verl 0.8.0's or 0.9.0's; left as verl ships it")
