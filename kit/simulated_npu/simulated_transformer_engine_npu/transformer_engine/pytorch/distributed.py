"""SIMULATED TENPU ``transformer_engine.pytorch.distributed``: the names Megatron reads; neither is modelled.

Megatron subclasses ``CudaRNGStatesTracker`` at import and builds one only with ``use_te_rng_tracker``; it calls
``checkpoint`` and ``activation_recompute_forward`` only for activation recomputation with TE or FP8. Under verl's
defaults none of them runs.
"""

from __future__ import annotations

from typing import Any


class CudaRNGStatesTracker:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "simulated TransformerEngineNPU: TE's RNG tracker (use_te_rng_tracker) is not modelled"
        )


def checkpoint(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("simulated TransformerEngineNPU: TE's activation checkpointing is not modelled")


def activation_recompute_forward(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("simulated TransformerEngineNPU: TE's activation recomputation context is not modelled")
