"""SIMULATED TENPU ``transformer_engine.pytorch.fp8``: FP8 is never on (the kit computes in the model's dtype)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class FP8GlobalStateManager:
    @classmethod
    def is_fp8_enabled(cls) -> bool:
        return False

    @classmethod
    def is_fp8_calibration(cls) -> bool:
        return False

    @classmethod
    def with_fp8_parameters(cls) -> bool:
        return False

    @classmethod
    def get_fp8_recipe(cls) -> None:
        return None


@contextmanager
def fp8_autocast(enabled: bool = False, **options: Any) -> Iterator[None]:
    """Only ``enabled=False``, which Megatron passes outside FP8 training."""
    if enabled:
        raise NotImplementedError("simulated TransformerEngineNPU: FP8 autocast is not modelled")
    yield


@contextmanager
def fp8_model_init(enabled: bool = False, **options: Any) -> Iterator[None]:
    if enabled:
        raise NotImplementedError("simulated TransformerEngineNPU: FP8 parameters are not modelled")
    yield


autocast = fp8_autocast  # TE 2.x's newer names
quantized_model_init = fp8_model_init
