"""SIMULATED MindSpeed, compute mode only: what MindSpeed does so that Megatron's models build and run on an NPU.

Applied only when the stand-in torch_npu computes (``NPU_SHIM_SIM_COMPUTE=1``): plain mode builds no
model, and leaves Megatron as MindSpeed's other features (``features_manager``) have it. Read from
Ascend/MindSpeed's ``mindspeed/features_manager/megatron_basic/{megatron_basic,requirements_basic,
transformer_engine_basic}.py`` and ``mindspeed/core/megatron_basic/arguments_basic.py`` on
``2.3.0_core_r0.12.1`` and ``core_r0.16.0``; Megatron-native underneath, never copied:

- ``TransformerConfig.__init__`` accepts keys it has no field for (MindSpeed's always-on
  ``megatron_basic``: they become attributes of the config). verl 0.7.1's LM engine writes
  ``use_flash_attn`` into the config that reaches it. The real wrapper also passes MindSpeed's own
  arguments into the config; not modelled.
- ``tensor_parallel.random._set_cuda_rng_state`` sets the device generator's state (``megatron_basic``
  replaces it on both lines; Megatron's own would queue the call for a CUDA that never initialises).
- ``torch.compile`` (and ``torch.jit.script``) return the function, uncompiled (``requirements_basic``
  on both lines): on an NPU there is no Inductor backend, and once ``transfer_to_npu`` has routed
  ``torch.cuda``, Inductor takes the NPU for CUDA and fails (verl's entropy compiles a helper).
- Transformer Engine is absent on an NPU; MindSpeed stands in for it (``requirements_basic`` makes
  ``import transformer_engine`` succeed, reporting version 2.2.0, and ``transformer_engine_basic``
  replaces Megatron's ``TE*`` layers), so TE layer specs, which verl builds through mbridge, resolve
  to layers that run. Modelled by giving Megatron's GPT layer specs the TE names their failed
  import left out (``TESpecProvider``, ``TENorm``), TE version 2.2.0, and these layers, with TE's
  parameter names (``layer_norm_weight``), which mbridge's weight names rely on:

  - ``TENorm``: a torch-native norm (``PTNorm`` on ``2.3.0_core_r0.12.1``; MindSpeed's own ``TENorm``,
    torch-native too, on ``core_r0.16.0``);
  - ``TELayerNormColumnParallelLinear``: MindSpeed's, a norm then a column-parallel linear (both lines);
  - ``TEColumnParallelLinear``/``TERowParallelLinear``: Megatron's ``ColumnParallelLinear``/
    ``RowParallelLinear`` (``2.3.0_core_r0.12.1``; MindSpeed's own TE linears on ``core_r0.16.0``,
    modelled as Megatron's);
  - ``TEDotProductAttention`` at CP 1: Megatron's ``DotProductAttention`` on ``2.3.0_core_r0.12.1``, the
    class whose ``forward`` ``use_flash_attn`` replaces; on ``core_r0.16.0`` MindSpeed's own TE attention,
    fusion attention inside, which ``use_flash_attn`` does not touch (lines not read here: as
    ``core_r0.16.0``);
  - ``TEDotProductAttention`` at CP > 1: MindSpeed's context-parallel attention (both lines).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

TE = "megatron.core.extensions.transformer_engine"
SPECS = "megatron.core.models.gpt.gpt_layer_specs"
TE_VERSION = "2.2.0"  # what MindSpeed's requirements_basic reports for transformer-engine


def compute_mode() -> bool:
    import torch_npu

    compute = getattr(torch_npu, "_compute", None)
    return bool(compute is not None and compute.enabled())


# --- megatron_basic -------------------------------------------------------------------------------


def transformer_config_init_wrapper(init: Any) -> Any:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        fields = inspect.signature(type(self)).parameters
        unknown = {key: value for key, value in kwargs.items() if key not in fields}
        for key, value in unknown.items():
            if not hasattr(self, key):
                object.__setattr__(self, key, value)
        return init(self, *args, **{key: value for key, value in kwargs.items() if key in fields})

    wrapper.__name__ = init.__name__
    wrapper.__qualname__ = init.__qualname__
    wrapper.__wrapped__ = init
    return wrapper


def set_device_rng_state(new_state: torch.Tensor, device: Any = -1, graph_safe: bool = False) -> None:
    """Megatron's ``_set_cuda_rng_state``, on the (simulated) NPU's generator, at once."""
    torch.npu.set_rng_state(new_state)


def eager_compile(*args: Any, **kwargs: Any) -> Any:
    """``torch.compile(fn)`` or ``torch.compile(**options)(fn)``: ``fn`` itself, run eagerly."""
    if args and callable(args[0]):
        return args[0]
    return lambda function: function


def te_version() -> Any:
    from packaging.version import Version

    return Version(TE_VERSION)


# --- transformer_engine_basic ---------------------------------------------------------------------


class TENorm:
    """A torch-native RMSNorm/LayerNorm (parameters ``weight``, ``bias``), as MindSpeed's ``PTNorm``/``TENorm``."""

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5) -> torch.nn.Module:
        if config.normalization == "RMSNorm":
            norm: torch.nn.Module = torch.nn.RMSNorm(hidden_size, eps=eps)
        elif config.normalization == "LayerNorm":
            norm = torch.nn.LayerNorm(hidden_size, eps=eps)
        else:
            raise ValueError(f"normalization={config.normalization!r}: only LayerNorm and RMSNorm")
        for parameter in norm.parameters():
            parameter.sequence_parallel = config.sequence_parallel
        return norm


