"""Backport of verl #5580 ("Support compatibility enhancements of vp_stage", in 0.8.0) to verl 0.7.1.

Mirrors: ``verl.utils.megatron.router_replay_utils.get_moe_num_layers_to_build`` as #5580 left it
(also on the ``release/v0.7.1`` branch, as #5729): Megatron's ``get_transformer_layer_offset`` is
given ``vp_stage`` and ``pp_rank`` only where it takes them.
Missing when: that function is exactly PyPI verl 0.7.1's (:mod:`npu_shim.fingerprint`), which always
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

from npu_shim import fingerprint
from npu_shim.changes import ChangeSet
from npu_shim.fixes import ALREADY_APPLIED, APPLIED, NATIVE, NOT_APPLICABLE, Outcome, is_ours, mark_as_ours

NAME = "moe_layer_offset"
WATCHES = "verl.utils.megatron.router_replay_utils"
UPSTREAM_NAME = "get_moe_num_layers_to_build"
# `scripts/fingerprints.py <wheels> --member verl/utils/megatron/router_replay_utils.py
#  --function get_moe_num_layers_to_build`; release/v0.7.1's file prints as 0.8.0's.
VERL_0_7_1: fingerprint.KnownCode = {
    (3, 10): {"7d17f9d33082cf36255daf073e52a6e1": "0.7.1"},
    (3, 11): {"3caaa51d7e24c5581777463a3e83be55": "0.7.1"},
    (3, 12): {"fead9f14dd15474bfaa7e32f45873d74": "0.7.1"},
    (3, 13): {"a35c4b6fca0ca9d0dc65b5d19dcaf79b": "0.7.1"},
}
WITH_5580: fingerprint.KnownCode = {
    (3, 10): {"ffb39c1f1c88f712e7d888c9ade28420": "0.8.0, 0.9.0, 0.9.1"},
    (3, 11): {"53d245dd4996e33535bcad8f5750b431": "0.8.0, 0.9.0, 0.9.1"},
    (3, 12): {"226b5fec66a8b34892b0c825846239bb": "0.8.0, 0.9.0, 0.9.1"},
    (3, 13): {"d940760b6cf448028769926dec1bdc7e": "0.8.0, 0.9.0, 0.9.1"},
}
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
mark_as_ours(moe_num_layers_to_build)


def takes_offset_keywords(module: ModuleType) -> bool:
    offset_of = getattr(module, "get_transformer_layer_offset", None)
    try:
        taken = inspect.signature(offset_of).parameters
    except (TypeError, ValueError):
        return False
    return all(name in taken for name in OFFSET_KEYWORDS)


def apply(module: ModuleType, changes: ChangeSet) -> Outcome:
    current = getattr(module, UPSTREAM_NAME, None)
    if is_ours(current):
        return Outcome(NAME, ALREADY_APPLIED, f"{UPSTREAM_NAME} is npu_shim's, bound earlier in this process")
    if release := fingerprint.known_release(current, WITH_5580):
        return Outcome(NAME, NATIVE, f"{UPSTREAM_NAME} passes only what Megatron takes (verl #5580, in {release})")
    if not fingerprint.known_release(current, VERL_0_7_1):
        what = f"verl has no {WATCHES}.{UPSTREAM_NAME}" if current is None else f"{UPSTREAM_NAME} is not verl 0.7.1's"
        return Outcome(NAME, NOT_APPLICABLE, f"{what}; left as verl ships it")
    if takes_offset_keywords(module):
        return Outcome(NAME, NOT_APPLICABLE, "this megatron-core's get_transformer_layer_offset takes both keywords")
    changes.setattr(module, UPSTREAM_NAME, moe_num_layers_to_build)
    why = f"{UPSTREAM_NAME} (verl 0.7.1's) now passes get_transformer_layer_offset only what this Megatron takes"
    return Outcome(NAME, APPLIED, why)
