"""SIMULATED ``mindspeed.features_manager``: the three MindSpeed features verl's config reaches.

Each feature is on or off by MindSpeed's arguments and, when on, registers its
patches of the real megatron-core. ``DotProductAttention`` is not swapped for
MindSpeed's CP attention class here (that swap is not modelled).
"""

from __future__ import annotations

from argparse import Namespace
from dataclasses import dataclass
from typing import Any, NoReturn

from mindspeed.core.context_parallel.model_parallel_utils import (
    destroy_model_parallel_cp_wrapper,
    initialize_model_parallel_cp_wrapper,
)
from mindspeed.patch_utils import PatchesManager

PARALLEL_STATE = "megatron.core.parallel_state"
ATTENTION_FORWARD = "megatron.core.transformer.dot_product_attention.DotProductAttention.forward"


def _no_kernel(name: str) -> NoReturn:
    import torch_npu  # the simulated one: its kernels raise

    getattr(torch_npu, name)()
    raise AssertionError("unreachable")  # pragma: no cover


def dot_product_attention_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Fusion attention (``use_flash_attn``): replaces Megatron's forward."""
    _no_kernel("npu_fusion_attention")


def dot_product_attention_forward_batch_invariant(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Batch-invariant flash attention (``use_flash_attn_npu_batch_invariant``): replaces it too."""
    _no_kernel("npu_fusion_attention_batch_invariant")


@dataclass(frozen=True)
class Feature:
    name: str
    argument: str

    def enabled(self, args: Namespace) -> bool:
        value = getattr(args, self.argument, None)
        return value > 1 if self.argument == "context_parallel_size" else bool(value)

    def register_patches(self, manager: type[PatchesManager], args: Namespace) -> None:
        for target, function in PATCHES[self.name]:
            manager.register_patch(target, function)


PATCHES = {
    "context-parallel": [
        (f"{PARALLEL_STATE}.initialize_model_parallel", initialize_model_parallel_cp_wrapper),
        (f"{PARALLEL_STATE}.destroy_model_parallel", destroy_model_parallel_cp_wrapper),
    ],
    "flash-attention": [(ATTENTION_FORWARD, dot_product_attention_forward)],
    "flash-attention-batch-invariant": [(ATTENTION_FORWARD, dot_product_attention_forward_batch_invariant)],
}
FEATURES = [
    Feature("context-parallel", "context_parallel_size"),
    Feature("flash-attention", "use_flash_attn"),
    Feature("flash-attention-batch-invariant", "use_flash_attn_npu_batch_invariant"),
]


def apply_features(args: Namespace) -> None:
    for feature in FEATURES:
        if feature.enabled(args):
            feature.register_patches(PatchesManager, args)
    PatchesManager.apply_patches()
