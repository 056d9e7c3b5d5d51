"""Second stage, loaded once verl is being imported: wrapt post-import hooks.

One hook per verl module a fix changes (``verl.workers.engine``, ``verl.models.mcore.util``, ...):
wrapt calls :func:`on_module_imported` right after that module has executed (or at once, if it
already has), in whatever order verl imports them. A hook that raises would fail verl's import
and wrapt would forget it; so every failure is caught here, the partial edits of that module's
fixes are reverted, one warning names the switch that turns the shim off, and the process goes
on with that module as it shipped, unless ``NPU_SHIM_STRICT=1``. The fixes run outside the hook's
lock, which guards its bookkeeping alone: a fix that imports another watched module runs that
module's fixes in its own thread, as wrapt calls hooks outside its own lock.

Where the fixes of a module change verl, one INFO line says so on logger ``npu_shim``, which users see in the
process's stderr (Ray's worker logs) without configuring logging: :class:`StderrUntilConfigured`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from types import ModuleType

import wrapt

from npu_shim.catalogue import apply_module, fix_names, watched_modules
from npu_shim.changes import ChangeSet
from npu_shim.layout import installed_verl_version
from npu_shim.names import VERSION
from npu_shim.switches import LOG_LEVEL, log_level, switch, warn_once
from npu_shim.verdicts import APPLIED, UNRECOGNISED, Outcome

logger = logging.getLogger("npu_shim")

_lock = threading.Lock()  # for the bookkeeping only, never held over a fix: a fix may import a watched module
_registered = False
outcomes: list[Outcome] = []  # the last one of each fix whose module was imported, in fix order (for the doctor)
failure: BaseException | None = None
failed_module: str | None = None  # the module whose fixes failed (and were reverted), with ``failure``


class StderrUntilConfigured(logging.StreamHandler):
    """Writes npu_shim's records to the stderr of the moment while the application has configured no logging.

    Without a handler of its own, Python shows a library's records at WARNING and above only (``logging.lastResort``):
    the line that says where the shim changed verl is INFO. Once the root logger has a handler (``basicConfig``,
    verl's or Ray's set-up), records reach it by propagation instead and this one stays quiet: never written twice.
    """

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # not StreamHandler's: the stream is looked up at each record (pytest swaps it)
        self.addFilter(lambda record: not logging.getLogger().handlers)

    @property
    def stream(self) -> object:
        return sys.stderr


def show_log_lines() -> None:
    """Let the npu_shim logger's INFO lines be seen: its level from ``NPU_SHIM_LOG_LEVEL`` (unless the application set
    one and the variable is unset), and :class:`StderrUntilConfigured` once."""
    if logger.level == logging.NOTSET or LOG_LEVEL in os.environ:
        logger.setLevel(log_level())
    if not any(isinstance(handler, StderrUntilConfigured) for handler in logger.handlers):
        logger.addHandler(StderrUntilConfigured())


def register() -> None:
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
    show_log_lines()
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
            logger.debug("%s: %s (%s)", outcome.fix, outcome.verdict, outcome.reason)
    applied = [outcome.fix for outcome in results if outcome.verdict == APPLIED]
    if applied:  # a process where the shim changes nothing says nothing
        logger.info(
            "npu_shim %s: changed verl %s in this process: %s (%s=WARNING hides this line)",
            VERSION,
            installed_verl_version() or "(version unknown)",
            ", ".join(applied),
            LOG_LEVEL,
        )


def _record(results: list[Outcome]) -> None:
    latest = {outcome.fix: outcome for outcome in [*outcomes, *results]}
    outcomes[:] = [latest[name] for name in fix_names() if name in latest]
