"""verl's ``_mindspeed_repatch`` of 0.8.0 to 0.9.1, made the shim's: #6674 carried to 0.8.0, and per MindSpeed line.

Mirrors: ``_mindspeed_repatch`` as of verl 0.9.0 (#6674), which maps a string ``attention_backend``
to Megatron's ``AttnBackend`` and turns fusion attention (``use_flash_attn``) off when
``use_flash_attn_npu_batch_invariant`` is on; plus one mend upstream lacks (verl 0.9.1 still gets it
wrong): only MindSpeed ``core_r0.16.0`` has batch-invariant flash attention, so on the
``2.3.0_core_r0.12.1``/``f2b0977e`` line of verl's generic Ascend images, and on ``core_r0.18.0``,
0.9.x's engine then runs Megatron's unfused attention, with no word said. And MindSpeed keeps its
arguments for the whole process: when colocated roles are built one after the other, an engine
without the key after one with it dies on ``core_r0.16.0`` with ``RuntimeError: the patch of forward
exist !``.
Missing when: verl's ``_mindspeed_repatch`` is exactly 0.8.0's, 0.9.0's or 0.9.1's (its syntax tree:
:mod:`npu_shim.recognition`) and verl bound MindSpeed's ``repatch`` for it to call. 0.8.0's always
sets ``use_flash_attn``, so on ``core_r0.16.0`` a batch-invariant run registers two replacements of
``DotProductAttention.forward`` and MindSpeed raises that error while either engine is being built.
Does: rebinds ``_mindspeed_repatch`` to :func:`~npu_shim.fixes.shared_repatch.mindspeed_repatch`,
upstream's function plus :func:`npu_shim.mindspeed_line.fit`: fusion attention is turned off for the
batch-invariant key only where MindSpeed has that feature (elsewhere it stays on, and one warning
names the key), and also when an earlier engine in the process left the feature on (one warning
says every engine in the process now runs it). Both engines look that global name up in their
``_init_device_mesh`` at call time, so nothing else is touched. verl 0.6/0.7 get the same function
from ``shared_repatch``.
"""

from __future__ import annotations

from types import ModuleType

from npu_shim.fixes.shared_repatch import UPSTREAM_NAME, mindspeed_repatch
from npu_shim.recognition import Rebinding

NAME = "mindspeed_line_repatch"


def nothing_reaches_repatch(module: ModuleType) -> str:
    """Why verl's function needs nothing here: verl bound no MindSpeed ``repatch`` for it to call (``""`` if it did)."""
    if getattr(module, "repatch", None) is None:
        return "verl bound no MindSpeed repatch (the doctor's mindspeed lines say why): no engine config reaches it"
    return ""


REPATCH = Rebinding(
    fix=NAME,
    source=f"verl/workers/engine/mindspeed/transformer_impl.py:{UPSTREAM_NAME}",
    missing_in=("0.8.0", "0.9.0", "0.9.1"),
    fixed_in=(),  # no upstream fix yet
    change="the MindSpeed-line mend (and verl #6674 on 0.8.0)",
    if_left="batch-invariant runs on a MindSpeed line without that feature run unfused attention, and on "
    "core_r0.16.0 a batch-invariant run (on 0.8.0) or colocated engines (on 0.9.x) may fail while an engine is "
    "built with RuntimeError: the patch of forward exist !",
    needs_nothing=nothing_reaches_repatch,
    replacement=mindspeed_repatch,
    applied="now has #6674's semantics and sets use_flash_attn per MindSpeed line",
)
FIX = REPATCH.as_fix()
