"""SIMULATED ``torch.npu`` device module, from simulated_npu: reports an NPU, runs nothing.

``device_count() == 0`` keeps verl's ``set_random_seed`` away from Megatron's
CUDA RNG tracker, which would need a real device. In compute mode
(``NPU_SHIM_SIM_COMPUTE=1``) ``torch_npu._compute.enable`` replaces these answers with
``torch_npu._device_module``'s: one device, RNG state, memory figures, streams and events.
"""

from __future__ import annotations

from types import SimpleNamespace

SIMULATED = True


def is_available() -> bool:
    return True


def device_count() -> int:
    return 0


def current_device() -> int:
    return 0


def set_device(device: object) -> None:
    pass


def manual_seed(seed: int) -> None:
    pass


def manual_seed_all(seed: int) -> None:
    pass


def _is_in_bad_fork() -> bool:
    return False


def synchronize(device: object = None) -> None:
    pass


def empty_cache() -> None:
    pass


def _no_range(*args: object, **kwargs: object) -> int:
    return 0


mstx = SimpleNamespace(range_start=_no_range, range_end=_no_range, mark=_no_range)


# Default mode holds no tensors: its memory figures are those of an empty device (compute mode counts bytes).
def memory_allocated(device: object = None) -> int:
    return 0


max_memory_allocated = memory_reserved = max_memory_reserved = memory_allocated


def reset_peak_memory_stats(device: object = None) -> None:
    pass


reset_max_memory_allocated = reset_peak_memory_stats


def memory_stats(device: object = None) -> dict[str, int]:
    return {}
