"""One module per upstream verl change that npu_shim backports, applied in this order.

Each module says which verl change it mirrors, how it tells that the change is
missing, and what it does; each ``apply`` returns an :class:`Outcome` and makes
its edits through the shared :class:`~npu_shim.changes.ChangeSet`, so that a
failure anywhere reverts all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from npu_shim.changes import ChangeSet
from npu_shim.layout import VerlLayout

APPLIED = "applied"
ALREADY_APPLIED = "already applied"  # by an earlier activation in this process
NATIVE = "native"  # this verl has the change: npu_shim stands aside
NOT_APPLICABLE = "not applicable"  # nothing to fix here (old verl, no Megatron, no MindSpeed engine)


def mark_as_ours(obj: Any) -> None:
    """Tag a class or function npu_shim added, so later activations and the doctor can tell it from verl's."""
    obj.__npu_shim__ = True


def is_ours(obj: Any) -> bool:
    return getattr(obj, "__npu_shim__", False) is True


@dataclass(frozen=True)
class Outcome:
    fix: str
    verdict: str
    reason: str


def fix_modules() -> list[ModuleType]:
    """The fix modules, in the order they are applied (each has ``NAME`` and ``apply``)."""
    # Imported here: each fix module imports this package for Outcome and the verdicts.
    from npu_shim.fixes import (
        batch_invariant_repatch,
        lm_engine_repatch,
        mindspeed_line_repatch,
        shared_repatch,
        value_engine,
    )

    return [
        shared_repatch,  # verl #6135: the repatch function both engines share
        value_engine,  # verl #6135: the MindSpeed value-head engine
        lm_engine_repatch,  # verl #5697/#6135: LM engine repatches before the device mesh
        batch_invariant_repatch,  # verl #6674: 0.8.0's repatch function, batch-invariant attention
        mindspeed_line_repatch,  # no upstream fix yet: 0.9.x's repatch function, per MindSpeed line
    ]


def apply_all(layout: VerlLayout, changes: ChangeSet) -> list[Outcome]:
    return [fix.apply(layout, changes) for fix in fix_modules()]
