"""Backport of verl #5580 ("Support compatibility enhancements of vp_stage", in 0.8.0) to verl 0.7.1.

Mirrors: ``get_moe_num_layers_to_build`` after #5580: ``vp_stage`` and ``pp_rank`` only where Megatron takes them.
Missing when: it is exactly 0.7.1's, passing both to a megatron-core that takes neither (0.12.1): every Megatron
forward raises ``TypeError`` (docs/fixes.md).
Does: rebinds the function in its module, whose callers look the name up at call time.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from npu_shim.fingerprint import parameters
from npu_shim.recognition import Rebinding

NAME = "moe_layer_offset"
WATCHES = "verl.utils.megatron.router_replay_utils"
UPSTREAM_NAME = "get_moe_num_layers_to_build"
OFFSET_KEYWORDS = ("vp_stage", "pp_rank")


def moe_num_layers_to_build(config: Any, vp_stage: int | None = None, pp_rank: int | None = None) -> int:
    """How many of the layers this rank (and virtual stage) builds are MoE layers."""
    module = sys.modules[WATCHES]
    layers = module.get_num_layers_to_build(config, vp_stage=vp_stage, pp_rank=pp_rank)
    offset_of = module.get_transformer_layer_offset
    taken = parameters(offset_of)
    requested = {"vp_stage": vp_stage, "pp_rank": pp_rank}
    first = offset_of(config, **{name: value for name, value in requested.items() if name in taken})
    return sum(1 for index in range(first, first + layers) if module.is_moe_layer(config, index))


moe_num_layers_to_build.__qualname__ = UPSTREAM_NAME  # where it lives once applied


def megatron_takes_the_keywords(module: ModuleType) -> str:
    """Why verl's 0.7.1 code needs nothing beside this megatron-core (``""`` where it does)."""
    taken = parameters(getattr(module, "get_transformer_layer_offset", None))
    if all(name in taken for name in OFFSET_KEYWORDS):
        return "this megatron-core's get_transformer_layer_offset takes both keywords"
    return ""


# release/v0.7.1's function is 0.8.0's (#5729).
LAYER_COUNT = Rebinding(
    fix=NAME,
    source=f"verl/utils/megatron/router_replay_utils.py:{UPSTREAM_NAME}",
    missing_in=("0.7.1",),
    fixed_in=("0.8.0", "0.9.0", "0.9.1"),
    change="verl #5580",
    if_left="unless the local patch mends it, every forward of a Megatron engine, actor and critic, raises "
    "TypeError: get_transformer_layer_offset() got an unexpected keyword argument 'vp_stage'",
    breaks_critic=True,
    needs_nothing=megatron_takes_the_keywords,
    replacement=moe_num_layers_to_build,
    applied="now passes get_transformer_layer_offset only what this Megatron takes",
)
FIX = LAYER_COUNT.as_fix(WATCHES)
