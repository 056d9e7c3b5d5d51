"""Backport of verl #7055 to verl 0.8.0: the NPU attention mask built as bool, without float32 S x S tensors.

Mirrors: ``verl.models.mcore.util._build_npu_attn_mask`` as of verl 0.9.0, which builds the
causal part of the ``[B, 1, S, S]`` mask for ``torch_npu.npu_fusion_attention`` as bool.
Missing when: that function is exactly 0.8.0's (bytecode and constants: :mod:`npu_shim.fingerprint`).
0.8.0 builds the causal part as float32 and then casts it: two S x S float32 tensors alive at
once, 8 * S^2 bytes on the device for a mask of S^2 bools (8 GiB at 32k tokens), on the padded
path (BSHD, ``use_remove_padding=False``) that verl takes on an NPU. Same mask either way.
Does: rebinds ``_build_npu_attn_mask`` in that module to :func:`build_npu_attn_mask`. Its one
caller, ``preprocess_bshd_engine`` in the same module, looks the name up at call time.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from npu_shim import fingerprint
from npu_shim.changes import ChangeSet
from npu_shim.fixes import ALREADY_APPLIED, APPLIED, NATIVE, NOT_APPLICABLE, Outcome, is_ours, mark_as_ours

NAME = "npu_causal_mask"
WATCHES = "verl.models.mcore.util"
UPSTREAM_NAME = "_build_npu_attn_mask"
# `scripts/fingerprints.py <wheels> --member verl/models/mcore/util.py --function _build_npu_attn_mask`
VERL_0_8_0: fingerprint.KnownCode = {
    (3, 10): {"6c221806d4563cfb0dc1951614658840": "0.8.0"},
    (3, 11): {"acc743695fee82362bd07819a07757ee": "0.8.0"},
    (3, 12): {"86fc6ffd0d473f9fd4693723a078e727": "0.8.0"},
    (3, 13): {"a431c7b5c02febe83b80207b0caa42a6": "0.8.0"},
}
WITH_7055: fingerprint.KnownCode = {
    (3, 10): {"c9cd4f7c8e25c22fd08ebc5481e11171": "0.9.0, 0.9.1"},
    (3, 11): {"db3e4976b62079c8a2efc1a1b6866715": "0.9.0, 0.9.1"},
    (3, 12): {"f8ce9f7c69faf9a322c90258660168b8": "0.9.0, 0.9.1"},
    (3, 13): {"f9bd7c11b77731a824a580d9d64d9b97": "0.9.0, 0.9.1"},
}


def build_npu_attn_mask(original_attention_mask: Any) -> Any:
    """``[B, S]`` padding mask to the ``[B, 1, S, S]`` bool mask npu_fusion_attention takes: True where masked."""
    import torch

    seq_len = original_attention_mask.shape[-1]
    device = original_attention_mask.device
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril_()
    visible = original_attention_mask.unsqueeze(-1) & original_attention_mask.unsqueeze(-2)
    visible &= causal
    return (~visible).unsqueeze(1).contiguous()


mark_as_ours(build_npu_attn_mask)


def apply(module: ModuleType, changes: ChangeSet) -> Outcome:
    current = getattr(module, UPSTREAM_NAME, None)
    if is_ours(current):
        return Outcome(NAME, ALREADY_APPLIED, f"{UPSTREAM_NAME} is npu_shim's, bound earlier in this process")
    if fingerprint.known_release(current, VERL_0_8_0):
        changes.setattr(module, UPSTREAM_NAME, build_npu_attn_mask)
        return Outcome(NAME, APPLIED, f"{WATCHES}.{UPSTREAM_NAME} (verl 0.8.0's) now builds the mask as bool")
    if fingerprint.known_release(current, WITH_7055):
        return Outcome(NAME, NATIVE, f"{UPSTREAM_NAME} already builds the causal mask as bool (verl #7055)")
    if current is None:
        return Outcome(NAME, NOT_APPLICABLE, f"verl has no {WATCHES}.{UPSTREAM_NAME} (< 0.8.0)")
    return Outcome(NAME, NOT_APPLICABLE, f"{UPSTREAM_NAME} is not verl 0.8.0's; left as verl ships it")
