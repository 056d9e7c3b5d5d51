"""SIMULATED TENPU ``transformer_engine.pytorch.ops``: TE's fusible operations, which Megatron's TE module names in its
class bodies (``TEFusedMLP``, built only with ``use_transformer_engine_op_fuser``); none is modelled."""

from __future__ import annotations

from typing import Any

import torch


class FusibleOperation(torch.nn.Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"simulated TransformerEngineNPU: ops.{type(self).__name__} is not modelled")


def _operation(name: str) -> type[FusibleOperation]:
    return type(name, (FusibleOperation,), {"__module__": __name__})


Sequential = _operation("Sequential")
BasicLinear = _operation("BasicLinear")
Bias = _operation("Bias")
GroupedLinear = _operation("GroupedLinear")
LayerNorm = _operation("LayerNorm")
RMSNorm = _operation("RMSNorm")
GELU = _operation("GELU")
GEGLU = _operation("GEGLU")
ReGLU = _operation("ReGLU")
ReLU = _operation("ReLU")
SiLU = _operation("SiLU")
SwiGLU = _operation("SwiGLU")
ScaledSwiGLU = _operation("ScaledSwiGLU")
AllReduce = _operation("AllReduce")
ReduceScatter = _operation("ReduceScatter")
MakeExtraOutput = _operation("MakeExtraOutput")
