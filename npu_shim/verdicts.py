"""What a fix found and what it did: the verdicts, the :class:`Outcome` the hook records, npu_shim's mark.

A leaf: it imports nothing of npu_shim, so the fixes, the judgement that recognises verl's code,
the hook and the doctor all import it and none of them imports another to reach it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

APPLIED = "applied"
ALREADY_APPLIED = "already applied"  # by an earlier activation in this process
NATIVE = "native"  # this verl has the change: npu_shim stands aside
NOT_APPLICABLE = "not applicable"  # nothing to fix here (old verl, no Megatron, no MindSpeed engine)
UNRECOGNISED = "unrecognised"  # the change is missing here, but the code is no release's: left alone, with a warning
DISABLED = "disabled"  # turned off by NPU_SHIM_DISABLED_FIXES: not applied, whatever this verl needs
MISSING = "missing"  # a judgement only, never an outcome: the change is missing, and the fix applies it


@dataclass(frozen=True)
class Outcome:
    fix: str
    verdict: str
    reason: str


def mark_as_ours(obj: Any) -> None:
    """Tag a class or function npu_shim added, so later activations and the doctor can tell it from verl's."""
    obj.__npu_shim__ = True


def is_ours(obj: Any) -> bool:
    return getattr(obj, "__npu_shim__", False) is True
