"""Second stage, loaded once verl is being imported: the wrapt post-import hook.

wrapt calls :func:`on_engine_imported` right after ``verl.workers.engine`` has
executed (or at once, if it already has). A hook that raises would fail verl's
import and wrapt would forget it; so every failure is caught here, the partial
edits are reverted, one warning names the switch that turns the shim off, and
the process goes on with verl as it shipped, unless ``NPU_SHIM_STRICT=1``.
"""

from __future__ import annotations

import logging
import threading
from types import ModuleType

import wrapt

from npu_shim.changes import ChangeSet
from npu_shim.fixes import Outcome, apply_all
from npu_shim.layout import ENGINE_PACKAGE, read_layout
from npu_shim.switches import switch, warn_once

logger = logging.getLogger("npu_shim")

_lock = threading.Lock()
_registered = False
outcomes: list[Outcome] = []  # of the last application, for `python -m npu_shim doctor`
failure: BaseException | None = None


def register() -> None:
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
    wrapt.register_post_import_hook(on_engine_imported, ENGINE_PACKAGE)


def on_engine_imported(engine_package: ModuleType) -> None:
    global failure
    with _lock:  # one application even when several threads race to import verl
        changes = ChangeSet()
        try:
            results = apply_all(read_layout(engine_package), changes)
        except Exception as error:
            changes.revert()
            failure = error
            if switch("NPU_SHIM_STRICT"):
                raise
            warn_once(
                "hook-failed",
                "npu_shim failed while patching %s and left verl unchanged (%s: %s). "
                "Set NPU_SHIM_DISABLE=1 to turn the shim off, NPU_SHIM_STRICT=1 to raise instead.",
                ENGINE_PACKAGE,
                type(error).__name__,
                error,
            )
            return
        outcomes[:] = results
    for outcome in results:
        logger.info("%s: %s (%s)", outcome.fix, outcome.verdict, outcome.reason)
