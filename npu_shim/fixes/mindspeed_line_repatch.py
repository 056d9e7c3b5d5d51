"""verl's ``_mindspeed_repatch`` of 0.8.0 to 0.9.1 made the shim's: #6674 carried to 0.8.0, and per MindSpeed line.

Mirrors: 0.9.0's ``_mindspeed_repatch`` (#6674), plus the per-line ``use_flash_attn`` (docs/mindspeed-lines.md).
Missing when: it is exactly 0.8.0's, 0.9.0's or 0.9.1's and verl bound MindSpeed's ``repatch`` for it to call.
Does: rebinds it to :func:`~npu_shim.fixes.shared_repatch.mindspeed_repatch`; both engines look it up at call time.
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
