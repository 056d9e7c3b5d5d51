"""SIMULATED ``mindspeed.features_manager``: the MindSpeed features verl's config reaches, per line.

Each feature registers its command-line options (the defaults of MindSpeed's argument
namespace) and, when MindSpeed's arguments turn it on, its patches of the real
megatron-core. Which features exist, and what they patch, is the line's
(:mod:`mindspeed.lines`). In MindSpeed's order (``create_features_list`` in
``mindspeed/features_manager/__init__.py``): the basic features (compute mode only, see
:mod:`mindspeed.compute`), context parallelism, then fusion attention, then the generate-mask
wrapper, then batch-invariant attention. Every other MindSpeed feature is not modelled.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from argparse import ArgumentParser, Namespace
from typing import Any, NoReturn

from mindspeed import lines
from mindspeed.patch_utils import MindSpeedPatchesManager

PARALLEL_STATE = "megatron.core.parallel_state"
ATTENTION_CLASS = "megatron.core.transformer.dot_product_attention.DotProductAttention"
ATTENTION_FORWARD = f"{ATTENTION_CLASS}.forward"
TE_MODULE = "megatron.core.extensions.transformer_engine"
TE_ATTENTION_CLASS = f"{TE_MODULE}.TEDotProductAttention"
TE_ATTENTION_FORWARD = f"{TE_ATTENTION_CLASS}.forward"


def te_attention_resolves() -> bool:
    """Whether Megatron's TE module imports and names ``TEDotProductAttention``.

    On an NPU it always does: MindSpeed's always-on ``requirements_basic`` makes ``transformer_engine``
    importable and ``transformer_engine_basic`` puts a class there. Here, without Transformer Engine,
    megatron-core 0.12.1's module fails to import and 0.16's names a placeholder; patches of TE's
    attention are registered only where the target resolves, so a CPU without TE keeps working.
    """
    try:
        module = importlib.import_module(TE_MODULE)
    except ImportError:
        return False
    return hasattr(module, "TEDotProductAttention")


def no_kernel(name: str) -> NoReturn:
    import torch_npu  # the simulated one: its kernels raise

    getattr(torch_npu, name)()
    raise AssertionError("unreachable")  # pragma: no cover


def dot_product_attention_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Fusion attention (``use_flash_attn``, CP < 2): replaces Megatron's forward.

    In compute mode it computes what fusion attention does (``mindspeed.compute.fusion_attention``,
    through the stand-in ``torch_npu.npu_fusion_attention``); otherwise that kernel raises.
    """
    from mindspeed import compute

    if not compute.compute_mode():
        no_kernel("npu_fusion_attention")
    return compute.fusion_attention(self, *args, **kwargs)


