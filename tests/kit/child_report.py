"""What the kit's child programs beside this file share (each is run as a script from this folder, so it imports this
module by name): results on the simulated npu measured against plain CPU references, and outcomes by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def npu(x: torch.Tensor) -> torch.Tensor:
    return x.to("npu")


def gap(result: torch.Tensor, reference: torch.Tensor) -> float:
    """The largest difference, in float64 on the CPU."""
    result = result.detach().cpu() if result.device.type != "cpu" else result.detach()
    return float((result.double() - reference.detach().double()).abs().max())


def attempt(report: dict[str, Any], name: str, function: Callable[[], Any]) -> None:
    """``report[name]``: ``["ran", what function returned]``, or the exception's type and message."""
    try:
        report[name] = ["ran", function()]
    except Exception as error:  # reported by name: the test asserts which one
        report[name] = [type(error).__name__, str(error)]
