"""SIMULATED TENPU ``transformer_engine.pytorch``: the layers, FP8 names and submodules Megatron imports from TE."""

from transformer_engine.pytorch import distributed, fp8, ops, optimizers  # noqa: F401 - TE's submodules, read as attributes
from transformer_engine.pytorch.attention import DotProductAttention
from transformer_engine.pytorch.fp8 import autocast, fp8_autocast, fp8_model_init, quantized_model_init
from transformer_engine.pytorch.module import GroupedLinear, LayerNorm, LayerNormLinear, Linear, RMSNorm

__all__ = [
    "DotProductAttention",
    "GroupedLinear",
    "LayerNorm",
    "LayerNormLinear",
    "Linear",
    "RMSNorm",
    "autocast",
    "fp8_autocast",
    "fp8_model_init",
    "quantized_model_init",
]
