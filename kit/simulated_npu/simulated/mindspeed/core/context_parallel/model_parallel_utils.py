"""SIMULATED ``mindspeed.core.context_parallel.model_parallel_utils``: the ring state of CP attention.

MindSpeed's ring attention needs, per rank, the ranks it exchanges key/value
blocks with. They are module globals, filled in only when the wrapped
``initialize_model_parallel`` runs; wrapped after Megatron's parallel state was
built, the wrapper never runs and they stay ``None`` (CP attention then has no
ring, and nothing says so). Names as MindSpeed's; values from the real CP group.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mindspeed import lines
from mindspeed.args_utils import get_mindspeed_args

RING_ALGORITHMS = ("megatron_cp_algo", "hybrid_cp_algo")

_CONTEXT_PARALLEL_RANKS_FOR_RING_INTRA_WINDOW: list[int] | None = None
_CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV: list[int] | None = None
_CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV: list[int] | None = None


def ring_state() -> dict[str, list[int] | None]:
    return {
        "intra_window": _CONTEXT_PARALLEL_RANKS_FOR_RING_INTRA_WINDOW,
        "inter_window_kv": _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV,
        "inter_window_dkv": _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV,
    }


def get_ring_ranks_for_intra_window() -> list[int]:
    if _CONTEXT_PARALLEL_RANKS_FOR_RING_INTRA_WINDOW is None:
        raise AssertionError("Context parallel ranks for ring intra window not initialized")
    return _CONTEXT_PARALLEL_RANKS_FOR_RING_INTRA_WINDOW


def get_ring_ranks_for_inter_window_kv() -> list[int]:
    if _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV is None:
        raise AssertionError("Context parallel ranks for ring inter window KV not initialized")
    return _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV


def get_ring_ranks_for_inter_window_dkv() -> list[int]:
    if _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV is None:
        raise AssertionError("Context parallel ranks for ring inter window DKV not initialized")
    return _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV


def forget_ring_state() -> None:
    """Test-only: as in a fresh process. MindSpeed's destroy wrapper does not clear these."""
    global _CONTEXT_PARALLEL_RANKS_FOR_RING_INTRA_WINDOW
    global _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV
    global _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV
    _CONTEXT_PARALLEL_RANKS_FOR_RING_INTRA_WINDOW = None
    _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV = None
    _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV = None


def build_ring_state(rank: int, ring: list[int], window_size: int) -> None:
    """Split this rank's CP ring into windows of ``window_size`` consecutive ranks."""
    global _CONTEXT_PARALLEL_RANKS_FOR_RING_INTRA_WINDOW
    global _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV
    global _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV
    windows = [ring[start : start + window_size] for start in range(0, len(ring), window_size)]
    position = ring.index(rank)
    offset = position % window_size
    _CONTEXT_PARALLEL_RANKS_FOR_RING_INTRA_WINDOW = windows[position // window_size]
    # key/value blocks travel between the ranks at the same offset of every window
    _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV = [window[offset] for window in windows]
    # gradients of key/value travel diagonally (next window, next offset) until the path closes;
    # every such path crosses the first window, so start there, as MindSpeed does
    for start in range(window_size):
        path: list[int] = []
        window, index = 0, start
        while windows[window][index] not in path:
            path.append(windows[window][index])
            window, index = (window + 1) % len(windows), (index + 1) % window_size
        if rank in path:
            _CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV = path
            return


def initialize_model_parallel_cp_wrapper(initialize_model_parallel: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(initialize_model_parallel)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = initialize_model_parallel(*args, **kwargs)
        import torch.distributed
        from megatron.core import parallel_state

        mindspeed_args = get_mindspeed_args()
        ring = list(parallel_state.get_context_parallel_global_ranks())
        if len(ring) > 1 and mindspeed_args.context_parallel_algo in RING_ALGORITHMS:
            build_ring_state(torch.distributed.get_rank(), ring, mindspeed_args.cp_window_size)
        return result

    return wrapper


def destroy_model_parallel_cp_wrapper(destroy_model_parallel: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(destroy_model_parallel)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # MindSpeed clears its other CP groups here (send/recv overlap, hybrid); the ring
        # windows above are left as they are, so they are not modelled as cleared either.
        return destroy_model_parallel(*args, **kwargs)

    return wrapper


# core_r0.18.0 leaves context parallelism to Megatron and has no such wrappers. The line a
# process starts as decides (a test that switches lines in-process keeps the module it has).
if not lines.current().ring_context_parallel:
    del initialize_model_parallel_cp_wrapper, destroy_model_parallel_cp_wrapper
