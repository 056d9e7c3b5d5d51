"""SIMULATED TransformerEngineNPU ("TENPU", installed as ``transformer_engine``), from simulated_npu: NOT Ascend's
and NOT NVIDIA's Transformer Engine.

On MindSpeed ``core_r0.17.0`` and ``core_r0.18.0`` (verl's Ascend images since verl #7604) Transformer Engine's API on
the NPU is its own package, TransformerEngineNPU, installed under TE's module name (MindSpeed's README: install
MegatronAdaptor, then TENPU, then MindSpeed; never NVIDIA's TE beside it). With it, Megatron's ``HAVE_TE`` is true and
Megatron's own TE extension classes (``megatron.core.extensions.transformer_engine``) wrap TENPU's layers: no
MindSpeed layer stands between. TENPU's source is not public outside Ascend's own host; this stand-in is written from
the API Megatron 0.18's TE extension calls, what MindSpeed 0.18 imports from it, and MindSpeed's README.

What it has, on the kit's simulated NPU (compute mode): ``pytorch.Linear``, ``LayerNormLinear``, ``LayerNorm``,
``RMSNorm`` (with TE's tensor- and sequence-parallel communication, through Megatron's autograd mappings),
``DotProductAttention`` (fusion attention through ``torch_npu.npu_fusion_attention``; at context parallel size > 1 the
kit's ring attention over the CP group, TE's ``p2p``), ``pytorch.optimizers.FusedAdam``/``FusedSGD`` (Megatron takes
TE's optimizers before apex's), the ``fp8`` and ``common.recipe`` names Megatron imports (FP8 itself refused), and a
version with package metadata. Everything else Megatron may ask of TE (grouped linears, TE's RNG tracker and
activation checkpointing, fused ops, FP8) raises ``NotImplementedError`` naming it, never computes something else.

The version, 2.9.0, is an assumption: TENPU follows TE 2.x's API, and MindSpeed 0.18 imports
``transformer_engine.pytorch.quantization.manager``, a TE 2.9 module.
"""

from transformer_engine import common, pytorch  # noqa: F401 - TE's package exposes both

__version__ = "2.9.0+simulated"
SIMULATED = True
