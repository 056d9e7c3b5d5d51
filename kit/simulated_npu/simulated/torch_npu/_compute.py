"""Compute mode of the SIMULATED torch_npu (``NPU_SHIM_SIM_COMPUTE=1``): npu tensors that compute on the CPU.

Off by default: the kit's plain mode reports an NPU that holds no tensor (``device_count() == 0``),
which is all the registry and repatch tests need and costs nothing at import. In compute mode:

- torch's Python-backend hooks for ``PrivateUse1`` (``_setup_privateuseone_for_python_backend``)
  make ``npu`` a device that tensors can live on;
- a tensor on ``npu:0`` is an :class:`NpuTensor`: a wrapper (no storage of its own) around a CPU
  tensor, :attr:`NpuTensor._inner`; every aten op on it runs on the inner tensors and its results
  are wrapped again, so autograd, views and in-place ops behave as on a device;
- factories asked for ``device="npu"`` reach ``PrivateUse1`` kernels registered here, which build
  the CPU tensor and wrap it;
- ``torch.npu`` gains what Megatron and verl ask a device module for (one device, RNG state,
  memory figures, streams and events that do nothing);
- the device has a random generator of its own (a CPU ``torch.Generator``), as a real device has:
  random ops on npu tensors draw from it, so Megatron's RNG tracker, which swaps the device's
  state in and out, leaves the CPU's alone;
- it is a device where code can go wrong as on a real one: an op that mixes npu tensors with CPU
  tensors raises as torch does for any two devices (0-dim CPU tensors, copies between devices and
  CPU indices excepted, as on CUDA); a saved npu tensor is pickled as torch pickles a tensor of a
  backend without storage, so ``torch.load`` reads it with its defaults (``weights_only=True``) and
  honours ``map_location``; ``torch.autocast("npu")`` works; the memory figures count the bytes npu
  tensors hold.

Bit-for-bit, an op computes what the CPU computes: the device is a label, the arithmetic is the CPU's.

This module is the switch; each concern has its own module, and none imports this one:

- :mod:`torch_npu._tensor`: ``NpuTensor`` and its dispatch (unwrap, run on the CPU, wrap again);
- :mod:`torch_npu._device_rules`: which CPU tensors an op may take beside npu tensors;
- :mod:`torch_npu._rng`: the device's generator;
- :mod:`torch_npu._factories`: the ``PrivateUse1`` kernels factories and copies reach;
- :mod:`torch_npu._autocast`: ``torch.autocast("npu")``;
- :mod:`torch_npu._memory` and :mod:`torch_npu._device_module`: ``torch.npu``'s memory figures, RNG calls,
  streams and events;
- :mod:`torch_npu._torch_version`: the torch this is tested on;
- :mod:`torch_npu._kernels`: reference implementations of torch_npu's own kernels.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

import torch

VARIABLE = "NPU_SHIM_SIM_COMPUTE"
_enabled = False
_libraries: tuple[torch.library.Library, ...] = ()  # kept alive: dropping a Library object unregisters its kernels


def requested() -> bool:
    """Whether this process asked for compute mode (read once, when the stand-in torch_npu is imported)."""
    raw = os.environ.get(VARIABLE, "")
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value not in ("", "0", "false", "no", "off"):  # as the shim's own NPU_SHIM_* switches answer a typo
        logging.getLogger("simulated_npu").warning(
            "%s=%r is not a boolean (use 1/0, true/false, yes/no, on/off); the simulated NPU runs in its default "
            "mode (no npu tensors)",
            VARIABLE,
            raw,
        )
    return False


def enabled() -> bool:
    return _enabled


def enable(device_module: ModuleType) -> None:
    """Register ``npu`` as a Python backend whose tensors compute on the CPU, ``device_module`` as ``torch.npu``."""
    global _enabled, _libraries
    if _enabled:
        return
    from torch_npu import _torch_version

    _torch_version.check(torch.__version__)  # before any private API of torch is touched
    # imported here, not at the top: default mode (most processes of the suite) builds none of it
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from torch_npu import _autocast, _device_module, _factories, _tensor

    _setup_privateuseone_for_python_backend(rename="npu", backend_module=device_module)
    _tensor.name_device()
    for name, value in _device_module.api().items():
        setattr(device_module, name, value)
    device_module.COMPUTE = True
    aten = torch.library.Library("aten", "IMPL")
    every_op = torch.library.Library("_", "IMPL")
    _factories.register(aten)
    _autocast.register(aten, every_op)
    _libraries = (aten, every_op)
    _enabled = True


def attach_kernels(torch_npu: ModuleType) -> None:
    """Kernels of ``torch_npu`` that compute in this mode (reference implementations, in ``_kernels``)."""
    from torch_npu import _kernels

    for name in _kernels.__all__:
        setattr(torch_npu, name, getattr(_kernels, name))
