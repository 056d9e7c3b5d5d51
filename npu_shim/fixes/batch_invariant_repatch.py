"""Backport of verl #6674 to verl 0.8.0: ``_mindspeed_repatch`` for batch-invariant attention.

Mirrors: ``_mindspeed_repatch`` as of verl 0.9.0, which maps a string
``attention_backend`` to Megatron's ``AttnBackend`` and sets ``use_flash_attn``
False when ``use_flash_attn_npu_batch_invariant`` is on.
Missing when: verl's ``_mindspeed_repatch`` is exactly 0.8.0's (bytecode and
constants: :mod:`npu_shim.fingerprint`). That one always sets ``use_flash_attn``, so on
MindSpeed ``core_r0.16.0`` a batch-invariant run registers two replacements of
``DotProductAttention.forward`` and MindSpeed raises ``RuntimeError: the patch of forward
exist !`` while either Megatron engine is being built.
Does: rebinds the module's ``_mindspeed_repatch`` to :func:`~npu_shim.fixes.shared_repatch.mindspeed_repatch`
(#6674, and the MindSpeed-line mend of ``mindspeed_line_repatch``). Both 0.8.0 engines look
that global name up in their ``_init_device_mesh`` at call time, so nothing else is touched.
Any other ``_mindspeed_repatch`` (0.9.x, or one edited by hand) is left to the other fixes.
"""

from __future__ import annotations

from npu_shim import fingerprint
from npu_shim.changes import ChangeSet
from npu_shim.fixes import ALREADY_APPLIED, APPLIED, NATIVE, NOT_APPLICABLE, Outcome
from npu_shim.fixes.shared_repatch import UPSTREAM_NAME, mindspeed_repatch, rebind_if_known, shipped_repatch
from npu_shim.layout import MINDSPEED_IMPL, VerlLayout

NAME = "batch_invariant_repatch"
# code_fingerprint(_mindspeed_repatch.__code__) of verl 0.8.0, per Python minor version, from
# `scripts/fingerprints.py <0.8.0 wheel> --function _mindspeed_repatch`. A Python not listed
# here recognises nothing, and the fix says "not applicable".
VERL_0_8_0: fingerprint.KnownCode = {
    (3, 10): {"182211432ee01a4aeb4dacf2647cc591": "0.8.0"},
    (3, 11): {"183ee97a16e586b87e35b9ab591865b4": "0.8.0"},
    (3, 12): {"d0289e70145fa504617814447f1c7623": "0.8.0"},
    (3, 13): {"ea1dba6754a13bcf439e46a405c74888": "0.8.0"},
}


def apply(layout: VerlLayout, changes: ChangeSet) -> Outcome:
    if rebind_if_known(layout, changes, VERL_0_8_0):
        return Outcome(NAME, APPLIED, f"{MINDSPEED_IMPL}.{UPSTREAM_NAME} (verl 0.8.0's) now has #6674's semantics")
    return Outcome(NAME, *_why_not(layout))


def _why_not(layout: VerlLayout) -> tuple[str, str]:
    module = layout.mindspeed_impl
    if module is None:
        return NOT_APPLICABLE, "verl's MindSpeed engine module did not import"
    shipped = shipped_repatch(module)
    if shipped is mindspeed_repatch:
        return NOT_APPLICABLE, f"{UPSTREAM_NAME} is npu_shim's own (shared_repatch), which has #6674"
    if fingerprint.known_release(shipped, VERL_0_8_0):
        return ALREADY_APPLIED, f"{UPSTREAM_NAME} was replaced earlier in this process"
    if shipped is None:
        return NOT_APPLICABLE, f"verl has no {UPSTREAM_NAME} (< 0.8.0)"
    if "use_flash_attn_npu_batch_invariant" in getattr(getattr(shipped, "__code__", None), "co_consts", ()):
        return NATIVE, f"{UPSTREAM_NAME} already handles use_flash_attn_npu_batch_invariant (verl #6674)"
    return NOT_APPLICABLE, f"{UPSTREAM_NAME} is not verl 0.8.0's; left as verl ships it"
