"""``torch.autocast("npu")``: torch registers no autocast kernels for ``PrivateUse1``; torch_npu registers its own.

As CUDA's autocast: the ops in ``LOWER_PRECISION`` run in the autocast dtype, those in ``FLOAT32`` in float32,
every other op as it is (a fallthrough).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

LOWER_PRECISION = (
    "mm", "matmul", "bmm", "addmm", "addmv", "addbmm", "baddbmm", "linear", "mv", "einsum", "prelu",
    "conv1d", "conv2d", "conv3d", "convolution", "_convolution", "scaled_dot_product_attention",
)  # fmt: skip
FLOAT32 = (
    "softmax.int", "log_softmax.int", "layer_norm", "native_layer_norm", "group_norm", "exp", "log", "rsqrt",
    "pow.Tensor_Scalar", "pow.Tensor_Tensor", "sum", "sum.dim_IntList", "cumsum", "logsumexp", "mse_loss",
    "nll_loss_nd", "cross_entropy_loss", "binary_cross_entropy_with_logits",
)  # fmt: skip
_AUTOCAST_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)


def _autocast_kernel(op: Any, to_float32: bool) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtype = torch.float32 if to_float32 else torch.get_autocast_dtype("npu")

        def cast(value: Any) -> Any:
            eligible = isinstance(value, torch.Tensor) and value.is_floating_point() and value.device.type == "npu"
            return value.to(dtype) if eligible and value.dtype != torch.float64 else value

        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEY):
            return op(*tree_map(cast, args), **tree_map(cast, kwargs))

    return kernel


def register(library: torch.library.Library, every_op: torch.library.Library) -> None:
    """Register the casting kernels in ``library`` (``aten`` IMPL) and the fallthrough in ``every_op`` (``_`` IMPL)."""
    every_op.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    for names, to_float32 in ((LOWER_PRECISION, False), (FLOAT32, True)):
        for name in names:
            packet, _, overload = name.partition(".")
            op = getattr(getattr(torch.ops.aten, packet), overload or "default")
            library.impl(name, _autocast_kernel(op, to_float32), "AutocastPrivateUse1")
