"""SIMULATED ``torch_npu.contrib.transfer_to_npu``: CUDA code runs on the NPU, as with Huawei's module of that name.

What the real module is publicly known to do when imported (MindSpeed's ``megatron_adaptor`` imports it
first thing, on ``2.3.0_core_r0.12.1`` and ``core_r0.16.0``): ``torch.cuda``'s API answers for the NPU,
``"cuda"`` device arguments (strings, ``torch.device``, ``Tensor.cuda()``, ``Module.cuda()``) mean the
NPU, and ``nccl`` means ``hccl``. Code written for CUDA, Megatron's included, then runs unchanged.

This stand-in does the same for the simulated device, with what Megatron and verl use, and one more
thing: an npu tensor's ``type()`` reads ``torch.cuda.<T>Tensor``, because code that runs on real NPUs
compares with those names (Megatron's distributed optimizer; MindSpeed's own swap optimizer,
``mindspeed/core/optimizer/swap_optimizer/swap_optimizer.py`` on both lines). It needs compute mode
(``NPU_SHIM_SIM_COMPUTE=1``): without it there is no device for CUDA code to run on, and importing
it raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

import torch_npu
from torch_npu import _compute

if not _compute.enabled():
    raise ImportError(
        "torch_npu.contrib.transfer_to_npu (simulated by simulated_npu) needs compute mode: "
        f"set {_compute.VARIABLE}=1 before torch_npu is imported"
    )

SIMULATED = True

# torch.cuda names the simulated torch.npu answers for (torch.cuda.random's own copies too)
_CUDA_API = (
    "is_available", "is_initialized", "device_count", "current_device", "set_device", "synchronize",
    "empty_cache", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all", "default_generators", "memory_allocated",
    "max_memory_allocated", "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "memory_stats", "mem_get_info", "Stream", "Event", "current_stream",
    "default_stream", "stream", "set_stream", "device", "get_device_name", "get_device_properties",
    "get_device_capability", "is_bf16_supported", "is_current_stream_capturing", "_lazy_init", "_lazy_call",
)  # fmt: skip

# torch functions and methods with a device argument
_FACTORIES = (
    "empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "arange", "linspace", "eye",
    "tensor", "as_tensor", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
    "randint_like", "empty_strided", "tril_indices", "triu_indices",
)  # fmt: skip
_TENSOR_METHODS = ("to", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided")


def _device(value: Any) -> Any:
    if isinstance(value, str) and value.split(":", 1)[0] == "cuda":
        return value.replace("cuda", "npu", 1)
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("npu", value.index)
    if isinstance(value, int) and not isinstance(value, bool):
        return torch.device("npu", value)  # a bare index means the accelerator, as on CUDA
    return value


def _route_device_arguments(function: Callable[..., Any], positional: bool = False) -> Callable[..., Any]:
    @functools.wraps(function)
    def routed(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = _device(kwargs["device"])
        if positional:
            args = tuple(value if isinstance(value, torch.Tensor) else _device_or_same(value) for value in args)
        return function(*args, **kwargs)

    routed.__simulated_npu_routed__ = True
    return routed


def _device_or_same(value: Any) -> Any:
    # Tensor.to's positional argument may be a device (never a bare int there: that would be ambiguous)
    if isinstance(value, (str, torch.device)):
        return _device(value)
    return value


def _tensor_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> torch.Tensor:
    target = torch.device("npu", 0) if device is None else _device(device)
    return self.to(target, non_blocking=non_blocking)


def _module_cuda(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    return self.to(torch.device("npu", 0) if device is None else _device(device))


_tensor_type = torch.Tensor.type


def _type(self: torch.Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    if dtype is None:
        name = _tensor_type(self)
        return name.replace("torch.npu.", "torch.cuda.", 1) if name.startswith("torch.npu.") else name
    if isinstance(dtype, str):
        dtype = dtype.replace("torch.cuda.", "torch.npu.", 1)
    return _tensor_type(self, dtype, non_blocking, **kwargs)


def _route_backend(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def routed(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("backend") == "nccl":
            kwargs["backend"] = "hccl"
        return function(*args, **kwargs)

    return routed


def _apply() -> None:
    npu = torch_npu.npu
    for name in _CUDA_API:
        value = getattr(npu, name, None)
        if value is None:
            continue
        setattr(torch.cuda, name, value)
        if hasattr(torch.cuda.random, name):
            setattr(torch.cuda.random, name, value)
    for name in _FACTORIES:
        function = getattr(torch, name)
        if not getattr(function, "__simulated_npu_routed__", False):
            setattr(torch, name, _route_device_arguments(function))
    for name in _TENSOR_METHODS:
        method = getattr(torch.Tensor, name)
        if not getattr(method, "__simulated_npu_routed__", False):
            setattr(torch.Tensor, name, _route_device_arguments(method, positional=name == "to"))
    module_to = torch.nn.Module.to
    if not getattr(module_to, "__simulated_npu_routed__", False):
        torch.nn.Module.to = _route_device_arguments(module_to, positional=True)
    torch.Tensor.cuda = _tensor_cuda
    torch.nn.Module.cuda = _module_cuda
    torch.Tensor.type = _type
    torch.Tensor.is_cuda = property(lambda self: self.device.type in ("npu", "cuda"))
    if torch.distributed.is_available():
        for name in ("init_process_group", "new_group"):
            function = getattr(torch.distributed, name)
            setattr(torch.distributed, name, _route_backend(function))


_apply()
