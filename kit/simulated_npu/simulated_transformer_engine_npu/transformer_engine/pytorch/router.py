"""SIMULATED TENPU ``transformer_engine.pytorch.router``: Megatron imports TE's fused MoE routing at import (TE >= 2.7);
MoE routing is not modelled."""

from __future__ import annotations

from typing import Any


def _not_modelled(name: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"simulated TransformerEngineNPU: {name} (fused MoE routing) is not modelled")

    kernel.__name__ = name
    return kernel


fused_compute_score_for_moe_aux_loss = _not_modelled("fused_compute_score_for_moe_aux_loss")
fused_moe_aux_loss = _not_modelled("fused_moe_aux_loss")
fused_topk_with_score_function = _not_modelled("fused_topk_with_score_function")
