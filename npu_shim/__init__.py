"""npu_shim: backports verl's MindSpeed value-head engine to verl releases that lack it.

``import npu_shim`` activates the shim here and in the interpreters started
afterwards; ``PYTHONPATH=<checkout>`` (or ``$(python -m npu_shim bootstrap-dir)``)
activates it in every interpreter. See README.md.
"""

# This module is also the shim's start-up half: every interpreter in a container
# runs sitecustomize, which loads this one module (docstrings are kept short and
# rare paths live elsewhere: each byte here is paid at every start-up) and
#   1. reads the NPU_SHIM_* switches;
#   2. puts a tiny finder at the front of sys.meta_path that waits for the first
#      import of verl; only then is npu_shim.hook (and with it wrapt, ~50 ms)
#      imported to register the real post-import hook on verl.workers.engine;
#   3. asks the interpreter's own PathFinder whether a later sitecustomize exists
#      (a container's own one), and if so runs it too (npu_shim._chain).
# A process that never imports verl never imports wrapt, torch or verl.
# No `from __future__ import annotations`: importing __future__ alone costs more
# than everything else this module does at start-up (Python >= 3.10 needs no help).
import _thread
import os
import sys

__version__ = "0.1.0"
__all__ = ["__version__", "activate", "activated_via", "bootstrap_dir"]

SWITCHES = {
    "NPU_SHIM_DISABLE": False,  # 1: install nothing at all
    "NPU_SHIM_STRICT": False,  # 1: a failure inside the shim raises instead of warning once
    "NPU_SHIM_PROPAGATE": True,  # 0: `import npu_shim` leaves os.environ["PYTHONPATH"] alone
}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})  # not "": `NPU_SHIM_PROPAGATE=` is a mistake to report

BOOTSTRAP_DIR = os.path.join(os.path.dirname(__file__), "bootstrap")
VERL_MODULES = "VERL_USE_EXTERNAL_MODULES"  # verl (>= 0.6.0) imports the modules it names at `import verl`

# Marks npu_shim's own sitecustomize files, so that chaining never runs one of ours twice.
BOOTSTRAP_MARKER = "__npu_shim_bootstrap__"

# Process state. `importlib.reload(npu_shim)` re-runs this module in the same
# namespace: keep what an earlier run set, so that a reload activates nothing twice.
_activated_via: str | None = globals().get("_activated_via")  # None, "sitecustomize" or "import"
_lock = globals().get("_lock") or _thread.allocate_lock()
_warned: set[str] = globals().get("_warned") or set()
_chained: bool = globals().get("_chained", False)


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


_watcher = globals().get("_watcher") or VerlImportWatcher()


def install_hook() -> None:
    """Import the wrapt half and register the post-import hook on ``verl.workers.engine``."""
    try:
        from npu_shim import hook
    except Exception as error:  # e.g. wrapt is not installed
        if switch("NPU_SHIM_STRICT"):
            raise
        warn_once(
            "hook-import",
            "npu_shim could not load its import hook (%s: %s); verl runs unpatched. %s",
            type(error).__name__,
            error,
            "Install wrapt where verl runs (pip install wrapt), or set NPU_SHIM_DISABLE=1 to turn the shim off."
            if getattr(error, "name", None) == "wrapt"  # not installed, as on a bare checkout route
            else "Set NPU_SHIM_DISABLE=1 to turn the shim off.",
        )
        return
    hook.register()


def activate(via: str = "import") -> bool:
    """Activate the shim in this process; any number of calls activate it once.

    Returns False when ``NPU_SHIM_DISABLE`` is set. Safe before or after verl is
    imported: if verl is already loaded the hook is registered now (and fires at
    once when ``verl.workers.engine`` is there too).
    """
    global _activated_via
    settings = {name: switch(name) for name in SWITCHES}  # every bad value is reported now, at start-up
    if settings["NPU_SHIM_DISABLE"]:
        return False
    with _lock:
        if _activated_via is not None:
            return True
        _activated_via = via
        verl_loaded = "verl" in sys.modules
        if not verl_loaded and _watcher not in sys.meta_path:
            sys.meta_path.insert(0, _watcher)
    if verl_loaded and not _watcher.fired:
        _watcher.fired = True
        install_hook()
    return True


