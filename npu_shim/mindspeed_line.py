"""What the MindSpeed in this process does with an engine's config: its line, and what earlier engines set
(docs/mindspeed-lines.md). Read through the ``mindspeed.args_utils`` verl's import loaded, never importing MindSpeed;
anything unreadable means "unknown", and the caller keeps upstream's behaviour.
"""

from __future__ import annotations

import logging
import sys
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from npu_shim.fingerprint import uses
from npu_shim.settings import warn_once

logger = logging.getLogger("npu_shim")

ARGS_UTILS = "mindspeed.args_utils"
FUSION_ATTENTION = "use_flash_attn"
BATCH_INVARIANT = "use_flash_attn_npu_batch_invariant"
TE_ATTENTION_MODULE = "megatron.core.extensions.transformer_engine"
MEGATRON_TRAINING = "megatron.training"
# MindSpeed's context-parallel options for TransformerEngineNPU's ring, with their defaults (core_r0.18.0)
TENPU_CP_OPTIONS = {"cp_window_size": 1, "use_cp_send_recv_overlap": False}

# Keys npu_shim's repatch handed MindSpeed earlier in this process (MindSpeed keeps them all).
_passed: set[str] = set()


def _arguments() -> tuple[Namespace | None, Namespace | None]:
    """MindSpeed's option defaults (the options this line knows) and its arguments in this process."""
    args_utils = sys.modules.get(ARGS_UTILS)
    get_defaults = getattr(args_utils, "get_mindspeed_args", None)
    get_current = getattr(args_utils, "get_full_args", None)
    if get_defaults is None or get_current is None:
        return None, None
    try:
        return get_defaults(get_defaults=True), get_current()
    except Exception as error:  # a MindSpeed we cannot read: upstream's behaviour, not a failed engine
        logger.debug("could not read MindSpeed's arguments: %s: %s", type(error).__name__, error)
        return None, None


def has_batch_invariant_attention() -> bool | None:
    """Whether this MindSpeed has the batch-invariant flash attention feature; None when it cannot tell."""
    defaults, _ = _arguments()
    return None if defaults is None else hasattr(defaults, BATCH_INVARIANT)


def fit(config: dict[str, Any]) -> None:
    """Set ``use_flash_attn`` in ``config`` (a copy of the engine's keys) for this MindSpeed line and what earlier
    engines in this process left on, and warn once per key an earlier engine handed MindSpeed and this one leaves."""
    defaults, current = _arguments()
    if defaults is not None and hasattr(defaults, BATCH_INVARIANT):
        _refuse_context_parallelism(config, current)
    config[FUSION_ATTENTION] = _fusion_attention(config, defaults, current)
    if current is not None:
        for key in sorted(_passed - config.keys() - {BATCH_INVARIANT}):  # that one has its own warning
            value = getattr(current, key, None)
            if value != getattr(defaults, key, None):
                warn_once(
                    f"inherited-{key}",
                    "MindSpeed keeps its arguments for the whole process: this engine's override_transformer_config "
                    "does not set %s, so MindSpeed keeps %s=%r from an earlier engine in this process "
                    "(verl builds colocated roles one after the other in one process)",
                    key,
                    key,
                    value,
                )
    _passed.update(config)


def _fusion_attention(config: Mapping[str, Any], defaults: Namespace | None, current: Namespace | None) -> Any:
    requested = bool(config.get(BATCH_INVARIANT))
    configured = config.get(FUSION_ATTENTION, True)
    if defaults is not None and not hasattr(defaults, BATCH_INVARIANT):
        if requested:
            warn_once(
                "batch-invariant-unsupported",
                "override_transformer_config.%s=True: this MindSpeed has no batch-invariant flash attention "
                "(only MindSpeed core_r0.16.0 has it) and ignores the key; fusion attention (%s) stays %s",
                BATCH_INVARIANT,
                FUSION_ATTENTION,
                "on" if configured else "off, as the config sets it",
            )
        return configured
    inherited = BATCH_INVARIANT not in config and bool(getattr(current, BATCH_INVARIANT, False))
    if inherited:
        warn_once(
            "batch-invariant-inherited",
            "MindSpeed's batch-invariant flash attention (%s) was turned on earlier in this process and "
            "MindSpeed's patches are process-wide: every engine in this process, this one included, runs "
            "batch-invariant attention; %s is set False for this engine too (else MindSpeed raises "
            "'the patch of forward exist !')",
            BATCH_INVARIANT,
            FUSION_ATTENTION,
        )
    return False if requested or inherited else configured


