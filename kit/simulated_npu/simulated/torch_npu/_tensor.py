"""``NpuTensor``: a tensor on the simulated ``npu:0``, a wrapper (no storage of its own) around a CPU tensor.

Every aten op on it runs on the inner CPU tensors and its results are wrapped again, so autograd, views and
in-place ops behave as on a device, and an op computes bit for bit what the CPU computes. Which result is an
argument, and which shares an argument's storage, is torch's own bookkeeping for wrapper subclasses
(``return_and_correct_aliasing``, read from each op's schema): an in-place or ``out=`` op gives back its argument,
a view aliases its base, and an in-place view op (``t_``, ``unsqueeze_``, ``as_strided_``) changes the wrapper's
sizes and strides as it changed the inner tensor's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import get_alias_info, return_and_correct_aliasing

from torch_npu._device_rules import is_npu, on_the_cpu, refuse_if_mixed
from torch_npu._memory import MEMORY
from torch_npu._rng import GENERATOR, RANDOM_WITHOUT_GENERATOR, draws_random, on_device_generator

DEVICE: torch.device  # npu:0, once name_device() has run (after torch knows the backend as "npu")


def name_device() -> None:
    global DEVICE
    DEVICE = torch.device("npu", 0)


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
        wrapper._memory_cell = MEMORY.track(wrapper, inner)
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
        MEMORY.retrack(self._memory_cell, value._inner)

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
        identity: dict[int, torch.Tensor] = {}  # what each argument is, by the id of what the op sees
        device = kwargs.get("device")
        leaves_to_cpu = device is not None and not is_npu(device)
        inner_args = _unwrapped(args, identity, func)
        inner_kwargs = _unwrapped(kwargs, identity, func)
        if inner_kwargs.get("generator") is None and draws_random(func):
            inner_kwargs["generator"] = GENERATOR
        if func in RANDOM_WITHOUT_GENERATOR:
            result = on_device_generator(func, inner_args, inner_kwargs)
        else:
            result = func(*inner_args, **inner_kwargs)
        if leaves_to_cpu:
            return _rewrapped(result, lambda value: _cpu_result(value, identity))
        wrapped = _rewrapped(result, lambda value: _wrap(value, identity))
        aliasing = _aliasing(func)
        if aliasing is _FRESH:
            return wrapped  # what return_and_correct_aliasing returns for these, without its per-call cost
        if aliasing is _ITS_ARGUMENTS:
            if isinstance(wrapped, NpuTensor) and wrapped.shape != wrapped._inner.shape:
                # an out= tensor of another size, which the CPU kernel resized: the wrapper would keep its old size
                raise _resized(func, wrapped.shape, wrapped._inner.shape)
            if _all_arguments(wrapped, identity):
                return wrapped
        return return_and_correct_aliasing(func, args, kwargs, wrapped)


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
        refuse_if_mixed(value, func, DEVICE)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrapped(item, identity, func) for item in value)
    if isinstance(value, dict):
        return {key: _unwrapped(item, identity, func) for key, item in value.items()}
    return on_the_cpu(value)


def _rewrapped(value: Any, wrap: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(value, torch.Tensor):
        return wrap(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_rewrapped(item, wrap) for item in value)
    return value


def _wrap(value: torch.Tensor, identity: dict[int, torch.Tensor]) -> torch.Tensor:
    """A result as an npu tensor. An argument's own inner tensor (an in-place op's result) is given as that argument,
    which is what ``return_and_correct_aliasing`` gives back: no wrapper built to be thrown away (about 15 us each
    under ``cProfile``)."""
    known = identity.get(id(value))
    if isinstance(known, NpuTensor):
        return known
    if isinstance(value, NpuTensor) or value.device.type != "cpu":
        return value
    return NpuTensor(value)


_FRESH, _ITS_ARGUMENTS, _TORCHS = "fresh", "its arguments", "torch's"
_ALIASING: dict[Any, str] = {}


def _aliasing(func: Any) -> str:
    """What torch's bookkeeping would do with ``func``'s results, read once per op from torch's reading of its
    schema (``get_alias_info``): nothing (no result aliases an argument), give back the arguments it wrote (in-place
    and ``out=`` ops), or more (views, in-place view ops), which only ``return_and_correct_aliasing`` itself does.

    The first two are that function's early exits, taken here without its per-call cost: for in-place ops it finds
    the argument by normalising the call against the schema (``torch.fx``'s ``normalize_function``, about 47 us an
    op, a quarter of the kit's dispatch time in a training step under ``cProfile``), where the identity of the result
    says the same. ``benchmarks/kit_dispatch.py`` measures it; docs/testing.md has the figures."""
    kind = _ALIASING.get(func)
    if kind is None:
        info = get_alias_info(func)
        if info.is_inplace_view_op or info.read_only_alias_match_indexes:
            kind = _TORCHS
        elif info.outs_write_aliases is not None:
            kind = _ITS_ARGUMENTS
        else:
            kind = _FRESH
        _ALIASING[func] = kind
    return kind


def _all_arguments(value: Any, identity: dict[int, torch.Tensor]) -> bool:
    if isinstance(value, torch.Tensor):
        return identity.get(id(value._inner if isinstance(value, NpuTensor) else value)) is value
    if isinstance(value, (list, tuple)):
        return all(_all_arguments(item, identity) for item in value)
    return False


def to_npu(tensor: torch.Tensor) -> NpuTensor:
    """A CPU tensor as an npu tensor sharing its memory (no copy), for kernels written against the inner tensors."""
    return tensor if isinstance(tensor, NpuTensor) else NpuTensor(tensor.detach())


def inner(tensor: torch.Tensor) -> torch.Tensor:
    """The CPU tensor an npu tensor computes on (a CPU tensor is its own)."""
    return tensor._inner if isinstance(tensor, NpuTensor) else tensor


def local_scalar_dense(self: torch.Tensor) -> Any:
    return inner(self).item()


def _resized(func: Any, size: Any, new_size: Any) -> RuntimeError:
    return RuntimeError(
        f"simulated NPU (simulated_npu): {func} would resize an npu tensor in place ({tuple(size)} -> "
        f"{tuple(new_size)}); a wrapper's size is fixed at creation (give out= a tensor of the result's size; a "
        "factory that resizes an empty tensor is answered whole, see RESIZING_FACTORIES in torch_npu/_factories.py)"
    )


def _resize(self: torch.Tensor, size: Any, memory_format: Any = None) -> torch.Tensor:
    # resize_ is an in-place view op to torch, whose metadata pass (return_and_correct_aliasing) fails an internal
    # assert on a wrapper: refused here, before it runs, unless the size stays
    if tuple(size) != tuple(self.shape):
        raise _resized(torch.ops.aten.resize_.default, self.shape, size)
    return self


def _resize_as(self: torch.Tensor, the_template: torch.Tensor, memory_format: Any = None) -> torch.Tensor:
    if the_template.shape != self.shape:
        raise _resized(torch.ops.aten.resize_as_.default, self.shape, the_template.shape)
    return self


# Ops that must see the wrapper itself, not its inner tensor.
_SPECIAL: dict[Any, Callable[..., Any]] = {
    torch.ops.aten._local_scalar_dense.default: local_scalar_dense,
    torch.ops.aten.resize_.default: _resize,
    torch.ops.aten.resize_as_.default: _resize_as,
}
