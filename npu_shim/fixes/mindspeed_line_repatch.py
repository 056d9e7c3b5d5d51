"""Mends verl 0.9.x's ``_mindspeed_repatch`` for the MindSpeed line in the process (no upstream fix yet).

Mirrors: nothing upstream; verl 0.9.1 still gets this wrong. Its ``_mindspeed_repatch`` (#6674)
turns fusion attention (``use_flash_attn``) off whenever ``use_flash_attn_npu_batch_invariant``
is set, but only MindSpeed ``core_r0.16.0`` has batch-invariant flash attention: on the
``2.3.0_core_r0.12.1``/``f2b0977e`` line of verl's generic Ascend images, and on
``core_r0.18.0``, the engine then runs Megatron's unfused attention, with no word said. And
MindSpeed keeps its arguments for the whole process: when colocated roles are built one after
the other, an engine without the key after one with it dies on ``core_r0.16.0`` with
``RuntimeError: the patch of forward exist !``.
Missing when: verl's ``_mindspeed_repatch`` is exactly 0.9.0's or 0.9.1's (bytecode and
constants: :mod:`npu_shim.fingerprint`) and MindSpeed's ``repatch`` is there to call.
Does: rebinds ``_mindspeed_repatch`` to :func:`~npu_shim.fixes.shared_repatch.mindspeed_repatch`,
which is upstream's function plus :func:`npu_shim.mindspeed_line.fit`: fusion attention is turned
off for the batch-invariant key only where MindSpeed has that feature (elsewhere it stays on, and
one warning names the key), and also when an earlier engine in the process left the feature on
(one warning says every engine in the process now runs it). verl 0.6/0.7 and 0.8.0 get the same
function from ``shared_repatch`` and ``batch_invariant_repatch``.
"""

from __future__ import annotations

from npu_shim import fingerprint
from npu_shim.changes import ChangeSet
from npu_shim.fixes import ALREADY_APPLIED, APPLIED, NOT_APPLICABLE, Outcome
from npu_shim.fixes.shared_repatch import UPSTREAM_NAME, mindspeed_repatch, rebind_if_known, shipped_repatch
from npu_shim.layout import MINDSPEED_IMPL, VerlLayout

NAME = "mindspeed_line_repatch"
# code_fingerprint(_mindspeed_repatch.__code__) per Python minor version, from
# `scripts/fingerprints.py <0.9.0 and 0.9.1 wheels> --function _mindspeed_repatch`.
VERL_0_9: fingerprint.KnownCode = {
    (3, 10): {"2fede9bf882efcad422830441c65bee2": "0.9.0, 0.9.1"},
    (3, 11): {"cea841f4471d8ecea399192967cd439d": "0.9.0, 0.9.1"},
    (3, 12): {"80b19ca39974e227ca7ecb2a85ed4ca6": "0.9.0, 0.9.1"},
    (3, 13): {"dd5accd2fafaa8824ec62c905c0e5d36": "0.9.0, 0.9.1"},
}


def apply(layout: VerlLayout, changes: ChangeSet) -> Outcome:
    module = layout.mindspeed_impl
    if module is None:
        return Outcome(NAME, NOT_APPLICABLE, "verl's MindSpeed engine module did not import")
    if getattr(module, "repatch", None) is None:
        why = "MindSpeed has no repatch here (as on 2.1.0_core_r0.12.1): no engine config reaches it"
        return Outcome(NAME, NOT_APPLICABLE, why)
    if getattr(module, UPSTREAM_NAME, None) is mindspeed_repatch:
        if fingerprint.known_release(shipped_repatch(module), VERL_0_9):
            return Outcome(NAME, ALREADY_APPLIED, f"{UPSTREAM_NAME} was replaced earlier in this process")
        return Outcome(NAME, NOT_APPLICABLE, f"{UPSTREAM_NAME} is already npu_shim's, which is MindSpeed-line aware")
    release = rebind_if_known(layout, changes, VERL_0_9)
    if release:
        what = f"{MINDSPEED_IMPL}.{UPSTREAM_NAME} (verl {release}'s) now sets use_flash_attn per MindSpeed line"
        return Outcome(NAME, APPLIED, what)
    return Outcome(NAME, NOT_APPLICABLE, f"{UPSTREAM_NAME} is not verl 0.9.0's or 0.9.1's; left as verl ships it")
