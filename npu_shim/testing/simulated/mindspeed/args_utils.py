"""SIMULATED ``mindspeed.args_utils``: MindSpeed's own argument namespace, one per process.

MindSpeed parses its arguments once and keeps them; ``repatch`` only ever adds or
overwrites keys, so a value set by one call persists into every later one.
"""

from __future__ import annotations

from argparse import Namespace

# The defaults of the arguments the simulated features read (MindSpeed's own defaults).
DEFAULTS = {
    "context_parallel_size": 1,
    "context_parallel_algo": "megatron_cp_algo",
    "cp_window_size": 1,
    "use_flash_attn": False,
    "use_flash_attn_npu_batch_invariant": False,
}

_args: Namespace | None = None


def get_mindspeed_args() -> Namespace:
    global _args
    if _args is None:
        _args = Namespace(**DEFAULTS)
    return _args


def forget_mindspeed_args() -> None:
    """Test-only: back to the defaults, as in a fresh process (MindSpeed itself never forgets)."""
    global _args
    _args = None
