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
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch
from torch.utils._pytree import tree_map

VARIABLE = "NPU_SHIM_SIM_COMPUTE"
DEVICE: torch.device  # npu:0, once enable() has named the backend
_CPU = torch.device("cpu")
_enabled = False
_GENERATOR = torch.Generator()  # the simulated device's own generator


def requested() -> bool:
    """Whether this process asked for compute mode (read once, when the stand-in torch_npu is imported)."""
    raw = os.environ.get(VARIABLE, "")
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value not in ("", "0", "false", "no", "off"):  # as the shim's own NPU_SHIM_* switches answer a typo
        logging.getLogger("npu_shim").warning(
            "%s=%r is not a boolean (use 1/0, true/false, yes/no, on/off); the simulated NPU runs in its default "
            "mode (no npu tensors)",
            VARIABLE,
            raw,
        )
    return False


def enabled() -> bool:
    return _enabled


def _is_npu(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "npu"
    if isinstance(device, str):
        return device.split(":", 1)[0] == "npu"
    return False


def _to_cpu_device(value: Any) -> Any:
    return _CPU if _is_npu(value) else value


class NpuTensor(torch.Tensor):
    """A tensor on the simulated ``npu:0``: sizes, strides and dtype of its inner CPU tensor, no storage."""

    _inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor, requires_grad: bool = False) -> NpuTensor:
        if isinstance(inner, NpuTensor) or inner.device.type != "cpu":
            raise TypeError(f"an NpuTensor wraps a CPU tensor, not one on {inner.device}")
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls,
            inner.shape,
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            layout=inner.layout,
            device=DEVICE,
            requires_grad=requires_grad,
        )
        wrapper._inner = inner
        wrapper._memory = _memory.track(wrapper, inner)
        return wrapper

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        body = repr(self._inner.detach())
        return body[:-1] + f", device='{DEVICE}')" if body.endswith(")") else body

    # Methods that read memory directly in C++ and never reach __torch_dispatch__: answer from the inner tensor.
    def tolist(self) -> Any:
        return self._inner.tolist()

    def numpy(self, *, force: bool = False) -> Any:
        return self._inner.detach().numpy(force=force)

    def data_ptr(self) -> int:
        return self._inner.data_ptr()

    def untyped_storage(self) -> torch.UntypedStorage:
        return self._inner.untyped_storage()

    def __reduce_ex__(self, protocol: int) -> Any:
        # As torch pickles a tensor of a backend without storage (Tensor._reduce_ex_internal): a CPU copy and the
        # device, rebuilt by a function torch.load allows with weights_only=True, which honours map_location. A
        # parameter over an npu tensor is this class marked _is_param (nn.Parameter's way with tensor subclasses):
        # rebuilt as a parameter, as nn.Parameter pickles itself.
        if getattr(self, "_is_param", False):
            return (torch._utils._rebuild_parameter, (self.detach(), self.requires_grad, OrderedDict()))
        return (
            torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (self._inner.detach(), self.dtype, str(self.device), self.requires_grad),
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> NpuTensor:
        copied = NpuTensor(self._inner.detach().clone(), requires_grad=self.requires_grad)
        memo[id(self)] = copied
        return copied

    @property
    def data(self) -> torch.Tensor:  # type: ignore[override]
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        # `t.data = other` swaps t's metadata in C++ (Megatron's make_viewless_tensor, DDP's buffers);
        # the wrapped tensor has to follow, or t would keep computing on its old values.
        if not isinstance(value, NpuTensor):
            value = to_npu(value)
        torch._C.TensorBase.data.__set__(self, value)
        self._inner = value._inner
        _memory.retrack(self._memory, value._inner)

    @classmethod
    def __torch_dispatch__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if any(not issubclass(kind, NpuTensor) for kind in types):
            # another subclass among the arguments (a nested jagged tensor over npu values): it goes first,
            # and calls back here with the npu tensors it holds
            return NotImplemented
        kwargs = kwargs or {}
        special = _SPECIAL.get(func)
        if special is not None:
            return special(*args, **kwargs)
        # Results that are an argument itself (in-place and out= ops) are given back as that argument.
        identity: dict[int, torch.Tensor] = {}
        leaves_to_cpu = "device" in kwargs and kwargs["device"] is not None and not _is_npu(kwargs["device"])
        inner_args = _unwrapped(args, identity, func)
        inner_kwargs = _unwrapped(kwargs, identity, func)
        if inner_kwargs.get("generator") is None and _draws_random(func):
            inner_kwargs["generator"] = _GENERATOR
        if func in _RANDOM_WITHOUT_GENERATOR:
            result = _on_device_generator(func, inner_args, inner_kwargs)
        else:
            result = func(*inner_args, **inner_kwargs)
        if leaves_to_cpu:
            return _rewrapped(result, lambda value: _cpu_result(value, identity))
        return _rewrapped(result, lambda value: _wrap(value, identity))


# Ops that take CPU tensors beside device ones on any device (CUDA's rules): copies between devices, and
# CPU indices (moved to the device by the op). Every other op with a CPU tensor that is not 0-dim raises.
_CROSS_DEVICE = frozenset(
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

_RANDOM: dict[Any, bool] = {}


def _draws_random(func: Any) -> bool:
    known = _RANDOM.get(func)
    if known is None:
        known = _RANDOM[func] = any(argument.name == "generator" for argument in func._schema.arguments)
    return known


# Random ops whose schema takes no generator (dropout's native_dropout) draw from the CPU's default
# generator: they run with the device's state swapped in, or Megatron's RNG tracker, which sets the
# device's state around dropout, would not decide which elements drop (and the CPU's draws would shift).
_RANDOM_WITHOUT_GENERATOR = frozenset({torch.ops.aten.native_dropout.default})


def _on_device_generator(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    cpu = torch.random.default_generator
    cpu_state = cpu.get_state()
    cpu.set_state(_GENERATOR.get_state())
    try:
        return func(*args, **kwargs)
    finally:
        _GENERATOR.set_state(cpu.get_state())
        cpu.set_state(cpu_state)


def _cpu_result(value: Any, identity: dict[int, torch.Tensor]) -> Any:
    # A copy to the CPU that the inner CPU tensor answers with itself (aten.to.dtype_layout, which reaches
    # here when Tensor.to runs inside another subclass's dispatch, e.g. a nested jagged tensor's .cpu()):
    # give back a CPU copy, as a device would, never the npu tensor that wraps it.
    known = identity.get(id(value), value)
    if isinstance(known, NpuTensor):
        return value.clone()
    return known


# An aten op's arguments and results are tensors, scalars, devices and lists, tuples or dicts of them: walked
# here by hand, as torch's general pytree (namedtuples, registered containers) costs most of an op's time.
def _unwrapped(value: Any, identity: dict[int, torch.Tensor], func: Any) -> Any:
    """``value`` with npu tensors as their inner CPU tensors and npu devices as the CPU; every tensor in
    ``identity`` (by the id of what the op sees); a CPU tensor beside npu ones refused, as a device does."""
    if isinstance(value, NpuTensor):
        identity[id(value._inner)] = value
        return value._inner
    if isinstance(value, torch.Tensor):
        identity[id(value)] = value
        if value.dim() > 0 and value.device.type == "cpu" and func not in _CROSS_DEVICE:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"{DEVICE} and cpu! (when checking the arguments of {func}; simulated NPU, npu_shim.testing)"
            )
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrapped(item, identity, func) for item in value)
    if isinstance(value, dict):
        return {key: _unwrapped(item, identity, func) for key, item in value.items()}
    return _to_cpu_device(value)


def _rewrapped(value: Any, wrap: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(value, torch.Tensor):
        return wrap(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_rewrapped(item, wrap) for item in value)
    return value


def _wrap(value: Any, identity: dict[int, torch.Tensor]) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    known = identity.get(id(value))
    if known is not None:
        if isinstance(known, NpuTensor) and known.shape != value.shape:
            raise RuntimeError(
                f"simulated NPU (npu_shim.testing): an op resized an npu tensor in place ({tuple(known.shape)} -> "
                f"{tuple(value.shape)}); a wrapper's size is fixed: register that factory in torch_npu/_compute.py"
            )
        return known
    if isinstance(value, NpuTensor) or value.device.type != "cpu":
        return value
    return NpuTensor(value)


def to_npu(tensor: torch.Tensor) -> NpuTensor:
    """A CPU tensor as an npu tensor sharing its memory (no copy), for kernels written against the inner tensors."""
    return tensor if isinstance(tensor, NpuTensor) else NpuTensor(tensor.detach())


def inner(tensor: torch.Tensor) -> torch.Tensor:
    """The CPU tensor an npu tensor computes on (a CPU tensor is its own)."""
    return tensor._inner if isinstance(tensor, NpuTensor) else tensor


def _local_scalar_dense(self: torch.Tensor) -> Any:
    return inner(self).item()


# Ops that must see the wrapper itself, not its inner tensor.
_SPECIAL: dict[Any, Callable[..., Any]] = {
    torch.ops.aten._local_scalar_dense.default: _local_scalar_dense,
}


_libraries: tuple[torch.library.Library, ...] = ()

# Factories that build an empty tensor and then resize it (arange.out and the like): a wrapper's size
# is fixed at creation, so these are answered whole, on the CPU, then wrapped.
_RESIZING_FACTORIES = (
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
        kwargs["device"] = _CPU
        if kwargs.get("generator") is None and _draws_random(op):
            kwargs["generator"] = _GENERATOR
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
        raise RuntimeError("simulated NPU (npu_shim.testing): _copy_from_and_resize cannot resize an npu tensor")
    inner(dst).copy_(inner(self))
    return dst


# torch.autocast("npu"): torch registers no autocast kernels for PrivateUse1; torch_npu registers its own. As
# CUDA's autocast: these ops run in the autocast dtype, these in float32, every other op as it is.
_AUTOCAST_LOWER_PRECISION = (
    "mm", "matmul", "bmm", "addmm", "addmv", "addbmm", "baddbmm", "linear", "mv", "einsum", "prelu",
    "conv1d", "conv2d", "conv3d", "convolution", "_convolution", "scaled_dot_product_attention",
)  # fmt: skip
_AUTOCAST_FLOAT32 = (
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


def _register_autocast(library: torch.library.Library, every_op: torch.library.Library) -> None:
    every_op.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    for names, to_float32 in ((_AUTOCAST_LOWER_PRECISION, False), (_AUTOCAST_FLOAT32, True)):
        for name in names:
            packet, _, overload = name.partition(".")
            op = getattr(getattr(torch.ops.aten, packet), overload or "default")
            library.impl(name, _autocast_kernel(op, to_float32), "AutocastPrivateUse1")


def _register_kernels() -> None:
    global _libraries
    library = torch.library.Library("aten", "IMPL")
    library.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    library.impl("empty_strided", _empty_strided, "PrivateUse1")
    library.impl("_copy_from", _copy_from, "PrivateUse1")
    library.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    library.impl("_local_scalar_dense", _local_scalar_dense, "PrivateUse1")
    for name in _RESIZING_FACTORIES:
        packet_name, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet_name), overload or "default")
        library.impl(name, _factory(op), "PrivateUse1")
    every_op = torch.library.Library("_", "IMPL")
    _register_autocast(library, every_op)
    _libraries = (library, every_op)  # kept alive: dropping a Library object unregisters its kernels


# ---------------------------------------------------------------------------------------------------------------
# torch.npu, as a device module for a device that holds tensors


class _Stream:
    """A stream that orders nothing: every op has already run when it returns."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = DEVICE

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> _Event:
        return event if event is not None else _Event()

    def query(self) -> bool:
        return True

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self._time = 0.0

    def record(self, stream: Any = None) -> None:
        import time

        self._time = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: _Event) -> float:
        return (end._time - self._time) * 1000.0


_DEFAULT_STREAM: _Stream


@contextlib.contextmanager
def _stream_context(stream: Any = None) -> Iterator[None]:
    yield


class _DeviceContext:
    def __init__(self, device: Any = None) -> None:
        pass

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


def _get_rng_state(device: Any = "npu") -> torch.Tensor:
    return _GENERATOR.get_state()


def _set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    _GENERATOR.set_state(inner(new_state).cpu())


def _manual_seed(seed: int) -> None:
    _GENERATOR.manual_seed(int(seed))


_TOTAL_MEMORY = 64 << 30  # a plausible device: verl logs these figures, nothing here sizes itself on them


class _Memory:
    """The bytes npu tensors hold: each storage counted once, while any npu tensor over it lives.

    Reserved memory is what a caching allocator keeps: the most ever allocated since ``empty_cache()``.
    """

    def __init__(self) -> None:
        self.storages: dict[int, list[int]] = {}  # data_ptr -> [bytes, npu tensors over it]
        self.allocated = self.peak = self.reserved = 0

    def track(self, wrapper: torch.Tensor, inner: torch.Tensor) -> list[int]:
        cell = [0]
        self._hold(cell, inner)
        weakref.finalize(wrapper, self._release, cell)
        return cell

    def retrack(self, cell: list[int], inner: torch.Tensor) -> None:
        self._release(cell)
        self._hold(cell, inner)

    def _hold(self, cell: list[int], inner: torch.Tensor) -> None:
        storage = inner.untyped_storage()
        key = storage.data_ptr()
        cell[0] = key
        if key == 0:  # an empty storage holds nothing
            return
        entry = self.storages.get(key)
        if entry is None:
            entry = self.storages[key] = [storage.nbytes(), 0]
            self.allocated += entry[0]
            self.peak = max(self.peak, self.allocated)
            self.reserved = max(self.reserved, self.allocated)
        entry[1] += 1

    def _release(self, cell: list[int]) -> None:
        key, cell[0] = cell[0], 0
        entry = self.storages.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.allocated -= entry[0]
            del self.storages[key]

    def reset_peak(self, device: Any = None) -> None:
        self.peak = self.allocated

    def empty_cache(self) -> None:
        self.reserved = self.allocated

    def stats(self, device: Any = None) -> dict[str, int]:
        return {
            "allocated_bytes.all.current": self.allocated,
            "allocated_bytes.all.peak": self.peak,
            "reserved_bytes.all.current": self.reserved,
        }


_memory = _Memory()


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    return _TOTAL_MEMORY - _memory.reserved, _TOTAL_MEMORY


def _get_device_properties(device: Any = None) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(
        name="Ascend (simulated by npu_shim.testing)", total_memory=64 << 30, multi_processor_count=1
    )


def _device_module_api() -> dict[str, Any]:
    """What the device module adds in compute mode (plain mode keeps device_count() == 0 and nothing else)."""
    return {
        "device_count": lambda: 1,
        "is_initialized": lambda: True,
        "current_device": lambda: 0,
        "get_device_name": lambda device=None: "Ascend (simulated by npu_shim.testing)",
        "get_device_capability": lambda device=None: (0, 0),
        "get_device_properties": _get_device_properties,
        "device": _DeviceContext,
        "manual_seed": _manual_seed,
        "manual_seed_all": _manual_seed,
        "seed": _GENERATOR.seed,
        "seed_all": _GENERATOR.seed,
        "initial_seed": _GENERATOR.initial_seed,
        "get_rng_state": _get_rng_state,
        "set_rng_state": _set_rng_state,
        "get_rng_state_all": lambda: [_get_rng_state()],
        "set_rng_state_all": lambda states: _set_rng_state(next(iter(states))),
        "default_generators": (_GENERATOR,),
        "memory_allocated": lambda device=None: _memory.allocated,
        "max_memory_allocated": lambda device=None: _memory.peak,
        "memory_reserved": lambda device=None: _memory.reserved,
        "max_memory_reserved": lambda device=None: _memory.reserved,
        "reset_peak_memory_stats": _memory.reset_peak,
        "reset_max_memory_allocated": _memory.reset_peak,
        "memory_stats": _memory.stats,
        "mem_get_info": _mem_get_info,
        "empty_cache": _memory.empty_cache,
        "get_amp_supported_dtype": lambda: [torch.float16, torch.bfloat16],
        "Stream": _Stream,
        "Event": _Event,
        "current_stream": lambda device=None: _DEFAULT_STREAM,
        "default_stream": lambda device=None: _DEFAULT_STREAM,
        "stream": _stream_context,
        "set_stream": lambda stream: None,
        "is_bf16_supported": lambda including_emulation=True: True,
        "_lazy_init": lambda: None,
        "_lazy_call": lambda callable, **kwargs: callable(),
    }


def enable(device_module: ModuleType) -> None:
    """Register ``npu`` as a Python backend whose tensors compute on the CPU, ``device_module`` as ``torch.npu``."""
    global _enabled, DEVICE, _DEFAULT_STREAM
    if _enabled:
        return
    from torch_npu import _torch_version

    _torch_version.check(torch.__version__)  # before any private API of torch is touched
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(rename="npu", backend_module=device_module)
    DEVICE = torch.device("npu", 0)
    _DEFAULT_STREAM = _Stream()

    for name, value in _device_module_api().items():
        setattr(device_module, name, value)
    device_module.COMPUTE = True
    _register_kernels()
    _enabled = True


def attach_kernels(torch_npu: ModuleType) -> None:
    """Kernels of ``torch_npu`` that compute in this mode (reference implementations, in ``_kernels``)."""
    from torch_npu import _kernels

    for name in _kernels.__all__:
        setattr(torch_npu, name, getattr(_kernels, name))
