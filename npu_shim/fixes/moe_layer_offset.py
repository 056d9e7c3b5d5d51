"""Backport of verl #5580 ("Support compatibility enhancements of vp_stage", in 0.8.0) to verl 0.7.1.

Mirrors: ``verl.utils.megatron.router_replay_utils.get_moe_num_layers_to_build`` as #5580 left it
(also on the ``release/v0.7.1`` branch, as #5729): Megatron's ``get_transformer_layer_offset`` is
given ``vp_stage`` and ``pp_rank`` only where it takes them.
Missing when: that function is exactly PyPI verl 0.7.1's (:mod:`npu_shim.recognition`), which always
passes both, and megatron-core's ``get_transformer_layer_offset`` takes neither (megatron-core 0.12.1,
the Megatron of MindSpeed ``2.3.0_core_r0.12.1`` and of verl's own v0.7.1 Ascend image). verl 0.7.1's
Megatron engine asks the router-replay helper on every micro-batch, MoE model or not, so there every
forward of every Megatron engine, actor and critic, dies with ``TypeError:
get_transformer_layer_offset() got an unexpected keyword argument 'vp_stage'``. With megatron-core
0.13 and later nothing fails (not applicable).
Does: rebinds ``get_moe_num_layers_to_build`` in that module to :func:`moe_num_layers_to_build`; its
callers, in the same module, look the name up at call time.
"""

from __future__ import annotations

import inspect
import sys
from types import ModuleType
from typing import Any

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
    taken = inspect.signature(offset_of).parameters
    requested = {"vp_stage": vp_stage, "pp_rank": pp_rank}
    first = offset_of(config, **{name: value for name, value in requested.items() if name in taken})
    return sum(1 for index in range(first, first + layers) if module.is_moe_layer(config, index))


moe_num_layers_to_build.__qualname__ = UPSTREAM_NAME  # where it lives once applied


def megatron_takes_the_keywords(module: ModuleType) -> str:
    """Why verl's 0.7.1 code needs nothing beside this megatron-core (``""`` where it does)."""
    offset_of = getattr(module, "get_transformer_layer_offset", None)
    try:
        taken = inspect.signature(offset_of).parameters
    except (TypeError, ValueError):
        return ""
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
