"""What npu_shim's watcher starts at the first import of verl, and at the first import of Megatron.

The watcher (``VerlImportWatcher``, npu_shim/bootstrap/sitecustomize.py) is compiled by every interpreter that
starts with npu_shim's bootstrap, so it only waits; this module is imported at the first of those two imports,
never at start-up. verl's registers npu_shim's hook (npu_shim/hook.py); Megatron's imports MegatronAdaptor before
it where that is installed (npu_shim/megatron_first.py), and is otherwise let by. Standard library only until
then: a process that imports Megatron without MegatronAdaptor installed loads this module and the package's
``__init__``, nothing else of npu_shim.
"""

import sys

VERL = "verl"
MEGATRON = "megatron"
ADAPTOR = "megatron_adaptor"


def first_import(watcher: "VerlImportWatcher", fullname: str) -> "ModuleSpec | None":  # noqa: F821
    """``fullname``'s top-level name is one ``watcher`` waits for: start what it starts, once.

    Returns the spec Python should load ``fullname`` from: None (the next finder's), unless MegatronAdaptor
    imported that Megatron module itself (npu_shim.megatron_first.before_megatron).
    """
    top = fullname.partition(".")[0]
    # out first: MegatronAdaptor imports Megatron itself, the hook's import of wrapt may import anything
    stop_waiting(watcher, top)
    if top == VERL:
        from npu_shim import install_hook

        install_hook()
    elif top == MEGATRON and ADAPTOR not in sys.modules and _found(ADAPTOR):
        from npu_shim.megatron_first import before_megatron

        return before_megatron(fullname)
    return None


def stop_waiting(watcher: "VerlImportWatcher", top: str) -> None:  # noqa: F821
    """``watcher`` no longer waits for ``top``: its first import came, or came before npu_shim was activated."""
    watcher.waiting = tuple(name for name in watcher.waiting if name != top)


def _found(name: str) -> bool:
    # the path finder's own lookup: importlib.util is not loaded in every process that imports Megatron
    return sys.modules["_frozen_importlib_external"].PathFinder.find_spec(name) is not None
