"""megatron-core 0.12's checkpoint metadata through torch 2.10's writer: a resumed run loads what it saved.

Mirrors: megatron-core 0.15's ``MCoreMetadata`` (a ``Metadata`` declaring ``mcore_data``); no verl change.
Missing when: torch's writer pickles a ``dataclasses.replace`` copy of the metadata (2.10), without the ``mcore_data``
megatron-core 0.12 sets undeclared and reads on load (docs/fixes.md).
Does: gives ``FileSystemWriterAsync`` a ``finish`` keeping the extras, pickled as torch's own ``Metadata``.
"""

from __future__ import annotations

import copyreg
import dataclasses
import sys
from types import ModuleType
from typing import Any

from npu_shim.fingerprint import uses
from npu_shim.patcher import MISSING, NOT_APPLICABLE, Fix, Outcome, get_original

NAME = "megatron_checkpoint_metadata"
WATCHES = "megatron.core.dist_checkpointing.strategies.torch"  # the planner and the load; it imports the writer
WRITER_MODULE = "megatron.core.dist_checkpointing.strategies.filesystem_async"
WRITER = "FileSystemWriterAsync"
EXTRA = "mcore_data"


def judge(module: ModuleType) -> Outcome:
    """Not a fingerprint of verl's code: megatron-core's and torch's, read by what they do with ``mcore_data``."""
    writer = getattr(sys.modules.get(WRITER_MODULE), WRITER, None)
    if writer is None:
        return Outcome(NAME, NOT_APPLICABLE, f"megatron-core writes no checkpoint through {WRITER_MODULE}.{WRITER}")
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.metadata import Metadata

    if not (uses(FileSystemWriter.finish, "dataclasses") and uses(FileSystemWriter.finish, "replace")):
        return Outcome(NAME, NOT_APPLICABLE, "this torch's checkpoint writer pickles the caller's Metadata itself")
    planner = getattr(getattr(module, "MCoreSavePlanner", None), "create_global_plan", None)
    declared = EXTRA in {field.name for field in dataclasses.fields(Metadata)} or hasattr(module, "MCoreMetadata")
    if declared or not uses(planner, EXTRA):
        return Outcome(NAME, NOT_APPLICABLE, f"megatron-core sets no undeclared {EXTRA} (0.15 and later declare it)")
    if not uses(getattr(module, "get_reformulation_metadata", None), EXTRA):
        return Outcome(NAME, NOT_APPLICABLE, f"megatron-core's load does not read {EXTRA}")
    return Outcome(
        NAME, MISSING, f"torch's writer copies the Metadata with its declared fields only, losing megatron's {EXTRA}:"
    )


def _as_torch_metadata(self: Any, protocol: int) -> tuple[Any, ...]:
    """Pickled as torch's own ``Metadata`` with every attribute (what torch 2.13 writes): no npu_shim class in it."""
    from torch.distributed.checkpoint.metadata import Metadata

    # copyreg.__newobj__ refuses a class other than the object's own; _reconstructor is pickle's protocol-0 form
    return copyreg._reconstructor, (Metadata, object, None), dict(vars(self))


def _declaring_extras(metadata: Any) -> Any:
    """``metadata``, or a copy of a subclass that declares its undeclared attributes, which ``replace`` keeps."""
    declared = {field.name for field in dataclasses.fields(metadata)}
    extras = {name: value for name, value in vars(metadata).items() if name not in declared}
    if not extras:
        return metadata
    carrier = dataclasses.make_dataclass(
        type(metadata).__name__,
        [(name, Any, dataclasses.field(default=None)) for name in extras],
        bases=(type(metadata),),
        namespace={"__reduce_ex__": _as_torch_metadata},
    )
    fields = {field.name: getattr(metadata, field.name) for field in dataclasses.fields(metadata) if field.init}
    return carrier(**fields, **extras)


def _finish_keeping_extras(self: Any, metadata: Any, results: Any) -> Any:
    """The writer's ``finish`` as it was (megatron's own, or torch's it inherits), given a Metadata it keeps whole."""
    writer = getattr(sys.modules[WRITER_MODULE], WRITER)
    own = get_original(writer, "finish")
    finish = own.__get__(self) if own is not None else super(writer, self).finish
    return finish(_declaring_extras(metadata), results)


FIX = Fix(
    name=NAME,
    judge=judge,
    edit=lambda module, writer: writer.bind(
        getattr(sys.modules[WRITER_MODULE], WRITER), "finish", _finish_keeping_extras
    ),
    applied=f"{WRITER}.finish now writes it whole, as torch 2.13 does",
    watches=WATCHES,
)
