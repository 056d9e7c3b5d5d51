"""The NPU_SHIM_* switches, and the rule that each kind of warning is logged once per process."""

from __future__ import annotations

import os
from collections.abc import Sequence

SWITCHES = {
    "NPU_SHIM_DISABLE": False,  # 1: install nothing at all
    "NPU_SHIM_STRICT": False,  # 1: a failure inside the shim raises instead of warning once
    "NPU_SHIM_PROPAGATE": True,  # 0: `import npu_shim` leaves os.environ["PYTHONPATH"] alone
    "NPU_SHIM_MEGATRON_ADAPTOR": True,  # 0: the first import of Megatron does not import MegatronAdaptor first
}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})  # not "": `NPU_SHIM_PROPAGATE=` is a mistake to report

# Not booleans, read where they act (the hook):
DISABLED_FIXES = "NPU_SHIM_DISABLED_FIXES"  # fix names, comma-separated: those fixes are not applied
LOG_LEVEL = "NPU_SHIM_LOG_LEVEL"  # the npu_shim logger's level; INFO (the default) shows where verl was changed
_LEVELS = {"DEBUG": 10, "INFO": 20, "WARN": 30, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}

_warned: set[str] = set()


def switch(name: str) -> bool:
    """The boolean value of one NPU_SHIM_* switch; a value we cannot read gets a warning and the default."""
    default = SWITCHES[name]
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    warn_once(
        f"bad-switch-{name}",
        "%s=%r is not a boolean (use 1/0, true/false, yes/no, on/off); using the default, %s",
        name,
        raw,
        int(default),
    )
    return default


def read_all() -> dict[str, bool]:
    """Every switch's value; each bad value is reported (once) now."""
    return {name: switch(name) for name in SWITCHES}


def names_of_disabled_fixes() -> set[str]:
    """The names ``NPU_SHIM_DISABLED_FIXES`` gives, fixes' or not (blanks and empty names dropped)."""
    return {name.strip() for name in os.environ.get(DISABLED_FIXES, "").split(",")} - {""}


def disabled_fixes(known: Sequence[str]) -> frozenset[str]:
    """The fixes ``NPU_SHIM_DISABLED_FIXES`` turns off; a name that is no fix's is reported once, and ignored."""
    named = names_of_disabled_fixes()
    unknown = sorted(named.difference(known))
    if unknown:
        warn_once(
            f"unknown-fixes-{unknown}",
            "%s names no fix %s: ignored. The fixes are: %s",
            DISABLED_FIXES,
            ", ".join(unknown),
            ", ".join(known),
        )
    return frozenset(named.intersection(known))


def log_level() -> int:
    """The level ``NPU_SHIM_LOG_LEVEL`` asks for (a name as verl's ``VERL_LOGGING_LEVEL`` takes, or a number); INFO
    by default, and for a value we cannot read (reported once)."""
    raw = os.environ.get(LOG_LEVEL)
    if raw is None:
        return _LEVELS["INFO"]
    value = raw.strip().upper()
    if value.isdigit():
        return int(value)
    if value in _LEVELS:
        return _LEVELS[value]
    warn_once(
        f"bad-switch-{LOG_LEVEL}",
        "%s=%r is not a logging level (%s); using INFO",
        LOG_LEVEL,
        raw,
        "DEBUG, INFO, WARNING, ERROR",
    )
    return _LEVELS["INFO"]


def warn_once(key: str, message: str, *args: object) -> None:
    """Log a warning on logger ``npu_shim`` once per process for each ``key``."""
    if key not in _warned:
        _warned.add(key)
        import logging  # not at start-up: activate() reads the switches there

        logging.getLogger("npu_shim").warning(message, *args)


def hook_unavailable(error: Exception) -> bool:
    """Report that npu_shim.hook could not be imported (e.g. no wrapt); True when NPU_SHIM_STRICT asks to raise."""
    if switch("NPU_SHIM_STRICT"):
        return True
    warn_once(
        "hook-import",
        "npu_shim could not load its import hook (%s: %s); verl runs unpatched. %s",
        type(error).__name__,
        error,
        "Install wrapt where verl runs (pip install wrapt), or set NPU_SHIM_DISABLE=1 to turn the shim off."
        if getattr(error, "name", None) == "wrapt"  # not installed, as on a bare checkout route
        else "Set NPU_SHIM_DISABLE=1 to turn the shim off.",
    )
    return False