def fusion_attention(  # noqa: PLR0917 - Megatron's DotProductAttention.forward signature
    self: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    attn_mask_type: Any = None,
    attention_bias: torch.Tensor | None = None,
    packed_seq_params: Any = None,
) -> torch.Tensor:
    """What MindSpeed's fusion attention computes, through ``torch_npu.npu_fusion_attention``.

    Megatron's forward arguments: query ``[s, b, n, d]``, key and value ``[s, b, g, d]``, or ``[t, n, d]``
    with ``packed_seq_params`` (packed sequences, ``thd``: each sequence attends within itself). A given
    ``attention_mask`` (``True`` masks out) is applied as it is; without one, a causal mask type is causal.
    """
    from megatron.core.transformer.enums import AttnMaskType
    from torch_npu._kernels import fusion_attention_in_megatron_layout

    if attention_bias is not None:
        raise NotImplementedError("simulated MindSpeed fusion attention: attention_bias is not supported")
    mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
    starts_q = starts_kv = None
    if packed_seq_params is not None:
        starts_q = getattr(packed_seq_params, "cu_seqlens_q_padded", None)
        starts_kv = getattr(packed_seq_params, "cu_seqlens_kv_padded", None)
        starts_q = packed_seq_params.cu_seqlens_q if starts_q is None else starts_q
        starts_kv = packed_seq_params.cu_seqlens_kv if starts_kv is None else starts_kv
    return fusion_attention_in_megatron_layout(
        query,
        key,
        value,
        scale=self.softmax_scale,
        causal=mask_type in (AttnMaskType.causal, AttnMaskType.padding_causal),
        mask=attention_mask,
        starts_q=starts_q,
        starts_kv=starts_kv,
    )


def quantize_param_shard(*args: Any, **kwargs: Any) -> None:
    """MindSpeed's stand-in for Megatron's fp32 -> fp8 parameter shard cast: there are no fp8 parameters."""
    import warnings

    warnings.warn("Casting fp32 main params to fp8 model params is not supported (simulated MindSpeed)", stacklevel=2)


def register_basic_patches(manager: Any, line: Any) -> None:
    """``megatron_basic`` (configuration, RNG) and ``requirements_basic`` (TE present, version 2.2.0).

    On the lines with MegatronAdaptor and TransformerEngineNPU (``core_r0.17.0``, ``core_r0.18.0``) those moved out
    of MindSpeed: ``torch.compile`` and the RNG state setter are MegatronAdaptor's (for the whole process), the TE
    version and layers TENPU's. MindSpeed 0.18's own always-on ``npu-enhancement`` keeps the configuration wrapper
    and puts its ``PTNorm`` (TENPU's norms) in every Megatron norm slot (:func:`register_npu_enhancement_patches`).
    """
    manager.register_patch(
        "megatron.core.transformer.transformer_config.TransformerConfig.__init__", transformer_config_init_wrapper
    )
    if line.megatron_adaptor_package:
        register_npu_enhancement_patches(manager)
        return
    manager.register_patch("megatron.core.tensor_parallel.random._set_cuda_rng_state", set_device_rng_state)
    manager.register_patch("megatron.core.utils.get_te_version", te_version)
    manager.register_patch("torch.compile", eager_compile)
    manager.register_patch("torch.jit.script", eager_compile)
    # megatron_basic on both lines: no FP8 on an NPU, so the distributed optimizer's fp32 -> fp8 shard cast
    # warns instead of raising (megatron-core 0.12.1 raises once it sees a TE version it has no cast for)
    manager.register_patch("megatron.core.fp8_utils.quantize_param_shard", quantize_param_shard)
    if te_layers_home() == SPECS:
        # megatron-core 0.12: its TE module imports transformer_engine unguarded (so does mbridge, through it)
        install_transformer_engine_dummy()
        return  # the TE names go straight into the specs too (register_transformer_engine_patches)
    manager.register_patch(f"{SPECS}.TESpecProvider", spec_provider(), create_dummy=True)
    manager.register_patch(f"{SPECS}.TENorm", TENorm, create_dummy=True)


