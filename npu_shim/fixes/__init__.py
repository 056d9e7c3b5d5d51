"""One module per upstream verl change that npu_shim backports, applied in this order.

Each module says which verl change it mirrors, how it tells that the change is
missing, and what it does. ``WATCHES`` names the verl module it changes (default:
``verl.workers.engine``, whose fixes get a :class:`~npu_shim.layout.VerlLayout`);
the hook calls ``apply`` right after that module is imported, with the module (or
the layout) and a :class:`~npu_shim.changes.ChangeSet` shared by the fixes of that
module, so that a failure in any of them reverts all of their edits.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from npu_shim.changes import ChangeSet
from npu_shim.layout import ENGINE_PACKAGE

APPLIED = "applied"
ALREADY_APPLIED = "already applied"  # by an earlier activation in this process
NATIVE = "native"  # this verl has the change: npu_shim stands aside
NOT_APPLICABLE = "not applicable"  # nothing to fix here (old verl, no Megatron, no MindSpeed engine)
UNRECOGNISED = "unrecognised"  # the change is missing here, but the code is no release's: left alone, with a warning


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
        megatron_checkpoint_save,
        megatron_critic,
        mindspeed_line_repatch,
        moe_layer_offset,
        npu_causal_mask,
        shared_repatch,
        value_engine,
        vlm_mask_on_npu,
    )

    return [
        shared_repatch,  # verl #6135: the repatch function both engines share
        value_engine,  # verl #6135: the MindSpeed value-head engine
        lm_engine_repatch,  # verl #5697/#6135: LM engine repatches before the device mesh
        megatron_critic,  # verl #5870: 0.7.1's critic forward passes a keyword its forward does not take
        batch_invariant_repatch,  # verl #6674: 0.8.0's repatch function, batch-invariant attention
        mindspeed_line_repatch,  # no upstream fix yet: 0.9.x's repatch function, per MindSpeed line
        npu_causal_mask,  # verl #7055: 0.8.0's NPU causal mask without a float32 S x S
        vlm_mask_on_npu,  # verl #7372: 0.8.0's and 0.9.0's VLM mask, not None on an NPU
        megatron_checkpoint_save,  # verl #6322, for any torch >= 2.8: megatron-core 0.12.1's checkpoint save
        moe_layer_offset,  # verl #5580: 0.7.1's router-replay helper asks megatron-core 0.12.1 for keywords it lacks
    ]


def watches(fix: ModuleType) -> str:
    """The verl module ``fix`` changes, after whose import the hook applies it."""
    return getattr(fix, "WATCHES", ENGINE_PACKAGE)


def watched_modules() -> list[str]:
    """Every module some fix watches, once each, in the order of the fixes."""
    return list(dict.fromkeys(watches(fix) for fix in fix_modules()))


def apply_watching(module_name: str, target: Any, changes: ChangeSet) -> list[Outcome]:
    """Apply the fixes that watch ``module_name`` to ``target`` (that module, or a layout of the engine package)."""
    return [fix.apply(target, changes) for fix in fix_modules() if watches(fix) == module_name]
