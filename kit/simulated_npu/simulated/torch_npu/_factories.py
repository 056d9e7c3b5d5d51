"""The simulated device's ``PrivateUse1`` kernels: what a factory asked for ``device="npu"`` and a copy reach.

torch's Python backend sends a factory (``torch.empty(..., device="npu")``) and a copy between devices to the
kernels registered for ``PrivateUse1``; these build the CPU tensor and wrap it as an :class:`NpuTensor`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torch_npu import _rng
from torch_npu._device_rules import CPU
from torch_npu._tensor import NpuTensor, inner, local_scalar_dense

# Factories that build an empty tensor and then resize it (arange.out and the like): a wrapper's size
# is fixed at creation, so these are answered whole, on the CPU, then wrapped.
RESIZING_FACTORIES = (
    "arange",
    "arange.start",
    "arange.start_step",
    "linspace",
    "logspace",
    "eye",
    "eye.m",
    "randperm",
    "tril_indices",
    "triu_indices",
)


def _factory(op: Any) -> Callable[..., torch.Tensor]:
    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        kwargs["device"] = CPU
        if kwargs.get("generator") is None and _rng.draws_random(op):
            kwargs["generator"] = _rng.GENERATOR
        return NpuTensor(op(*args, **kwargs))

    return kernel


def _empty_memory_format(  # noqa: PLR0917 - aten's empty.memory_format signature
    size: Any,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
    memory_format: Any = None,
) -> torch.Tensor:
    return NpuTensor(torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format))


def _empty_strided(  # noqa: PLR0917 - aten's empty_strided signature
    size: Any, stride: Any, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None
) -> torch.Tensor:
    return NpuTensor(torch.empty_strided(size, stride, dtype=dtype, layout=layout))


def _copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    inner(dst).copy_(inner(self))
    return dst


def _copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if inner(dst).shape != inner(self).shape:
        raise RuntimeError("simulated NPU (simulated_npu): _copy_from_and_resize cannot resize an npu tensor")
    inner(dst).copy_(inner(self))
    return dst


def register(library: torch.library.Library) -> None:
    """Register the kernels in ``library`` (an ``aten`` IMPL library, which must outlive them)."""
    library.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    library.impl("empty_strided", _empty_strided, "PrivateUse1")
    library.impl("_copy_from", _copy_from, "PrivateUse1")
    library.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    library.impl("_local_scalar_dense", local_scalar_dense, "PrivateUse1")
    for name in RESIZING_FACTORIES:
        packet_name, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet_name), overload or "default")
        library.impl(name, _factory(op), "PrivateUse1")