def dot_product_attention_forward_batch_invariant(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Batch-invariant flash attention (``use_flash_attn_npu_batch_invariant``): replaces it too."""
    no_kernel("npu_fusion_attention_batch_invariant")


_GENERATED_MASK: Any = None  # MindSpeed's _GLOBAL_ATTN_MASK: built once per process, then reused


def forget_generated_mask() -> None:
    """Test-only: as in a fresh process."""
    global _GENERATED_MASK
    _GENERATED_MASK = None


def _generated_mask(config: Any) -> Any:
    """What MindSpeed's ``get_attention_mask(config)`` gives (``core/transformer/flash_attention/generate_mask/
    generate_mask.py``, all lines read): with fusion attention on, a causal mask (``True`` above the diagonal)
    of 2048 x 2048, which fusion attention slices; without it, a dense mask that needs the config's
    ``micro_batch_size``, which nothing under verl sets, so MindSpeed raises (modelled: the error)."""
    global _GENERATED_MASK
    if _GENERATED_MASK is not None:
        return _GENERATED_MASK
    from mindspeed.args_utils import get_full_args

    # MindSpeed's megatron_basic copies its arguments into every TransformerConfig (not modelled): read
    # use_flash_attn from the config when it has it, else from MindSpeed's arguments, where repatch put it
    fused = getattr(config, "use_flash_attn", getattr(get_full_args(), "use_flash_attn", False))
    if not fused:
        if not hasattr(config, "micro_batch_size"):
            raise RuntimeError("Please set micro_batch_size or set use_flash_attn=True in config.")
        raise NotImplementedError("simulated MindSpeed: the dense generated mask (no fusion attention)")
    import torch

    size = 2048  # MindSpeed's compressed mask for fusion attention (multi-latent attention not modelled)
    _GENERATED_MASK = torch.triu(torch.ones(size, size, dtype=torch.bool, device="npu"), diagonal=1)
    return _GENERATED_MASK


def dot_product_attention_forward_wrapper(forward: Any) -> Any:
    """The generate-mask feature's wrapper of ``DotProductAttention.forward`` (at CP < 2, on by default).

    MindSpeed's ``GenerateMaskFeature`` (``features_manager/transformer/flash_attention/generate_mask_feature.py``
    on ``2.3.0_core_r0.12.1``, ``core_r0.16.0``, ``core_r0.17.0``, ``core_r0.18.0`` and master) registers it at
    import and at every repatch below CP 2, so Megatron's forward is always a wrapper, bound to its class at
    import. It keeps the wrapped function's name (``functools.wraps``, as MindSpeed's does). Called with no
    mask on a causal layer, it sets ``config.sparse_mode = 2`` and passes MindSpeed's generated mask.
    """

    @functools.wraps(forward)
    def wrapper(  # noqa: PLR0917 - Megatron's DotProductAttention.forward signature
        self: Any,
        query: Any,
        key: Any,
        value: Any,
        attention_mask: Any,
        attn_mask_type: Any = None,
        attention_bias: Any = None,
        packed_seq_params: Any = None,
    ) -> Any:
        from megatron.core.transformer.enums import AttnMaskType

        config = getattr(self, "config", None)
        causal = self.attn_mask_type == AttnMaskType.causal and not getattr(config, "is_llava", False)
        if attention_mask is None and causal:
            config.sparse_mode = 2
            attention_mask = _generated_mask(config)
        return forward(self, query, key, value, attention_mask, attn_mask_type, attention_bias, packed_seq_params)

    return wrapper


class Feature:
    def register_args(self, parser: ArgumentParser) -> None:
        pass

    def is_need_apply(self, args: Namespace) -> bool:
        return False

    def pre_register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        """Patches applied before the others at import and at each ``repatch`` (every line read has this pass; none
        of the modelled features uses it: the optimizer, checkpoint and MoE features that do are not modelled)."""

    def register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        pass


class MegatronBasicFeature(Feature):
    """MindSpeed's own options; Megatron's (``use_flash_attn``, ``context_parallel_size``) are not among them."""

    def register_args(self, parser: ArgumentParser) -> None:
        parser.add_argument("--optimization-level", type=int, default=2)


class ComputeBasicFeature(Feature):
    """``megatron_basic``, ``requirements_basic`` and ``transformer_engine_basic``, where models are built:
    in compute mode only (:mod:`mindspeed.compute`)."""

    def is_need_apply(self, args: Namespace) -> bool:
        from mindspeed import compute

        return compute.compute_mode()

    def register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        from mindspeed import compute

        line = lines.current()
        compute.register_basic_patches(manager, line)
        if not line.megatron_adaptor_package:  # there TransformerEngineNPU's layers, under Megatron's own TE classes
            compute.register_transformer_engine_patches(manager, line, int(getattr(args, "context_parallel_size", 1)))


class ContextParallelFeature(Feature):
    """Ring context parallelism: MindSpeed's attention class and its ring state, on lines that have them.

    ``mindspeed/features_manager/context_parallel/context_parallel_feature.py``: at CP > 1 with the default
    ``megatron_cp_algo``, ``2.3.0_core_r0.12.1``, ``core_r0.16.0`` and master put MindSpeed's CP class in place
    of both ``DotProductAttention`` and ``TEDotProductAttention`` (the class verl's TE-spec models build) and
    wrap ``initialize_model_parallel``; ``core_r0.17.0`` only wraps (its class swap needs an adaptive CP
    algorithm); ``core_r0.18.0`` does neither: context parallelism is TransformerEngineNPU's, and MindSpeed only
    wraps ``TEDotProductAttention.__init__`` when ``cp_window_size != 1`` or ``use_cp_send_recv_overlap`` asks
    for TENPU's double ring or overlap (:func:`te_dot_product_attention_init_wrapper`).
    """

    def register_args(self, parser: ArgumentParser) -> None:
        parser.add_argument("--context-parallel-algo", default="megatron_cp_algo")
        parser.add_argument("--cp-window-size", type=int, default=1)
        parser.add_argument("--use-cp-send-recv-overlap", action="store_true", default=False)
        parser.add_argument("--attention-mask-type", default="causal", choices=["causal", "general"])

    def is_need_apply(self, args: Namespace) -> bool:
        return int(getattr(args, "context_parallel_size", 1)) > 1

    def register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        line = lines.current()
        if line.cp_attention_class:
            from mindspeed.core.context_parallel.adaptor import MindSpeedCPDotProductAttention

            manager.register_patch(ATTENTION_CLASS, MindSpeedCPDotProductAttention)
            from mindspeed import compute

            # in compute mode the TE layers' patches include this one (compute.register_transformer_engine_patches)
            if not compute.compute_mode() and te_attention_resolves():
                manager.register_patch(TE_ATTENTION_CLASS, MindSpeedCPDotProductAttention)
        if line.ring_context_parallel:
            # imported here: a process that starts as core_r0.18.0 has no such wrappers (model_parallel_utils)
            from mindspeed.core.context_parallel.model_parallel_utils import (
                destroy_model_parallel_cp_wrapper,
                initialize_model_parallel_cp_wrapper,
            )

            manager.register_patch(f"{PARALLEL_STATE}.initialize_model_parallel", initialize_model_parallel_cp_wrapper)
            manager.register_patch(f"{PARALLEL_STATE}.destroy_model_parallel", destroy_model_parallel_cp_wrapper)
        tenpu_options = int(getattr(args, "cp_window_size", 1)) != 1 or getattr(args, "use_cp_send_recv_overlap", False)
        if line.megatron_adaptor_package and tenpu_options:
            manager.register_patch(f"{TE_ATTENTION_CLASS}.__init__", te_dot_product_attention_init_wrapper)


def te_dot_product_attention_init_wrapper(init: Any) -> Any:
    """MindSpeed 0.18's (``core/context_parallel/tenpu_adaptor.py``): after TENPU's attention is built, put
    ``cp_window_size`` and ``use_cp_send_recv_overlap`` on it, read from ``megatron.training.get_args()``.

    As there: Megatron-LM's training arguments, which verl never initialises. megatron-core 0.18's wheel ships
    ``megatron.training`` (``get_args()`` then fails: ``args is not initialized``), 0.12's does not (the import
    fails): either way, under verl this fails when the model is built.
    """

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        from megatron.training import get_args

        options = get_args()
        self.cp_window_size = int(getattr(options, "cp_window_size", 1))
        self.use_cp_send_recv_overlap = bool(getattr(options, "use_cp_send_recv_overlap", False))

    return wrapper


class FusionAttentionFeature(Feature):
    """``use_flash_attn``: only below CP 2 (at CP >= 2 the context-parallel attention class does attention)."""

    def is_need_apply(self, args: Namespace) -> bool:
        return bool(getattr(args, "use_flash_attn", False))

    def register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        if int(getattr(args, "context_parallel_size", 1)) < 2:
            manager.register_patch(ATTENTION_FORWARD, dot_product_attention_forward)


def _te_attention_is_a_class(manager: type[MindSpeedPatchesManager]) -> bool:
    """Whether ``TEDotProductAttention`` will be a class when this pass's patches are applied: one registered
    in this pass (applied first: its entry comes earlier), or the one there now (not megatron-core 0.16's
    placeholder for an absent Transformer Engine, which has no ``forward`` to replace)."""
    pending = manager.patches_info.get(TE_ATTENTION_CLASS)
    if pending is not None and pending.replacement is not None:
        return True
    if not te_attention_resolves():
        return False
    return inspect.isclass(importlib.import_module(TE_MODULE).TEDotProductAttention)


class GenerateMaskFeature(Feature):
    """The generate-mask wrapper of ``DotProductAttention.forward`` below CP 2, on every line, on by default
    (off only with ``no_create_attention_mask_in_dataloader``, Megatron's option): see
    :func:`dot_product_attention_forward_wrapper`."""

    def is_need_apply(self, args: Namespace) -> bool:
        return not getattr(args, "no_create_attention_mask_in_dataloader", None)

    def register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        if int(getattr(args, "context_parallel_size", 1)) < 2:
            manager.register_patch(ATTENTION_FORWARD, dot_product_attention_forward_wrapper)


class BatchInvariantFeature(Feature):
    """``core_r0.16.0`` only (``mindspeed/features_manager/batch_invariant/batch_invariant.py``).

    The feature is on with any of ``use_flash_attn_npu_batch_invariant``, ``use_batch_invariant_ops`` or
    ``batch_invariant_mode``, but only the first is attention: it replaces the ``forward`` of both
    ``DotProductAttention`` and ``TEDotProductAttention`` (each owner as looked up when the patch is first
    applied: at CP 2 that is MindSpeed's CP class, whose ring attention it then hides). The other two turn on
    batch-invariant *kernels*: MindSpeed imports ``batch_invariant_ops`` (ops-batchinvariant) right there, so
    without that package ``repatch`` raises ``ModuleNotFoundError`` with every patch left removed, as here;
    with it, the kernels it installs for the NPU (and its ``TransformerConfig.__post_init__`` wrapper for
    ``batch_invariant_mode``) are not modelled.
    """

    def register_args(self, parser: ArgumentParser) -> None:
        parser.add_argument("--use-batch-invariant-ops", action="store_true", default=False)
        parser.add_argument("--use-flash-attn-npu-batch-invariant", action="store_true", default=False)

    def is_need_apply(self, args: Namespace) -> bool:
        return any(
            getattr(args, name, False)
            for name in ("use_batch_invariant_ops", "use_flash_attn_npu_batch_invariant", "batch_invariant_mode")
        )

    def register_patches(self, manager: type[MindSpeedPatchesManager], args: Namespace) -> None:
        if getattr(args, "use_flash_attn_npu_batch_invariant", False):
            manager.register_patch(ATTENTION_FORWARD, dot_product_attention_forward_batch_invariant)
            if _te_attention_is_a_class(manager):
                manager.register_patch(TE_ATTENTION_FORWARD, dot_product_attention_forward_batch_invariant)
        if getattr(args, "use_batch_invariant_ops", False) or getattr(args, "batch_invariant_mode", False):
            importlib.import_module("batch_invariant_ops")


def features() -> list[Feature]:
    line = lines.current()
    found = [
        MegatronBasicFeature(),
        ComputeBasicFeature(),
        ContextParallelFeature(),
        FusionAttentionFeature(),
        GenerateMaskFeature(),
    ]
    return [*found, BatchInvariantFeature()] if line.batch_invariant else found


class MindSpeedFeaturesManager:
    @staticmethod
    def register_features_args(parser: ArgumentParser) -> None:
        for feature in features():
            feature.register_args(parser)

    @staticmethod
    def apply_features_pre_patches(args: Namespace) -> None:
        for feature in features():
            if feature.is_need_apply(args):
                feature.pre_register_patches(MindSpeedPatchesManager, args)
        MindSpeedPatchesManager.apply_patches()

    @staticmethod
    def apply_features_patches(args: Namespace) -> None:
        for feature in features():
            if feature.is_need_apply(args):
                feature.register_patches(MindSpeedPatchesManager, args)
        MindSpeedPatchesManager.apply_patches()

    @staticmethod
    def remove_patches() -> None:
        MindSpeedPatchesManager.remove_patches()