def run_as_sitecustomize(bootstrap_file: str) -> None:
    """What each of npu_shim's ``sitecustomize.py`` files does: activate, then chain."""
    global _chained
    if _chained:  # a second copy of the shim was chained to, and must not chain again
        return
    _chained = True
    activate("sitecustomize")
    run_next_sitecustomize(os.path.dirname(bootstrap_file))


def run_next_sitecustomize(*shim_dirs: str) -> None:
    """Run the ``sitecustomize`` Python would have run had the shim's directories not come first on sys.path."""
    # site has made every sys.path entry absolute and unique by now, so plain comparison is enough.
    skip = (*shim_dirs, BOOTSTRAP_DIR)
    search = [entry for entry in sys.path if entry not in skip]
    # The interpreter's own PathFinder, taken from sys.meta_path: its directory caches are
    # warm by now, and importing importlib.machinery would cost more than the rest of start-up.
    path_finder = next((f for f in sys.meta_path if getattr(f, "__name__", "") == "PathFinder"), None)
    if path_finder is not None and path_finder.find_spec("sitecustomize", search) is not None:
        from npu_shim import _chain

        _chain.run_next_sitecustomize(path_finder, search)


def bootstrap_dir() -> str:
    """The directory to put on PYTHONPATH so that every interpreter activates the shim.

    ``npu_shim/bootstrap`` of an installed shim; the checkout itself for a shim
    run from a checkout (its root ``sitecustomize.py``): the installed bootstrap
    activates only where npu_shim is already on sys.path, and a checkout is not.
    """
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidate = os.path.join(checkout, "sitecustomize.py")
    if os.path.isfile(candidate):
        from npu_shim._chain import is_npu_shim_bootstrap

        if is_npu_shim_bootstrap(candidate):
            return checkout
    return BOOTSTRAP_DIR


def activated_via() -> str | None:
    """How the shim was activated in this process, or None when it is not active.

    ``"sitecustomize"`` (a bootstrap on PYTHONPATH), ``"VERL_USE_EXTERNAL_MODULES"``
    (imported by ``import verl``, which imports the modules that variable names) or
    ``"import"`` (``import npu_shim`` anywhere else).
    """
    return _activated_via


def _started_by_our_sitecustomize() -> bool:
    return getattr(sys.modules.get("sitecustomize"), BOOTSTRAP_MARKER, False)


def names_npu_shim(modules: str | None) -> bool:
    """Whether a VERL_USE_EXTERNAL_MODULES value names this package as verl reads it: split on commas, not stripped."""
    return __name__ in (modules or "").split(",")


def _imported_by_verl() -> bool:
    """Whether verl is importing us: every verl from 0.6.0 imports the modules VERL_USE_EXTERNAL_MODULES names."""
    return "verl" in sys.modules and names_npu_shim(os.environ.get(VERL_MODULES))


def _imported_for_a_module_of_ours() -> bool:
    """Whether this import is of one of our modules by its full name (``from npu_shim.testing import ...``).

    Python imports a package before its module; the import system's own frames tell which was asked for.
    Reading constants or using the simulated-NPU kit must leave the process as it was.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_find_and_load" and frame.f_code.co_filename.startswith("<frozen importlib"):
            name = frame.f_locals.get("name")
            if isinstance(name, str) and name.startswith(__name__ + "."):
                return True
        frame = frame.f_back
    return False


if not _started_by_our_sitecustomize():
    if _imported_by_verl():
        # Children inherit the variable and activate where they import verl: no PYTHONPATH to add,
        # so interpreters that never import verl (Ray's helpers, pip) pay nothing.
        activate(VERL_MODULES)
    elif _imported_for_a_module_of_ours():
        pass  # `import npu_shim` (or `npu_shim.activate()`) is the route; a module of ours is not
    elif activate("import"):
        from npu_shim.propagation import propagate

        propagate()
