"""The simulated device's memory figures: the bytes npu tensors hold, as ``torch.npu.memory_*`` reports them."""

from __future__ import annotations

import weakref
from typing import Any

import torch

TOTAL_MEMORY = 64 << 30  # a plausible device: verl logs these figures, nothing here sizes itself on them


class Memory:
    """The bytes npu tensors hold: each storage counted once, while any npu tensor over it lives.

    Reserved memory is what a caching allocator keeps: the most ever allocated since ``empty_cache()``.
    """

    def __init__(self) -> None:
        self.storages: dict[int, list[int]] = {}  # data_ptr -> [bytes, npu tensors over it]
        self.allocated = self.peak = self.reserved = 0

    def track(self, wrapper: torch.Tensor, inner: torch.Tensor) -> list[int]:
        """Count ``inner``'s storage while ``wrapper`` lives; the cell returned names the storage it holds."""
        cell = [0]
        self._hold(cell, inner)
        weakref.finalize(wrapper, self._release, cell)
        return cell

    def retrack(self, cell: list[int], inner: torch.Tensor) -> None:
        """The wrapper that holds ``cell`` now computes on ``inner`` (``t.data = other``)."""
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

    def get_info(self, device: Any = None) -> tuple[int, int]:
        """``mem_get_info``: free and total bytes."""
        return TOTAL_MEMORY - self.reserved, TOTAL_MEMORY


MEMORY = Memory()
