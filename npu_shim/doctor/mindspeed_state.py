"""What the MindSpeed in the probed interpreter offers verl, and what that means for the verl seen there.

Part of the doctor's probe (see ``verl_state``), read after verl imported its MindSpeed engine module.
README, "MindSpeed lines" (docs/mindspeed-lines.md), has the table this condenses.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from typing import Any

from npu_shim import mindspeed_line
from npu_shim.fixes import shared_repatch
from npu_shim.layout import VerlLayout

logger = logging.getLogger("npu_shim")


def installed() -> bool:
    """Whether a top-level ``mindspeed`` is found here; found, not imported (that could patch Megatron)."""
    try:
        return importlib.util.find_spec("mindspeed") is not None
    except (ImportError, ValueError):
        return False


def empty() -> dict[str, Any]:
    """The ``mindspeed`` section when verl's engine package did not import: nothing could be read."""
    return {
        "repatch_importable": False,
        "simulated": False,
        "batch_invariant_attention": None,
        "context_parallel_wrapper": None,
        "meaning": [],
    }


def mindspeed_state(layout: VerlLayout) -> dict[str, Any]:
    """What this MindSpeed offers verl, and what that means here.

    ``repatch_importable`` is whether verl's MindSpeed engine module bound ``repatch`` (what verl calls), not
    whether ``from mindspeed.megatron_adaptor import repatch`` works on its own (:func:`installed` says part of that).
    """
    # The `repatch` verl's own module bound: importing mindspeed here could patch Megatron out of order.
    repatch = getattr(layout.mindspeed_impl, "repatch", None)
    adaptor = sys.modules.get("mindspeed.megatron_adaptor")
    result: dict[str, Any] = {
        "repatch_importable": repatch is not None,
        "simulated": bool(getattr(adaptor, "SIMULATED", False)),
        "batch_invariant_attention": mindspeed_line.has_batch_invariant_attention(),
        "context_parallel_wrapper": None,
        "meaning": [],
    }
    if adaptor is not None:  # verl imported MindSpeed already: reading one more of its modules patches nothing
        try:
            cp_utils = importlib.import_module("mindspeed.core.context_parallel.model_parallel_utils")
            result["context_parallel_wrapper"] = hasattr(cp_utils, "initialize_model_parallel_cp_wrapper")
        except Exception as error:
            logger.debug("MindSpeed's context-parallel utilities did not import: %s: %s", type(error).__name__, error)
            result["context_parallel_wrapper"] = False
    in_place = getattr(layout.mindspeed_impl, shared_repatch.UPSTREAM_NAME, None)
    result["meaning"] = _mindspeed_meaning(result, shims_repatch=in_place is shared_repatch.mindspeed_repatch)
    return result


def _mindspeed_meaning(mindspeed: dict[str, Any], *, shims_repatch: bool) -> list[str]:
    """What the MindSpeed found means for this verl, with npu_shim's repatch in place here or not."""
    if not mindspeed["repatch_importable"]:
        return [
            "no repatch (MindSpeed absent, or a line without it such as 2.1.0_core_r0.12.1): verl's engine "
            "config never reaches MindSpeed; fusion attention and context parallelism only by MindSpeed's "
            "own command-line flags"
        ]
    meaning = []
    if mindspeed["batch_invariant_attention"] is False:
        meaning.append(
            "no batch-invariant flash attention (only core_r0.16.0 has it): use_flash_attn_npu_batch_invariant "
            "does nothing here; "
            + (
                "npu_shim keeps fusion attention on for it, with a warning"
                if shims_repatch
                else "verl >= 0.9 alone turns fusion attention off for it (Megatron's unfused attention)"
            )
        )
    elif mindspeed["batch_invariant_attention"]:
        meaning.append(
            "batch-invariant flash attention: it excludes fusion attention, and once an engine turns it on it is "
            "on for every engine in the process; "
            + (
                "npu_shim turns fusion attention off for it, and for engines built after one that set it, "
                "and refuses it with context parallelism (it would hide MindSpeed's ring attention)"
                if shims_repatch
                else "without npu_shim an engine without the key built after one with it (verl 0.8.0: any engine "
                "with it) dies with 'the patch of forward exist !'"
            )
        )
    if mindspeed["context_parallel_wrapper"]:
        meaning.append(
            "ring context parallelism: MindSpeed must see the CP size before Megatron's parallel state exists "
            "(the repatch in _init_device_mesh: verl >= 0.8.0, or npu_shim)"
        )
    elif mindspeed["context_parallel_wrapper"] is False:
        meaning.append("no wrapper of initialize_model_parallel: context parallelism is Megatron's own here")
    return meaning
