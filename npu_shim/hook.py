"""The hook: wrapt post-import hooks on every module a fix watches, registered once verl is being imported. A failure
inside one (which would fail verl's import) is reverted and warned about once (``NPU_SHIM_STRICT=1``: raised).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from types import ModuleType

import wrapt

from npu_shim.catalogue import apply_module, fix_names, watched_modules
from npu_shim.patcher import APPLIED, UNRECOGNISED, Outcome, Writer
from npu_shim.recognition import installed_verl_version
from npu_shim.settings import LOG_LEVEL, VERSION, log_level, switch, warn_once

logger = logging.getLogger("npu_shim")

_lock = threading.Lock()  # for the bookkeeping only, never held over a fix: a fix may import a watched module
_registered = False
outcomes: list[Outcome] = []  # the last one of each fix whose module was imported, in fix order (for the doctor)
failure: BaseException | None = None
failed_module: str | None = None  # the module whose fixes failed (and were reverted), with ``failure``


class StderrUntilConfigured(logging.StreamHandler):
    """Writes npu_shim's records (the INFO line too, which ``logging.lastResort`` drops) to the stderr of the moment,
    while the root logger has no handler: once verl or Ray configures logging, records reach theirs instead."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # not StreamHandler's: the stream is looked up at each record (pytest swaps it)
        self.addFilter(lambda record: not logging.getLogger().handlers)

    @property
    def stream(self) -> object:
        return sys.stderr


def register() -> None:
    """Register the hooks once; the npu_shim logger's level comes from ``NPU_SHIM_LOG_LEVEL`` (unless the application
    set one and the variable is unset)."""
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
    if logger.level == logging.NOTSET or LOG_LEVEL in os.environ:
        logger.setLevel(log_level())
    logger.addHandler(StderrUntilConfigured())
    for module_name in watched_modules():
        wrapt.register_post_import_hook(on_module_imported, module_name)


def on_module_imported(module: ModuleType) -> None:
    global failure, failed_module
    name = module.__name__
    # No lock over the fixes: wrapt calls a module's hooks once, and importlib keeps other threads importing it waiting.
    try:
        results = apply_module(module, Writer())
    except Exception as error:  # apply_module reverted this module's edits; anything not an Exception goes on up
        with _lock:
            failure, failed_module = error, name
        if switch("NPU_SHIM_STRICT"):
            raise
        warn_once(
            f"hook-failed-{name}",
            "npu_shim failed while patching %s and left it unchanged (%s: %s). Set "
            "NPU_SHIM_DISABLE=1 to turn the shim off, NPU_SHIM_STRICT=1 to raise instead.",
            name,
            type(error).__name__,
            error,
        )
        return
    with _lock:
        latest = {outcome.fix: outcome for outcome in [*outcomes, *results]}
        outcomes[:] = [latest[fix] for fix in fix_names() if fix in latest]
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