# Where MindSpeed 0.18's npu-enhancement puts PTNorm (``_register_norm_patches``), each with force_patch
PTNORM_TARGETS = (
    f"{SPECS}.LNImpl",
    "megatron.core.transformer.torch_norm.WrappedTorchNorm",
    "megatron.core.transformer.transformer_block.LayerNormImpl",
    f"{TE}.TENorm",
)


class PTNorm:
    """MindSpeed 0.18's ``PTNorm`` (``core/megatron_basic/megatron_basic.py``): TransformerEngineNPU's ``LayerNorm``
    or ``RMSNorm``, built as Megatron's ``TENorm`` builds TE's (without its fused residual). Without TENPU it fails
    to import, as MindSpeed's does."""

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5, **kwargs: Any) -> torch.nn.Module:
        from megatron.core.extensions.transformer_engine import _get_extra_te_kwargs
        from transformer_engine.pytorch import LayerNorm, RMSNorm

        if config.normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError("Only LayerNorm and RMSNorm are curently supported")  # MindSpeed's words
        norm = LayerNorm if config.normalization == "LayerNorm" else RMSNorm
        return norm(
            normalized_shape=hidden_size,
            eps=eps,
            sequence_parallel=config.sequence_parallel,
            zero_centered_gamma=config.layernorm_zero_centered_gamma,
            **_get_extra_te_kwargs(config),
        )


def register_npu_enhancement_patches(manager: Any) -> None:
    for target in PTNORM_TARGETS:
        manager.register_patch(target, PTNorm, force_patch=True)


_SPEC_PROVIDER: Any = None


def spec_provider() -> Any:
    """Megatron's ``TESpecProvider`` for its GPT specs, which bind ``None`` where Transformer Engine did not import
    (megatron-core 0.18; 0.16 binds the class either way).

    A subclass of its own, never Megatron's class itself: removing a patch rebinds every module that holds the
    replacement back to the original, as MindSpeed's ``remove_patch`` does (any module whose attribute of that
    name *is* the patch), so with Megatron's own class as the replacement, the first ``repatch`` would also set
    ``transformer_engine_spec_provider.TESpecProvider``, the class's home, to the specs' ``None``. On the real
    lines Transformer Engine imports (MindSpeed's or TransformerEngineNPU's) and the name is never ``None``.
    """
    global _SPEC_PROVIDER
    if _SPEC_PROVIDER is None:
        from megatron.core.extensions.transformer_engine_spec_provider import TESpecProvider

        _SPEC_PROVIDER = type("TESpecProvider", (TESpecProvider,), {"__module__": __name__})
    return _SPEC_PROVIDER


# What MindSpeed's requirements_basic (te_adaptation) creates as dummies, each a torch.nn.Module: enough for
# megatron-core 0.12's TE module to import (its classes subclass these; transformer_engine_basic then replaces them)
TRANSFORMER_ENGINE_DUMMIES = {
    "transformer_engine.pytorch": ("LayerNorm", "LayerNormLinear", "DotProductAttention", "Linear", "GroupedLinear"),
    "transformer_engine.pytorch.distributed": ("CudaRNGStatesTracker",),
    "transformer_engine.pytorch.fp8": ("fp8_autocast", "FP8GlobalStateManager"),
    "transformer_engine.common.recipe": ("DelayedScaling",),
}


