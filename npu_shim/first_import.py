"""What npu_shim's watcher starts at the first import of verl, and at the first import of Megatron.

The watcher is a finder first in ``sys.meta_path`` that waits for the top-level names in its ``npu_shim_waiting``.
Where npu_shim's sitecustomize started the process, the watcher is that module itself
(npu_shim/bootstrap/sitecustomize.py): every interpreter that starts with npu_shim's bootstrap compiles that file,
and where no bytecode can be cached it does so at every start, so it holds one function and one test and defines
no class (a class costs a second code object to compile, docs/costs.md). Where ``import npu_shim`` or verl's
``VERL_USE_EXTERNAL_MODULES`` activated it, the watcher is this module, the same two names below.

This module is imported at the first of those two imports, never at start-up. verl's registers npu_shim's hook
(npu_shim/hook.py); Megatron's imports MegatronAdaptor before it where that is installed
(npu_shim/megatron_first.py), and is otherwise let by. Standard library only until then: a process that imports
Megatron without MegatronAdaptor installed loads this module, the package's ``__init__`` and
``npu_shim.names``, nothing else of npu_shim.

Start-up reads one switch, NPU_SHIM_DISABLE (a process where it is set goes to npu_shim.activate, which reads
them all). The others are read where they act; verl's first import reads them all, so that a bad value is
reported there, once, and not by every interpreter that starts.
"""

import os
import sys

from npu_shim.names import WAITING  # the watcher's global: the top-level names it still waits for

VERL = "verl"
MEGATRON = "megatron"
ADAPTOR = "megatron_adaptor"
SWITCH_PREFIX = "NPU_SHIM_"

# This module as the watcher of a process npu_shim's sitecustomize did not start (npu_shim.activate):
npu_shim_waiting = (VERL, MEGATRON)
hook_import_error = None  # why npu_shim.hook did not import, for the doctor


def find_spec(name: str, path: object = None, target: object = None) -> "ModuleSpec | None":  # noqa: F821
    if name.partition(".")[0] in npu_shim_waiting:
        return first_import(globals(), name)
    return None


def first_import(watcher: dict[str, object], fullname: str) -> "ModuleSpec | None":  # noqa: F821
    """``fullname``'s top-level name is one the watcher (``watcher``: its namespace) waits for: start what it
    starts, once.

    Returns the spec Python should load ``fullname`` from: None (the next finder's), unless MegatronAdaptor
    imported that Megatron module itself (npu_shim.megatron_first.before_megatron).
    """
    top = fullname.partition(".")[0]
    # out first: MegatronAdaptor imports Megatron itself, the hook's import of wrapt may import anything
    stop_waiting(watcher, top)
    if top == VERL:
        if any(name.startswith(SWITCH_PREFIX) for name in os.environ):
            from npu_shim.switches import read_all

            read_all()  # reports each bad value, once
        install_hook()
    elif top == MEGATRON and ADAPTOR not in sys.modules and _found(ADAPTOR):
        from npu_shim.megatron_first import before_megatron

        return before_megatron(fullname)
    return None


def install_hook() -> None:
    """Register the wrapt post-import hooks (npu_shim/hook.py); a failure warns once (raises if strict)."""
    global hook_import_error
    try:
        from npu_shim.hook import register
    except Exception as error:  # a broken install (no wrapt): verl must still import, unpatched
        hook_import_error = f"{type(error).__name__}: {error}"
        from npu_shim.switches import hook_unavailable

        if hook_unavailable(error):
            raise
        return
    register()


def stop_waiting(watcher: dict[str, object], top: str) -> None:
    """The watcher (``watcher``: its namespace) no longer waits for ``top``: its first import came, or came before
    npu_shim was activated."""
    watcher[WAITING] = tuple(name for name in watcher[WAITING] if name != top)


def _found(name: str) -> bool:
    # the path finder's own lookup: importlib.util is not loaded in every process that imports Megatron
    return sys.modules["_frozen_importlib_external"].PathFinder.find_spec(name) is not None
