"""SIMULATED TENPU ``transformer_engine.common.recipe``: the FP8 recipe names, which the kit does not compute.

Megatron's TE module subclasses ``DelayedScaling`` at import (``TEDelayedScaling``); building any recipe means FP8
training, which the simulated NPU does not model.
"""

from __future__ import annotations

import enum
from typing import Any


class Format(enum.Enum):
    E4M3 = "E4M3"
    E5M2 = "E5M2"
    HYBRID = "HYBRID"


class Recipe:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        name = type(self).__name__
        raise NotImplementedError(f"simulated TransformerEngineNPU: FP8 recipes ({name}) are not modelled")


class DelayedScaling(Recipe):
    pass


class Float8CurrentScaling(Recipe):
    pass


class MXFP8BlockScaling(Recipe):
    pass


class Float8BlockScaling(Recipe):
    pass
