"""Backport of verl #6674 to verl 0.8.0: ``_mindspeed_repatch`` for batch-invariant attention.

Mirrors: ``_mindspeed_repatch`` as of verl 0.9.0, which maps a string
``attention_backend`` to Megatron's ``AttnBackend`` and sets ``use_flash_attn``
False when ``use_flash_attn_npu_batch_invariant`` is on.
Missing when: verl's ``_mindspeed_repatch`` is exactly 0.8.0's (its syntax tree:
:mod:`npu_shim.recognition`). That one always sets ``use_flash_attn``, so on
MindSpeed ``core_r0.16.0`` a batch-invariant run registers two replacements of
``DotProductAttention.forward`` and MindSpeed raises ``RuntimeError: the patch of forward
exist !`` while either Megatron engine is being built.
Does: rebinds the module's ``_mindspeed_repatch`` to :func:`~npu_shim.fixes.shared_repatch.mindspeed_repatch`
(#6674, and the MindSpeed-line mend of ``mindspeed_line_repatch``). Both 0.8.0 engines look
that global name up in their ``_init_device_mesh`` at call time, so nothing else is touched.
Any other ``_mindspeed_repatch`` (0.9.x, or one edited by hand) is left to the other fixes.
"""

from __future__ import annotations

from npu_shim.changes import ChangeSet
from npu_shim.fixes import NOT_APPLICABLE, Outcome
from npu_shim.fixes.shared_repatch import REPATCH_SOURCE, mindspeed_repatch
from npu_shim.layout import VerlLayout
from npu_shim.recognition import KnownFunction

NAME = "batch_invariant_repatch"
REPATCH = KnownFunction(
    fix=NAME,
    source=REPATCH_SOURCE,
    missing_in=("0.8.0",),
    fixed_in=("0.9.0", "0.9.1"),
    change="verl #6674",
    if_left="on MindSpeed core_r0.16.0 a batch-invariant run may fail while an engine is built with "
    "RuntimeError: the patch of forward exist !",
)


def apply(layout: VerlLayout, changes: ChangeSet) -> Outcome:
    if layout.mindspeed_impl is None:
        return Outcome(NAME, NOT_APPLICABLE, "verl's MindSpeed engine module did not import")
    judged = REPATCH.judge(layout.mindspeed_impl)
    if judged.missing:
        REPATCH.rebind(layout.mindspeed_impl, mindspeed_repatch, changes)
    return judged.outcome("now has #6674's semantics")
