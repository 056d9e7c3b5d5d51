"""Mends verl 0.9.x's ``_mindspeed_repatch`` for the MindSpeed line in the process (no upstream fix yet).

Mirrors: nothing upstream; verl 0.9.1 still gets this wrong. Its ``_mindspeed_repatch`` (#6674)
turns fusion attention (``use_flash_attn``) off whenever ``use_flash_attn_npu_batch_invariant``
is set, but only MindSpeed ``core_r0.16.0`` has batch-invariant flash attention: on the
``2.3.0_core_r0.12.1``/``f2b0977e`` line of verl's generic Ascend images, and on
``core_r0.18.0``, the engine then runs Megatron's unfused attention, with no word said. And
MindSpeed keeps its arguments for the whole process: when colocated roles are built one after
the other, an engine without the key after one with it dies on ``core_r0.16.0`` with
``RuntimeError: the patch of forward exist !``.
Missing when: verl's ``_mindspeed_repatch`` is exactly 0.9.0's or 0.9.1's (its syntax tree:
:mod:`npu_shim.recognition`) and MindSpeed's ``repatch`` is there to call.
Does: rebinds ``_mindspeed_repatch`` to :func:`~npu_shim.fixes.shared_repatch.mindspeed_repatch`,
which is upstream's function plus :func:`npu_shim.mindspeed_line.fit`: fusion attention is turned
off for the batch-invariant key only where MindSpeed has that feature (elsewhere it stays on, and
one warning names the key), and also when an earlier engine in the process left the feature on
(one warning says every engine in the process now runs it). verl 0.6/0.7 and 0.8.0 get the same
function from ``shared_repatch`` and ``batch_invariant_repatch``.
"""

from __future__ import annotations

from npu_shim.changes import ChangeSet
from npu_shim.fixes import NOT_APPLICABLE, Outcome
from npu_shim.fixes.shared_repatch import REPATCH_SOURCE, mindspeed_repatch
from npu_shim.layout import VerlLayout
from npu_shim.recognition import KnownFunction

NAME = "mindspeed_line_repatch"
REPATCH = KnownFunction(
    fix=NAME,
    source=REPATCH_SOURCE,
    missing_in=("0.9.0", "0.9.1"),
    fixed_in=(),  # no upstream fix yet
    change="the MindSpeed-line mend",
    if_left="batch-invariant runs on a MindSpeed line without that feature run unfused attention, and colocated "
    "engines may fail on core_r0.16.0 with RuntimeError: the patch of forward exist !",
)


def apply(layout: VerlLayout, changes: ChangeSet) -> Outcome:
    module = layout.mindspeed_impl
    if module is None:
        return Outcome(NAME, NOT_APPLICABLE, "verl's MindSpeed engine module did not import")
    if getattr(module, "repatch", None) is None:
        why = "verl bound no MindSpeed repatch (the doctor's mindspeed lines say why): no engine config reaches it"
        return Outcome(NAME, NOT_APPLICABLE, why)
    judged = REPATCH.judge(module)
    if judged.missing:
        REPATCH.rebind(module, mindspeed_repatch, changes)
    return judged.outcome("now sets use_flash_attn per MindSpeed line")
