"""The NPU_SHIM_* switches, and the rule that each kind of warning is logged once per process."""

from __future__ import annotations

import os

SWITCHES = {
    "NPU_SHIM_DISABLE": False,  # 1: install nothing at all
    "NPU_SHIM_STRICT": False,  # 1: a failure inside the shim raises instead of warning once
    "NPU_SHIM_PROPAGATE": True,  # 0: `import npu_shim` leaves os.environ["PYTHONPATH"] alone
    "NPU_SHIM_MEGATRON_ADAPTOR": True,  # 0: the first import of Megatron does not import MegatronAdaptor first
}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})  # not "": `NPU_SHIM_PROPAGATE=` is a mistake to report

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
