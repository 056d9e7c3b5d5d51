"""The names every part of npu_shim agrees on, the NPU_SHIM_* switches, and "warn once per process". Standard
library only: the package's ``__init__`` and the watcher read it before verl is imported.
"""

import os

VERSION = "0.3.0"  # the one place it is written: npu_shim.__version__, and pyproject.toml reads it here
PACKAGE = "npu_shim"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
BOOTSTRAP = "npu_shim_bootstrap"  # the folder beside the package holding our sitecustomize.py (outside the package)
BOOTSTRAP_MARKER = "__npu_shim_bootstrap__"  # in our sitecustomize file's text: it is npu_shim's
WAITING = "npu_shim_waiting"  # the watcher's global: the top-level names whose first import it still waits for
VERL_MODULES = "VERL_USE_EXTERNAL_MODULES"  # verl (>= 0.6.0) imports the modules it names at `import verl`
VERL_PLUGINS = "verl.plugins"  # the entry-point group verl (>= 0.9.0) loads at `import verl`; ours is PACKAGE
VERL_PLUGINS_POLICY = "VERL_USE_EXTERNAL_PLUGINS"  # verl's switch for that group: auto (default), none, or names

SWITCHES = {
    "NPU_SHIM_DISABLE": False,  # 1: install nothing at all
    "NPU_SHIM_STRICT": False,  # 1: a failure inside the shim raises instead of warning once
    "NPU_SHIM_PROPAGATE": True,  # 0: `import npu_shim` leaves os.environ["PYTHONPATH"] alone
    "NPU_SHIM_MEGATRON_ADAPTOR": True,  # 0: the first import of Megatron does not import MegatronAdaptor first
}
DISABLED_FIXES = "NPU_SHIM_DISABLED_FIXES"  # fix names, comma-separated: those fixes are not applied
LOG_LEVEL = "NPU_SHIM_LOG_LEVEL"  # the npu_shim logger's level; INFO (the default) shows where verl was changed
_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
_LEVELS = {"DEBUG": 10, "INFO": 20, "WARN": 30, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
_warned = set()


def switch(name: str) -> bool:
    """The boolean value of one switch of ``SWITCHES``; a value we cannot read gets a warning and the default."""
    default, raw = SWITCHES[name], os.environ.get(name)
    if raw is None:
        return default
    value = _BOOLEANS.get(raw.strip().lower())  # not "": `NPU_SHIM_PROPAGATE=` is a mistake to report
    if value is not None:
        return value
    warn_once(
        f"bad-switch-{name}",
        "%s=%r is not a boolean (use 1/0, true/false, yes/no, on/off); using the default, %s",
        name,
        raw,
        int(default),
    )
    return default


def read_all() -> "dict[str, bool]":
    """Every boolean switch's value; each bad value is reported (once) now."""
    return {name: switch(name) for name in SWITCHES}


def names_of_disabled_fixes() -> "set[str]":
    """The names ``NPU_SHIM_DISABLED_FIXES`` gives, fixes' or not (blanks and empty names dropped)."""
    return {name.strip() for name in os.environ.get(DISABLED_FIXES, "").split(",")} - {""}


def disabled_fixes(known: "list[str]") -> "frozenset[str]":
    """The fixes ``NPU_SHIM_DISABLED_FIXES`` turns off; a name that is no fix's is reported once, and ignored."""
    named = names_of_disabled_fixes()
    unknown = sorted(named.difference(known))
    if unknown:
        warn_once(
            f"unknown-fixes-{unknown}",
            "%s names no fix %s: ignored. The fixes are: %s",
            DISABLED_FIXES,
            ", ".join(with_nearest(name, known) for name in unknown),
            ", ".join(known),
        )
    return frozenset(named.intersection(known))


def with_nearest(name: str, known: "list[str]") -> str:
    """``name``, and the nearest of ``known`` if one is near: ``value_engin (did you mean value_engine?)``."""
    import difflib  # not at start-up

    nearest = difflib.get_close_matches(name, known, n=1)
    return f"{name} (did you mean {nearest[0]}?)" if nearest else name


def log_level() -> int:
    """The level ``NPU_SHIM_LOG_LEVEL`` asks for (a name, or a number); INFO by default and for a bad value."""
    raw = os.environ.get(LOG_LEVEL, "INFO")
    value = raw.strip().upper()
    if value.isdigit():
        return int(value)
    if value not in _LEVELS:
        warn_once(
            f"bad-switch-{LOG_LEVEL}",
            "%s=%r is not a logging level (DEBUG, INFO, WARNING, ERROR); using INFO",
            LOG_LEVEL,
            raw,
        )
    return _LEVELS.get(value, _LEVELS["INFO"])


def warn_once(key: str, message: str, *args: object) -> None:
    """Log a warning on logger ``npu_shim`` once per process for each ``key``."""
    if key not in _warned:
        _warned.add(key)
        import logging  # not at start-up

        logging.getLogger("npu_shim").warning(message, *args)
