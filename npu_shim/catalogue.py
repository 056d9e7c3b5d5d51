"""The fixes, in the order the hook applies them (a new fix is a module of :mod:`npu_shim.fixes` declaring ``FIX``,
and one line of :data:`FIXES`), and the one application of a module's fixes.
"""

from __future__ import annotations

from types import ModuleType

from npu_shim.fixes import (
    lm_engine_repatch,
    megatron_checkpoint_metadata,
    megatron_checkpoint_save,
    megatron_critic,
    mindspeed_line_repatch,
    moe_layer_offset,
    npu_causal_mask,
    npu_smi_card,
    ray_npu_device_index,
    shared_repatch,
    value_engine,
    vlm_mask_on_npu,
)
from npu_shim.patcher import DISABLED, Fix, Outcome, Writer
from npu_shim.recognition import KnownFunction
from npu_shim.settings import DISABLED_FIXES, disabled_fixes

FIXES: tuple[Fix, ...] = (
    shared_repatch.FIX,  # verl #6135: the repatch function both engines share
    value_engine.FIX,  # verl #6135: the MindSpeed value-head engine
    lm_engine_repatch.FIX,  # verl #5697/#6135: LM engine repatches before the device mesh
    megatron_critic.FIX,  # verl #5870: 0.7.1's critic forward passes a keyword its forward does not take
    mindspeed_line_repatch.FIX,  # verl #6674 on 0.8.0, and per MindSpeed line on 0.8.0 to 0.9.1 (no upstream fix yet)
    npu_causal_mask.FIX,  # verl #7055: 0.8.0's NPU causal mask without a float32 S x S
    vlm_mask_on_npu.FIX,  # verl #7372: 0.8.0's and 0.9.0's VLM mask, not None on an NPU
    megatron_checkpoint_save.FIX,  # verl #6322, for any torch >= 2.8: megatron-core 0.12.1's checkpoint save
    megatron_checkpoint_metadata.FIX,  # megatron-core 0.15's MCoreMetadata: 0.12's checkpoint metadata on torch 2.10
    moe_layer_offset.FIX,  # verl #5580: 0.7.1's router-replay helper asks megatron-core 0.12.1 for keywords it lacks
    ray_npu_device_index.FIX,  # verl #7507 (open): a Ray worker's NPU by the place of Ray's id in the visible list
    npu_smi_card.FIX,  # verl #6762 (closed unfixed): the rollout's IPC decision from a card the host has, once
)


def fix_names() -> list[str]:
    return [fix.name for fix in FIXES]


def watched_modules() -> list[str]:
    """Every module some fix watches, once each, in the order of the fixes."""
    return list(dict.fromkeys(fix.watches for fix in FIXES))


def apply_module(module: ModuleType, writer: Writer) -> list[Outcome]:
    """Apply the fixes that watch ``module``, just imported, through ``writer`` (the doctor reverts its edits), but
    those ``NPU_SHIM_DISABLED_FIXES`` names; one that raises leaves ``module`` as it was, and the error propagates."""
    turned_off = disabled_fixes(fix_names())
    try:
        return [
            Outcome(fix.name, DISABLED, f"turned off by {DISABLED_FIXES}")
            if fix.name in turned_off
            else fix.apply(module, writer)
            for fix in FIXES
            if fix.watches == module.__name__
        ]
    except BaseException:
        writer.revert()
        raise


def declared_functions() -> list[KnownFunction]:
    """Every verl function a fix recognises, in the order of the fixes."""
    return [known for fix in FIXES for known in fix.known]


def critic_fails_without(fix_name: str) -> bool:
    """Whether a Megatron critic on an NPU fails where the fix ``fix_name`` is missing and not applied."""
    return any(known.breaks_critic for known in declared_functions() if known.fix == fix_name)
