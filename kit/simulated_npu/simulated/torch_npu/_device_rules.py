"""What the simulated device accepts beside its own tensors: CUDA's rules, as torch applies them to any two devices.

An op that mixes npu tensors with CPU tensors raises, except for 0-dim CPU tensors (scalars), copies between
devices and CPU indices (which the op moves to the device). A 1-d CPU tensor of one element is no scalar: torch
refuses it beside a device tensor, and so does this device.
"""

from __future__ import annotations

from typing import Any

import torch

CPU = torch.device("cpu")

# Ops that take CPU tensors beside device ones on any device: copies between devices, and CPU indices.
CROSS_DEVICE = frozenset(
    {
        torch.ops.aten._to_copy.default,
        torch.ops.aten.copy_.default,
        torch.ops.aten._copy_from.default,
        torch.ops.aten._copy_from_and_resize.default,
        torch.ops.aten.index.Tensor,
        torch.ops.aten.index_put.default,
        torch.ops.aten.index_put_.default,
        torch.ops.aten._index_put_impl_.default,
    }
)


def is_npu(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "npu"
    if isinstance(device, str):
        return device.split(":", 1)[0] == "npu"
    return False


def on_the_cpu(value: Any) -> Any:
    """``value`` with an npu device named as the CPU (where the op really runs); anything else as it is."""
    return CPU if is_npu(value) else value


def refuse_if_mixed(tensor: torch.Tensor, func: Any, device: torch.device) -> None:
    """Raise as torch does when ``tensor``, an argument of ``func`` beside npu tensors, is a CPU tensor it refuses."""
    if tensor.dim() > 0 and tensor.device.type == "cpu" and func not in CROSS_DEVICE:
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{device} and cpu! (when checking the arguments of {func}; simulated NPU, simulated_npu)"
        )
