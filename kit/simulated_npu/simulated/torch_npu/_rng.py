"""The simulated device's own random generator (a CPU ``torch.Generator``), as a real device has one.

Random ops on npu tensors draw from it, so Megatron's RNG tracker, which swaps the device's state in and out,
leaves the CPU's generator alone, and the CPU's draws do not shift when the device draws.
"""

from __future__ import annotations

from typing import Any

import torch

GENERATOR = torch.Generator()

_TAKES_GENERATOR: dict[Any, bool] = {}


def draws_random(func: Any) -> bool:
    """Whether the aten op ``func`` takes a generator (read from its schema once)."""
    known = _TAKES_GENERATOR.get(func)
    if known is None:
        known = _TAKES_GENERATOR[func] = any(argument.name == "generator" for argument in func._schema.arguments)
    return known


# Random ops whose schema takes no generator (dropout's native_dropout) draw from the CPU's default
# generator: they run with the device's state swapped in, or Megatron's RNG tracker, which sets the
# device's state around dropout, would not decide which elements drop (and the CPU's draws would shift).
RANDOM_WITHOUT_GENERATOR = frozenset({torch.ops.aten.native_dropout.default})


def on_device_generator(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``func``, which draws from the CPU's default generator, on the device's state instead."""
    cpu = torch.random.default_generator
    cpu_state = cpu.get_state()
    cpu.set_state(GENERATOR.get_state())
    try:
        return func(*args, **kwargs)
    finally:
        GENERATOR.set_state(cpu.get_state())
        cpu.set_state(cpu_state)


def get_rng_state(device: Any = "npu") -> torch.Tensor:
    return GENERATOR.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    GENERATOR.set_state(new_state.cpu())  # a state kept on the device comes back as a CPU byte tensor


def manual_seed(seed: int) -> None:
    GENERATOR.manual_seed(int(seed))
