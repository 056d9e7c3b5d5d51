"""SIMULATED ``torch.npu`` device module, from simulated_npu: reports an NPU, runs nothing.

``device_count() == 0`` keeps verl's ``set_random_seed`` away from Megatron's
CUDA RNG tracker, which would need a real device. In compute mode
(``NPU_SHIM_SIM_COMPUTE=1``) ``torch_npu._compute.enable`` replaces these answers with
``torch_npu._device_module``'s: one device, RNG state, memory figures, streams and events.

``set_device`` takes an index among the visible devices, as the real one does: those
``ASCEND_RT_VISIBLE_DEVICES`` lists where it is set (read at each call, not once at the runtime's start as CANN
reads it), else the simulated host's :data:`HOST_NPUS`. An index at or past their count raises the real
``RuntimeError``'s words (``Invalid device ID``, error code 107001). ``device_count()`` does not follow them (see
above). In the default mode ``current_device()`` answers the index last set.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

SIMULATED = True
HOST_NPUS = 8  # the NPUs of the simulated host (an Atlas 800 training server's), where no variable chooses among them
VISIBLE_DEVICES_VARIABLE = "ASCEND_RT_VISIBLE_DEVICES"
# The chip get_device_name() names, read at each call: "Ascend950PR" makes the host an A5 to verl 0.9.1's test (which
# looks for "Ascend950" or "Ascend910_95"), "Ascend910_9391" an A3; unset, a name no generation's test matches.
DEVICE_NAME_VARIABLE = "NPU_SHIM_SIM_DEVICE_NAME"
DEVICE_NAME = "Ascend (simulated by simulated_npu)"
_current = 0  # the index set_device last set


def is_available() -> bool:
    return True


def device_count() -> int:
    return 0


def current_device() -> int:
    return _current


def get_device_name(device: object = None) -> str:
    return os.environ.get(DEVICE_NAME_VARIABLE) or DEVICE_NAME


def visible_device_count() -> int:
    """The devices a process may set: ``ASCEND_RT_VISIBLE_DEVICES``'s entries where it is set, else the host's."""
    listed = os.environ.get(VISIBLE_DEVICES_VARIABLE)
    if listed is None:
        return HOST_NPUS
    return len([entry for entry in listed.split(",") if entry.strip()])


def set_device(device: object) -> None:
    """Make ``device`` (an index among the visible devices, ``"npu:N"`` or a ``torch.device``) the current one."""
    global _current
    if isinstance(device, int):
        index = device
    else:
        import torch

        index = torch.device(device).index
    if index is None or index < 0:  # as the real one: no index, nothing to set
        return
    count = visible_device_count()
    if index >= count:
        listed = os.environ.get(VISIBLE_DEVICES_VARIABLE)
        seen = f"input visible devices:{listed}" if listed is not None else f"{count} devices on the host"
        raise RuntimeError(
            "SetDevice: NPU function error: c10_npu::SetDevice(device_id_), error code is 107001\n"
            "[Error]: Invalid device ID.\n"
            "        Check whether the device ID is valid.\n"
            f"EE1001: The argument is invalid.Reason: Set visible device failed, invalid device={index}, {seen} "
            "(simulated by simulated_npu)"
        )
    _current = index


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