def _refuse_context_parallelism(config: Mapping[str, Any], current: Namespace | None) -> None:
    """Batch-invariant attention replaces MindSpeed's context-parallel (ring) attention: refuse CP > 1 with it
    (MindSpeed's own argument check rejects the pair, but ``repatch`` checks nothing and the engine would build)."""
    batch_invariant = config.get(BATCH_INVARIANT, getattr(current, BATCH_INVARIANT, False))
    size = config.get("context_parallel_size", getattr(current, "context_parallel_size", 1))
    if batch_invariant and int(size) > 1:
        raise ValueError(
            f"override_transformer_config.{BATCH_INVARIANT}=True with context_parallel_size={size}: MindSpeed's "
            "batch-invariant flash attention replaces its context-parallel (ring) attention, so each rank would "
            "attend only to its own part of the sequence (MindSpeed's own argument check rejects this pair: "
            "'does not support context parallelism yet'). Use context_parallel_size=1, or drop the key."
        )


def refuse_training_arguments(config: Mapping[str, Any]) -> None:
    """After ``repatch``: refuse a ``TEDotProductAttention.__init__`` MindSpeed wrapped to read Megatron-LM's arguments,
    which verl never initialises (``core_r0.18.0``'s double-ring options at CP > 1; docs/mindspeed-lines.md)."""
    module = sys.modules.get(TE_ATTENTION_MODULE)  # imported by MindSpeed's patches where it wraps anything there
    if not _reads_training_arguments(getattr(getattr(module, "TEDotProductAttention", None), "__init__", None)):
        return
    failure = _training_arguments_failure()
    if failure is None:  # Megatron-LM's arguments exist here (not verl's case): MindSpeed's wrapper reads them
        return
    _, current = _arguments()
    size = config.get("context_parallel_size", getattr(current, "context_parallel_size", "> 1"))
    keys = []
    for key, default in TENPU_CP_OPTIONS.items():
        value = config.get(key, getattr(current, key, default))
        if value != default:
            earlier = "" if key in config else " (from an earlier engine in this process: MindSpeed keeps it)"
            keys.append(f"override_transformer_config.{key}={value!r}{earlier}")
    named = " and ".join(keys) or "MindSpeed's cp_window_size or use_cp_send_recv_overlap"
    raise ValueError(
        f"{named} with context_parallel_size={size}: MindSpeed hands these double-ring options to "
        "TransformerEngineNPU by wrapping TEDotProductAttention.__init__ to read Megatron-LM's training arguments "
        f"(megatron.training.get_args(); here: {failure}), which verl never initialises, so the model build would "
        "fail. Under verl leave cp_window_size at 1 and use_cp_send_recv_overlap off: context parallelism works "
        "without them."
    )


def _reads_training_arguments(function: Any) -> bool:
    """Whether ``function`` is a wrapper (``__wrapped__``, at any depth) whose code imports ``megatron.training``."""
    seen: set[int] = set()
    while hasattr(function, "__wrapped__") and id(function) not in seen:
        seen.add(id(function))
        if uses(function, MEGATRON_TRAINING):
            return True
        function = function.__wrapped__
    return False


def _training_arguments_failure() -> str | None:
    """What ``megatron.training.get_args()`` does in this process instead of giving arguments; None if it gives them."""
    training = sys.modules.get(MEGATRON_TRAINING)  # never imported here: where nothing imported it, no arguments exist
    if training is None:
        return f"nothing in this process imported {MEGATRON_TRAINING}, so nothing initialised its arguments"
    get_args = getattr(training, "get_args", None)
    if get_args is None:
        return f"{MEGATRON_TRAINING} has no get_args"
    try:
        get_args()
    except Exception as error:  # Megatron-LM's `args is not initialized.` assertion, or whatever else it raises
        return f"{type(error).__name__}: {error}"
    return None
