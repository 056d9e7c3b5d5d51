"""Start-up half of npu_shim: standard library only, and as little of it as possible.

Every Python process in a container runs ``sitecustomize``, so this module does
three cheap things and defers the rest:

1. reads the ``NPU_SHIM_*`` switches;
2. puts a tiny finder at the front of ``sys.meta_path`` that waits for the first
   import of ``verl`` (or of anything below it); only then is :mod:`npu_shim.hook`
   (and with it wrapt, ~50 ms) imported to register the real post-import hook;
3. when started as ``sitecustomize``, runs the next ``sitecustomize`` on
   ``sys.path`` as well, so a container's own one is not shadowed.

A process that never imports verl never imports wrapt, torch or verl.
"""

# No `from __future__ import annotations` here: importing __future__ alone costs
# more than everything else this module does (Python >= 3.10 needs no help).
import _thread
import os
import sys

SWITCHES = {
    "NPU_SHIM_DISABLE": False,  # 1: install nothing at all
    "NPU_SHIM_STRICT": False,  # 1: a failure inside the shim raises instead of warning once
    "NPU_SHIM_PROPAGATE": True,  # 0: `import npu_shim` leaves os.environ["PYTHONPATH"] alone
}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

PACKAGE_DIR = os.path.dirname(__file__)
BOOTSTRAP_DIR = os.path.join(PACKAGE_DIR, "bootstrap")

# Marks npu_shim's own sitecustomize files, so that chaining never runs one of ours twice.
BOOTSTRAP_MARKER = "__npu_shim_bootstrap__"

# How the shim was activated in this process: None, "sitecustomize" or "import".
activated_via: str | None = None
_lock = _thread.allocate_lock()
_warned: set[str] = set()
_chained = False


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


def warn_once(key: str, message: str, *args: object) -> None:
    """Log a warning on logger ``npu_shim`` once per process; logging is imported only here."""
    if key in _warned:
        return
    _warned.add(key)
    import logging

    logging.getLogger("npu_shim").warning(message, *args)


class VerlImportWatcher:
    """A meta path finder that finds nothing: it notices the first import of verl.

    It stays in ``sys.meta_path`` after firing (removing it while the import
    system iterates the list could make that iteration skip the next finder) and
    only costs one string comparison per later import.
    """

    fired = False

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if not self.fired and (fullname == "verl" or fullname.startswith("verl.")):
            self.fired = True
            install_hook()


_watcher = VerlImportWatcher()


def install_hook() -> None:
    """Import the wrapt half and register the post-import hook on ``verl.workers.engine``."""
    try:
        from npu_shim import hook
    except Exception as error:  # e.g. wrapt is not installed
        if switch("NPU_SHIM_STRICT"):
            raise
        warn_once(
            "hook-import",
            "npu_shim could not load its import hook (%s: %s); verl runs unpatched. "
            "Set NPU_SHIM_DISABLE=1 to turn the shim off.",
            type(error).__name__,
            error,
        )
        return
    hook.register()


def activate(via: str) -> bool:
    """Activate the shim in this process; any number of calls activate it once.

    Returns False when ``NPU_SHIM_DISABLE`` is set. Safe before or after verl is
    imported: if verl is already loaded the hook is registered now (and fires at
    once when ``verl.workers.engine`` is there too).
    """
    global activated_via
    settings = {name: switch(name) for name in SWITCHES}  # every bad value is reported now, at start-up
    if settings["NPU_SHIM_DISABLE"]:
        return False
    with _lock:
        if activated_via is not None:
            return True
        activated_via = via
        verl_loaded = "verl" in sys.modules
        if not verl_loaded and _watcher not in sys.meta_path:
            sys.meta_path.insert(0, _watcher)
    if verl_loaded and not _watcher.fired:
        _watcher.fired = True
        install_hook()
    return True


def propagate() -> None:
    """Put the bootstrap directory first on PYTHONPATH so that child interpreters activate too."""
    if not switch("NPU_SHIM_PROPAGATE"):
        return
    entries = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if entries[:1] == [BOOTSTRAP_DIR]:
        return
    os.environ["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP_DIR, *(e for e in entries if e != BOOTSTRAP_DIR)])


def run_as_sitecustomize(bootstrap_file: str) -> None:
    """What each of npu_shim's ``sitecustomize.py`` files does: activate, then chain."""
    global _chained
    if _chained:  # a second copy of the shim was chained to, and must not chain again
        return
    _chained = True
    activate("sitecustomize")
    run_next_sitecustomize(os.path.dirname(bootstrap_file))


def _normalised(path_entry: str) -> str:
    return os.path.normcase(os.path.abspath(path_entry or os.curdir))


def _may_hold_sitecustomize(entry: str) -> bool:
    """A cheap superset of the entries where PathFinder could find ``sitecustomize``."""
    base = os.path.join(entry or os.curdir, "sitecustomize")
    return (
        os.path.isfile(entry)  # a zip archive
        or os.path.exists(base + ".py")
        or os.path.exists(base + ".pyc")
        or os.path.isdir(base)
    )


def _is_npu_shim_bootstrap(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return BOOTSTRAP_MARKER in file.read(4096)
    except OSError:
        return False


def run_next_sitecustomize(own_dir: str) -> None:
    """Import the ``sitecustomize`` that Python would have run had our directory not been first.

    Python's ``site`` stops at the first ``sitecustomize`` on ``sys.path``; a
    container's own one (OpenTelemetry's launcher, a vendor's tweaks) would be
    silently shadowed. Errors are reported the way ``site`` reports them.
    """
    skip = {_normalised(own_dir), _normalised(BOOTSTRAP_DIR)}
    candidates = [entry for entry in sys.path if _normalised(entry) not in skip and _may_hold_sitecustomize(entry)]
    if not candidates:  # the common case, settled with a few stat calls and no import
        return
    from importlib.machinery import PathFinder

    while True:
        spec = PathFinder.find_spec("sitecustomize", [e for e in candidates if _normalised(e) not in skip])
        if spec is None or spec.loader is None or spec.origin is None:
            return
        if not _is_npu_shim_bootstrap(spec.origin):
            break
        skip.add(_normalised(os.path.dirname(spec.origin)))  # another copy of ours: look past it
    ours = sys.modules.get("sitecustomize")
    from importlib.util import module_from_spec

    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        # The same report as site.execsitecustomize gives.
        sys.modules["sitecustomize"] = ours
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write(
                f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{err.__class__.__name__}: {err}\n"
            )
