"""SIMULATED ``mindspeed.features_manager``: the MindSpeed features verl's config reaches, per line.

Each feature registers its command-line options (the defaults of MindSpeed's argument
namespace) and, when MindSpeed's arguments turn it on, its patches of the real
megatron-core. Which features exist, and what they patch, is the line's
(:mod:`mindspeed.lines`). In MindSpeed's order: context parallelism, then fusion
attention, then batch-invariant attention. Every other MindSpeed feature is not modelled.
"""

from __future__ import annotations

from argparse import ArgumentParser, Namespace
from typing import Any, NoReturn

from mindspeed import lines
from mindspeed.patch_utils import MindSpeedPatchesManager

PARALLEL_STATE = "megatron.core.parallel_state"
ATTENTION_CLASS = "megatron.core.transformer.dot_product_attention.DotProductAttention"
ATTENTION_FORWARD = f"{ATTENTION_CLASS}.forward"


def no_kernel(name: str) -> NoReturn:
    import torch_npu  # the simulated one: its kernels raise

    getattr(torch_npu, name)()
    raise AssertionError("unreachable")  # pragma: no cover


def dot_product_attention_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Fusion attention (``use_flash_attn``, CP < 2): replaces Megatron's forward."""
    no_kernel("npu_fusion_attention")


def dot_product_attention_forward_batch_invariant(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Batch-invariant flash attention (``use_flash_attn_npu_batch_invariant``): replaces it too."""
    no_kernel("npu_fusion_attention_batch_invariant")


class Feature:
    def register_args(self, parser: ArgumentParser) -> None:
        pass

    def is_need_apply(self, args: Namespace) -> bool:
        return False

    def register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        pass


class MegatronBasicFeature(Feature):
    """MindSpeed's own options; Megatron's (``use_flash_attn``, ``context_parallel_size``) are not among them."""

    def register_args(self, parser: ArgumentParser) -> None:
        parser.add_argument("--optimization-level", type=int, default=2)


class ContextParallelFeature(Feature):
    """Ring context parallelism: MindSpeed's attention class and its ring state, on lines that have them."""

    def register_args(self, parser: ArgumentParser) -> None:
        parser.add_argument("--context-parallel-algo", default="megatron_cp_algo")
        parser.add_argument("--cp-window-size", type=int, default=1)

    def is_need_apply(self, args: Namespace) -> bool:
        return lines.current().ring_context_parallel and int(getattr(args, "context_parallel_size", 1)) > 1

    def register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        from mindspeed.core.context_parallel.adaptor import MindSpeedCPDotProductAttention
        from mindspeed.core.context_parallel.model_parallel_utils import (
            destroy_model_parallel_cp_wrapper,
            initialize_model_parallel_cp_wrapper,
        )

        manager.register_patch(ATTENTION_CLASS, MindSpeedCPDotProductAttention)
        manager.register_patch(f"{PARALLEL_STATE}.initialize_model_parallel", initialize_model_parallel_cp_wrapper)
        manager.register_patch(f"{PARALLEL_STATE}.destroy_model_parallel", destroy_model_parallel_cp_wrapper)


class FusionAttentionFeature(Feature):
    """``use_flash_attn``: only below CP 2 (at CP >= 2 the context-parallel attention class does attention)."""

    def is_need_apply(self, args: Namespace) -> bool:
        return bool(getattr(args, "use_flash_attn", False))

    def register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        if int(getattr(args, "context_parallel_size", 1)) < 2:
            manager.register_patch(ATTENTION_FORWARD, dot_product_attention_forward)


class BatchInvariantFeature(Feature):
    """``core_r0.16.0`` only. ``use_batch_invariant_ops`` (batch-invariant kernels) is stored, not modelled."""

    def register_args(self, parser: ArgumentParser) -> None:
        parser.add_argument("--use-batch-invariant-ops", action="store_true", default=False)
        parser.add_argument("--use-flash-attn-npu-batch-invariant", action="store_true", default=False)

    def is_need_apply(self, args: Namespace) -> bool:
        return bool(getattr(args, "use_flash_attn_npu_batch_invariant", False))

    def register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        manager.register_patch(ATTENTION_FORWARD, dot_product_attention_forward_batch_invariant)


def features() -> list[Feature]:
    line = lines.current()
    found = [MegatronBasicFeature(), ContextParallelFeature(), FusionAttentionFeature()]
    return [*found, BatchInvariantFeature()] if line.batch_invariant else found


class MindSpeedFeaturesManager:
    @staticmethod
    def register_features_args(parser: ArgumentParser) -> None:
        for feature in features():
            feature.register_args(parser)

    @staticmethod
    def apply_features_patches(args: Namespace) -> None:
        for feature in features():
            if feature.is_need_apply(args):
                feature.register_patches(MindSpeedPatchesManager, args)
        MindSpeedPatchesManager.apply_patches()

    @staticmethod
    def remove_patches() -> None:
        MindSpeedPatchesManager.remove_patches()
