"""Second stage, loaded once verl is being imported: wrapt post-import hooks.

One hook per verl module a fix changes (``verl.workers.engine``, ``verl.models.mcore.util``, ...):
wrapt calls :func:`on_module_imported` right after that module has executed (or at once, if it
already has), in whatever order verl imports them. A hook that raises would fail verl's import
and wrapt would forget it; so every failure is caught here, the partial edits of that module's
fixes are reverted, one warning names the switch that turns the shim off, and the process goes
on with that module as it shipped, unless ``NPU_SHIM_STRICT=1``. The fixes run outside the hook's
lock, which guards its bookkeeping alone: a fix that imports another watched module runs that
module's fixes in its own thread, as wrapt calls hooks outside its own lock.
"""

from __future__ import annotations

import logging
import threading
from types import ModuleType

import wrapt

from npu_shim.catalogue import apply_module, fix_names, watched_modules
from npu_shim.changes import ChangeSet
from npu_shim.switches import switch, warn_once
from npu_shim.verdicts import UNRECOGNISED, Outcome

logger = logging.getLogger("npu_shim")

_lock = threading.Lock()  # for the bookkeeping only, never held over a fix: a fix may import a watched module
_registered = False
outcomes: list[Outcome] = []  # the last one of each fix whose module was imported, in fix order (for the doctor)
failure: BaseException | None = None
failed_module: str | None = None  # the module whose fixes failed (and were reverted), with ``failure``


def register() -> None:
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
    for module_name in watched_modules():
        wrapt.register_post_import_hook(on_module_imported, module_name)


def on_module_imported(module: ModuleType) -> None:
    global failure, failed_module
    name = module.__name__
    # No lock over the fixes, and none needed for one application when threads race: wrapt calls a
    # module's hooks once, and importlib keeps other threads importing that module waiting until then.
    try:
        results = apply_module(module, ChangeSet())
    except Exception as error:  # apply_module reverted this module's edits
        with _lock:
            failure, failed_module = error, name
        if switch("NPU_SHIM_STRICT"):
            raise
        warn_once(
            f"hook-failed-{name}",
            "npu_shim failed while patching %s and left it unchanged (%s: %s). "
            "Set NPU_SHIM_DISABLE=1 to turn the shim off, NPU_SHIM_STRICT=1 to raise instead.",
            name,
            type(error).__name__,
            error,
        )
        return
    with _lock:
        _record(results)
    for outcome in results:
        if outcome.verdict == UNRECOGNISED:  # verl needs the change, but its code is not what the fix knows
            warn_once(f"unrecognised-{outcome.fix}", "npu_shim did not apply %s: %s", outcome.fix, outcome.reason)
        else:
            logger.info("%s: %s (%s)", outcome.fix, outcome.verdict, outcome.reason)


def _record(results: list[Outcome]) -> None:
    latest = {outcome.fix: outcome for outcome in [*outcomes, *results]}
    outcomes[:] = [latest[name] for name in fix_names() if name in latest]