def install_transformer_engine_dummy() -> None:
    """``import transformer_engine`` succeeds, as MindSpeed's ``create_dummy`` patches make it on an NPU.

    Only where no Transformer Engine is installed; it reports ``TE_VERSION``. Each module has a spec:
    ``importlib.util.find_spec`` raises on a module in ``sys.modules`` without one.
    """
    import importlib.machinery
    import sys
    import types
    from importlib.util import find_spec

    if "transformer_engine" not in sys.modules and find_spec("transformer_engine") is not None:
        return  # a real one
    for module_name, attributes in TRANSFORMER_ENGINE_DUMMIES.items():
        parts = module_name.split(".")
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            if name not in sys.modules:
                module = types.ModuleType(name)
                module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
                module.__path__ = []
                sys.modules[name] = module
                if depth > 1:
                    setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], module)
        for attribute in attributes:
            if not hasattr(sys.modules[module_name], attribute):
                setattr(sys.modules[module_name], attribute, type(attribute, (torch.nn.Module,), {}))
    sys.modules["transformer_engine"].__version__ = TE_VERSION


def install_apex_dummy(megatron_adaptor: bool = False) -> None:
    """``apex.optimizers.FusedAdam`` is MindSpeed's AdamW, as MindSpeed's ``requirements_basic`` makes it (its
    ``create_dummy`` patches, before Megatron is imported): Megatron then builds its optimizers as with Apex.

    Only on lines that do it (``lines.Line.fused_adam``), or for the MegatronAdaptor stand-in (``core_r0.17.0``,
    ``core_r0.18.0``, where MA does it), and where no Apex is installed. ``FusedSGD`` is torch's
    SGD there too; Apex's fused kernels (``amp_C``, ``multi_tensor_applier``) are not modelled, so Megatron keeps
    its local implementations of those.
    """
    import importlib.machinery
    import sys
    import types
    from importlib.util import find_spec

    from mindspeed import lines

    if not (lines.current().fused_adam or megatron_adaptor) or "apex" in sys.modules or find_spec("apex") is not None:
        return
    from mindspeed.core.optimizer.adamw import AdamW

    for name in ("apex", "apex.optimizers"):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module.__path__ = []
        sys.modules[name] = module
    sys.modules["apex"].optimizers = sys.modules["apex.optimizers"]
    sys.modules["apex.optimizers"].FusedAdam = AdamW
    sys.modules["apex.optimizers"].FusedSGD = torch.optim.SGD


def te_layers_home() -> str:
    """Where Megatron's TE layer specs take the ``TE*`` layers from: its TE module, or the specs themselves.

    megatron-core 0.13 and later: the TE module (it imports without Transformer Engine; the specs reach it
    through ``TESpecProvider``). megatron-core 0.12 (verl 0.6.x's pairing, MindSpeed's ``2.3.0_core_r0.12.1``):
    that module imports ``transformer_engine`` unguarded (:func:`install_transformer_engine_dummy`), and the
    specs module binds the ``TE*`` names itself at its import, leaving them out if that import failed.
    """
    from importlib.util import find_spec

    return TE if find_spec(f"{TE}_spec_provider") is not None else SPECS


def register_transformer_engine_patches(manager: Any, line: Any, context_parallel_size: int) -> None:
    """``transformer_engine_basic`` (and, at CP > 1, the context-parallel feature's TE attention)."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    from mindspeed import te_layers

    layers: dict[str, Any] = {
        "TENorm": TENorm,
        "TELayerNormColumnParallelLinear": te_layers.TELayerNormColumnParallelLinear,
        "TEColumnParallelLinear": ColumnParallelLinear,
        "TERowParallelLinear": RowParallelLinear,
    }
    if context_parallel_size > 1 and line.cp_attention_class:
        from mindspeed.core.context_parallel.adaptor import MindSpeedCPDotProductAttention

        layers["TEDotProductAttention"] = MindSpeedCPDotProductAttention
    elif line.megatron_te_attention:  # lines not read here take core_r0.16.0's mapping
        from megatron.core.transformer.dot_product_attention import DotProductAttention

        layers["TEDotProductAttention"] = DotProductAttention
    else:
        layers["TEDotProductAttention"] = te_layers.TEDotProductAttention
    for name, layer in layers.items():
        manager.register_patch(f"{TE}.{name}", layer)
        if te_layers_home() == SPECS:
            # megatron-core 0.12: the specs hold their own TE names, bound when they were imported (absent if
            # the TE module did not import then): given there too, whatever the order (create_dummy)
            manager.register_patch(f"{SPECS}.{name}", layer, create_dummy=True)
