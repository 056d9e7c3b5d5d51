"""Carry of verl #6322 to every torch from 2.8: megatron-core 0.12's distributed checkpoint save.

Mirrors: ``apply_patch_megatron_v012_with_torch_v28(_v29)`` in ``verl/models/mcore/patch.py`` (torch 2.8/2.9 only).
Missing when: megatron-core 0.12's ``FileSystemWriterAsync`` never passes the ``serialization_format`` torch's
``_write_item`` requires from 2.8: every checkpoint save fails (docs/fixes.md).
Does: rebinds ``_write_item`` there to one passing ``TORCH_SAVE`` (torch's default) where none is given.
"""

from __future__ import annotations

import inspect
import sys
from types import ModuleType
from typing import Any

from npu_shim.fingerprint import parameters, uses
from npu_shim.patcher import MISSING, NATIVE, NOT_APPLICABLE, Fix, Outcome, get_original

NAME = "megatron_checkpoint_save"
WATCHES = "megatron.core.dist_checkpointing.strategies.filesystem_async"
WRITER = "FileSystemWriterAsync"
FORMAT = "serialization_format"
WRITE_ITEM = "_write_item"


def judge(module: ModuleType) -> Outcome:
    """Not a fingerprint of verl's code: megatron-core's, read by what its writer calls and what it passes."""
    current = getattr(module, WRITE_ITEM, None)
    writer = getattr(getattr(module, WRITER, None), "write_preloaded_data", None)
    code = getattr(inspect.unwrap(writer), "__code__", None) if writer is not None else None  # under _disable_gc
    if current is None or code is None:
        return Outcome(NAME, NOT_APPLICABLE, f"{WATCHES} is not megatron-core 0.12's (no {WRITE_ITEM}, no {WRITER})")
    parameter = parameters(current).get(FORMAT)
    if parameter is None or parameter.default is not inspect.Parameter.empty:
        return Outcome(NAME, NOT_APPLICABLE, f"this torch's {WRITE_ITEM} takes no required {FORMAT} (torch < 2.8)")
    if str(getattr(writer, "__module__", "")).startswith("verl."):
        return Outcome(NAME, NATIVE, f"verl's own patch replaced {WRITER}.write_preloaded_data for this torch")
    if uses(code, FORMAT):
        return Outcome(NAME, NOT_APPLICABLE, f"megatron-core passes {FORMAT} itself (0.13 and later)")
    return Outcome(NAME, MISSING, f"{WRITER} never passes the {FORMAT} torch's {WRITE_ITEM} requires:")


def _write_item_as_torch_saves(*args: Any, **kwargs: Any) -> Any:
    """torch's ``_write_item`` (the patcher keeps it), given torch's default format where a caller gives none."""
    from torch.distributed.checkpoint.filesystem import SerializationFormat

    if len(args) < 6:  # (transforms, stream, data, write_item, storage_key): megatron 0.12.1's call
        kwargs.setdefault(FORMAT, SerializationFormat.TORCH_SAVE)
    return get_original(sys.modules[WATCHES], WRITE_ITEM)(*args, **kwargs)


FIX = Fix(
    name=NAME,
    judge=judge,
    edit=lambda module, writer: writer.bind(module, WRITE_ITEM, _write_item_as_torch_saves),
    applied=f"{WATCHES}.{WRITE_ITEM} now passes {FORMAT}=TORCH_SAVE, as megatron 0.13 does",
    watches=WATCHES,
)
