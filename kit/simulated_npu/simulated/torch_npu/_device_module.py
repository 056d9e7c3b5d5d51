"""``torch.npu`` in compute mode: what Megatron and verl ask a device module for, for one device that holds tensors.

One device; the RNG state of the device's own generator (:mod:`torch_npu._rng`); memory figures that count the
bytes npu tensors hold (:mod:`torch_npu._memory`); streams and events that order nothing, because every op has
already run when it returns.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

from torch_npu import _rng, _tensor, npu
from torch_npu._memory import MEMORY, TOTAL_MEMORY

_NAME = npu.DEVICE_NAME


class Stream:
    """A stream that orders nothing: every op has already run when it returns."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = _tensor.DEVICE

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> Event:
        return event if event is not None else Event()

    def query(self) -> bool:
        return True

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class Event:
    """An event whose elapsed time is the wall time between two records."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self._time = 0.0

    def record(self, stream: Any = None) -> None:
        self._time = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: Event) -> float:
        return (end._time - self._time) * 1000.0


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


def _get_device_properties(device: Any = None) -> Any:
    return SimpleNamespace(name=_NAME, total_memory=TOTAL_MEMORY, multi_processor_count=1)


def api() -> dict[str, Any]:
    """What the device module gains in compute mode (default mode keeps ``device_count() == 0`` and nothing else)."""
    default_stream = Stream()
    generator = _rng.GENERATOR
    return {
        "device_count": lambda: 1,
        "is_initialized": lambda: True,
        "current_device": lambda: 0,
        "get_device_name": npu.get_device_name,
        "get_device_capability": lambda device=None: (0, 0),
        "get_device_properties": _get_device_properties,
        "device": _DeviceContext,
        "manual_seed": _rng.manual_seed,
        "manual_seed_all": _rng.manual_seed,
        "seed": generator.seed,
        "seed_all": generator.seed,
        "initial_seed": generator.initial_seed,
        "get_rng_state": _rng.get_rng_state,
        "set_rng_state": _rng.set_rng_state,
        "get_rng_state_all": lambda: [_rng.get_rng_state()],
        "set_rng_state_all": lambda states: _rng.set_rng_state(next(iter(states))),
        "default_generators": (generator,),
        "memory_allocated": lambda device=None: MEMORY.allocated,
        "max_memory_allocated": lambda device=None: MEMORY.peak,
        "memory_reserved": lambda device=None: MEMORY.reserved,
        "max_memory_reserved": lambda device=None: MEMORY.reserved,
        "reset_peak_memory_stats": MEMORY.reset_peak,
        "reset_max_memory_allocated": MEMORY.reset_peak,
        "memory_stats": MEMORY.stats,
        "mem_get_info": MEMORY.get_info,
        "empty_cache": MEMORY.empty_cache,
        "get_amp_supported_dtype": lambda: [torch.float16, torch.bfloat16],
        "Stream": Stream,
        "Event": Event,
        "current_stream": lambda device=None: default_stream,
        "default_stream": lambda device=None: default_stream,
        "stream": _stream_context,
        "set_stream": lambda stream: None,
        "is_bf16_supported": lambda including_emulation=True: True,
        "is_current_stream_capturing": lambda: False,  # no graph capture here (torch's optimizers ask)
        "_lazy_init": lambda: None,
        "_lazy_call": lambda callable, **kwargs: callable(),
    }
