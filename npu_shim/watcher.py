"""The watcher: a finder first in ``sys.meta_path`` waiting for the first import of each name in
``npu_shim_waiting``. verl's registers the hook; Megatron's imports MegatronAdaptor before it (verl #7838).
Standard library only: a process importing Megatron without MegatronAdaptor loads this and ``npu_shim.settings``.
"""

import os
import sys
from types import ModuleType

from npu_shim.settings import PACKAGE, VERL_MODULES, WAITING, read_all, switch, warn_once

# The import system's own classes: importlib (and warnings, which it imports) is not loaded in every process.
_PathFinder = sys.modules["_frozen_importlib_external"].PathFinder
_ModuleSpec = sys.modules["_frozen_importlib"].ModuleSpec

VERL = "verl"
MEGATRON = "megatron"
ADAPTOR = "megatron_adaptor"  # MegatronAdaptor's top-level module
ADAPTOR_SWITCH = "NPU_SHIM_MEGATRON_ADAPTOR"

npu_shim_waiting = (VERL, MEGATRON)
hook_import_error = None  # why npu_shim.hook did not import, for the doctor


def take_over() -> None:
    """Be the one watcher in ``sys.meta_path``: in the bootstrap's place (same length, same order), or first."""
    bootstraps = [finder for finder in sys.meta_path if hasattr(finder, WAITING) and finder is not this]
    if this in sys.meta_path:
        for finder in bootstraps:
            sys.meta_path.remove(finder)
    elif bootstraps:  # replaced in place: the import system may be iterating over the list right now
        sys.meta_path[sys.meta_path.index(bootstraps[0])] = this
    else:
        sys.meta_path.insert(0, this)


def find_spec(name: str, path: object = None, target: object = None) -> "_ModuleSpec | None":
    """The first look-up of a name we wait for starts what it starts, once; every other look-up passes by."""
    top = name.partition(".")[0]
    if top not in npu_shim_waiting:
        return None
    take_over()
    stop_waiting(top)  # first: MegatronAdaptor imports Megatron itself, the hook's import of wrapt may import anything
    if top == VERL:
        read_all()  # each bad value reported here, once, not by every interpreter that starts
        install_hook()
    elif top == MEGATRON and adaptor_wanted():
        return before_megatron(name)
    return None


def stop_waiting(top: str) -> None:
    global npu_shim_waiting
    npu_shim_waiting = tuple(name for name in npu_shim_waiting if name != top)


def install_hook() -> None:
    """Register the wrapt post-import hooks (npu_shim/hook.py); a failure warns once (raises if strict)."""
    global hook_import_error
    try:
        from npu_shim.hook import register
    except Exception as error:  # a broken install (no wrapt): verl must still import, unpatched
        hook_import_error = f"{type(error).__name__}: {error}"
        if switch("NPU_SHIM_STRICT"):
            raise
        no_wrapt = getattr(error, "name", None) == "wrapt"  # not installed, as on a bare checkout route
        fix = "Install wrapt where verl runs (pip install wrapt), or set" if no_wrapt else "Set"
        warn_once(
            "hook-import",
            "npu_shim could not load its import hook (%s); verl runs unpatched. %s "
            "NPU_SHIM_DISABLE=1 to turn the shim off.",
            hook_import_error,
            fix,
        )
        return
    register()


def found(name: str) -> bool:
    """Whether top-level ``name`` is on sys.path; found, not imported (importing MindSpeed would patch)."""
    return _PathFinder.find_spec(name) is not None


def megatron_modules() -> "list[str]":  # in the order they were first imported
    return [name for name in sys.modules if name == MEGATRON or name.startswith(MEGATRON + ".")]


def adaptor_wanted() -> bool:
    """Whether npu_shim should import MegatronAdaptor before Megatron: on, installed, and not imported yet
    (MindSpeed's ``__init__`` imports it, or a user did, or it is in progress: it imports Megatron)."""
    return ADAPTOR not in sys.modules and switch(ADAPTOR_SWITCH) and found(ADAPTOR)


def before_megatron(fullname: str) -> "_ModuleSpec | None":
    """Import MegatronAdaptor before ``fullname`` (a Megatron module); a failure is reported once (strict: raised).
    Returns None (the next finder's spec) unless MegatronAdaptor imported ``fullname`` itself: then that module."""
    try:
        __import__(ADAPTOR)
    except Exception as error:  # MegatronAdaptor's own: Megatron must still import, as it would have
        if switch("NPU_SHIM_STRICT"):
            raise
        warn_once(
            "megatron-adaptor-import",
            "npu_shim imported MegatronAdaptor (module %s) before Megatron, and that "
            "failed (%s: %s); Megatron imports without it. Set %s=0 to leave it to MindSpeed.",
            ADAPTOR,
            type(error).__name__,
            error,
            ADAPTOR_SWITCH,
        )
        return None
    module = sys.modules.get(fullname)
    if module is None:
        return None
    # Python takes the spec of a module that appeared in sys.modules during the search for it from that module, and
    # loads it again: so the module carries ours until our loader gives it back its own.
    spec = _ModuleSpec(fullname, _HandBack(module))
    module.__spec__ = spec
    return spec


class _HandBack:
    """The loader of a module imported while Python looked for it: gives that module back, unchanged."""

    def __init__(self, module: ModuleType) -> None:
        self.module, self.spec = module, module.__spec__

    def create_module(self, spec: object) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set it to ours


def came_too_late() -> None:
    """npu_shim activated after Megatron was imported: one warning, where it would have imported MA first."""
    stop_waiting(MEGATRON)
    if MEGATRON in sys.modules and adaptor_wanted():
        warn_once(
            "megatron-adaptor-late",
            "MegatronAdaptor (module %s) came too late: %s was imported before "
            "npu_shim was activated, and without MegatronAdaptor first, as MindSpeed requires. Put npu_shim's "
            "bootstrap on PYTHONPATH (npu-shim runtime-env --route PYTHONPATH) to start it before anything "
            "imports Megatron.",
            ADAPTOR,
            megatron_modules()[0],
        )


def names_npu_shim(modules: "str | None") -> bool:
    """Whether a VERL_USE_EXTERNAL_MODULES value names this package as verl reads it: split on commas, not stripped."""
    return PACKAGE in (modules or "").split(",")


def route_of_this_import() -> "str | None":
    """``VERL_USE_EXTERNAL_MODULES`` (verl importing the modules it names), None for an import of one of our modules
    by its full name (reading a constant, running the doctor: the process stays as it was), else ``"import"``."""
    if VERL in sys.modules and names_npu_shim(os.environ.get(VERL_MODULES)):
        return VERL_MODULES
    frame = sys._getframe(1)
    while frame is not None:  # the import system's frames name the module being imported
        if frame.f_code.co_name == "_find_and_load" and frame.f_code.co_filename.startswith("<frozen importlib"):
            name = frame.f_locals.get("name")
            if isinstance(name, str) and name.startswith(PACKAGE + "."):
                return None
        frame = frame.f_back
    return "import"


this = sys.modules[__name__]
