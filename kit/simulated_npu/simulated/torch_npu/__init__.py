"""SIMULATED torch_npu, from simulated_npu: NOT Huawei's torch_npu, and no NPU behind it.

It registers an ``npu`` device with torch (``rename_privateuse1_backend`` plus a
device module that says one is available) so that code which branches on
"is there an Ascend NPU?" takes its NPU path on a CPU-only machine, and an
``hccl`` process-group backend that is gloo underneath (CPU ranks only), with the names real MindSpeed
reads at import (``torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options``, ``unsupported_dtype``). By
default every ``torch_npu.npu_*`` kernel is a callable that raises: nothing runs on the device.

With ``NPU_SHIM_SIM_COMPUTE=1`` at import (compute mode, :mod:`torch_npu._compute`), tensors can live
on ``npu:0`` and compute on the CPU, ``npu_fusion_attention`` (with its softmax statistics),
``npu_fusion_attention_grad`` and ``npu_rms_norm`` have reference implementations
(:mod:`torch_npu._kernels`), and ``torch_npu.contrib.transfer_to_npu`` sends CUDA code to the device.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

SIMULATED = True


def _autoload() -> None:
    """Entry point in group ``torch.backends``: ``import torch`` loads this module, as it does the real one."""


# _autoload is defined before torch is imported: when this module is imported first,
# `import torch` finds the entry point and calls _autoload on this half-initialised module.
import torch  # noqa: E402

from torch_npu import _C, _compute, _torch_version, npu  # noqa: E402, F401

# as a real torch_npu's names the torch it is built for (2.6.0.post3 for torch 2.6.0), marked as simulated
__version__ = _torch_version.simulated_version(torch.__version__)


def _no_tensors_in_default_mode(op: Any, *args: object, **kwargs: object) -> NoReturn:
    """Every op that reaches the device in default mode: torch's own message would not say why, nor what to do."""
    raise NotImplementedError(
        f"{op} on npu: the simulated NPU (simulated_npu) holds no tensors in its default mode; set "
        f"{_compute.VARIABLE}=1 before torch_npu is imported for npu tensors that compute on the CPU (compute mode)"
    )


if _compute.requested():
    _compute.enable(npu)
    _compute.attach_kernels(sys.modules[__name__])
elif torch._C._get_privateuse1_backend_name() != "npu":
    torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", npu)
    _DEFAULT_MODE = torch.library.Library("_", "IMPL")  # the fallback lives as long as this object
    _DEFAULT_MODE.fallback(_no_tensors_in_default_mode, dispatch_key="PrivateUse1")


# What torch_npu tells torch its device has no kernels for (quantized types); MindSpeed skips them.
unsupported_dtype = [torch.quint8, torch.quint4x2, torch.quint2x4, torch.qint32, torch.qint8]


def _gloo_as_hccl(store: Any, rank: int, world_size: int, timeout: Any) -> Any:
    return torch.distributed.ProcessGroupGloo(store, rank, world_size, timeout)


# The real torch_npu registers its HCCL process-group backend at import; verl's workers then ask for
# init_process_group("cpu:gloo,npu:hccl"). Here "hccl" is gloo underneath, so collectives run on CPU ranks.
if torch.distributed.is_available() and "hccl" not in torch.distributed.Backend.backend_list:
    torch.distributed.Backend.register_backend("hccl", _gloo_as_hccl, devices=["npu"])


def __getattr__(name: str) -> Any:
    if not name.startswith("npu_"):
        raise AttributeError(f"module 'torch_npu' (simulated by simulated_npu) has no attribute {name!r}")

    def kernel(*args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError(f"torch_npu.{name}: simulated NPU (simulated_npu), no kernel to run")

    kernel.__name__ = name
    return kernel
