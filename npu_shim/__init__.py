"""npu_shim: what upstream verl fixed later for Ascend NPUs, on the verl you run. See README.md.

``import npu_shim`` activates the shim here and in the interpreters started afterwards;
``PYTHONPATH=$(python -m npu_shim bootstrap-dir)`` activates it in every interpreter.
"""

# Start-up is npu_shim/bootstrap/sitecustomize.py alone: it puts itself in sys.meta_path as the watcher
# (npu_shim/first_import.py), and this package is first imported when verl is (or by `import npu_shim`).
# This module keeps the process's activation state: how the shim was activated, and its watcher.
# No `from __future__ import annotations`: a process that imports this to read a constant pays for it.
import os
import sys

from npu_shim.names import VERSION, WAITING

__version__ = VERSION
__all__ = ["__version__", "activate", "activated_via"]

# npu_shim.switches.SWITCHES:
_SWITCHES = {"NPU_SHIM_DISABLE", "NPU_SHIM_STRICT", "NPU_SHIM_PROPAGATE", "NPU_SHIM_MEGATRON_ADAPTOR"}

# `importlib.reload(npu_shim)` re-runs this module in its namespace: keep what an earlier run set.
_activated_via: str | None = globals().get("_activated_via")  # how the shim was activated, or None
_watcher = globals().get("_watcher")  # our finder in sys.meta_path, once active


def activate(via: str = "import") -> bool:
    """Activate the shim in this process, once however often called; False when NPU_SHIM_DISABLE is set.

    Safe before or after verl is imported: if verl is already loaded the hook is registered now
    (and fires at once when ``verl.workers.engine`` is there too). After Megatron was imported it is too late
    to import MegatronAdaptor before it: one warning says so, where that is installed and not imported.
    """
    global _activated_via, _watcher
    if os.environ.keys() & _SWITCHES:
        from npu_shim.switches import read_all

        if read_all()["NPU_SHIM_DISABLE"]:  # every bad value is reported too
            return False
    if _activated_via is None:
        _activated_via = via
        if _watcher is None:
            import npu_shim.first_import as _watcher  # the module is the watcher

        if _watcher not in sys.meta_path:
            sys.meta_path.insert(0, _watcher)
        if "verl" in sys.modules:
            _watcher.find_spec("verl")
        if "megatron" in sys.modules and "megatron" in _watcher.npu_shim_waiting:  # too late for MegatronAdaptor
            from npu_shim.first_import import stop_waiting
            from npu_shim.megatron_first import came_too_late

            stop_waiting(vars(_watcher), "megatron")
            came_too_late()
    return True


def activated_via() -> str | None:
    """How the shim was activated, or None: ``"sitecustomize"``, ``"VERL_USE_EXTERNAL_MODULES"``, ``"verl.plugins"``
    (verl >= 0.9.0 loaded the installed shim's entry point) or ``"import"``."""
    return _activated_via


if _activated_via is None:
    _started = next((finder for finder in sys.meta_path if hasattr(finder, WAITING)), None)
    if _started is not None:  # npu_shim's sitecustomize activated this process without importing npu_shim
        _activated_via, _watcher = "sitecustomize", _started
    elif not hasattr(sys.modules.get("sitecustomize"), WAITING):  # (whose start-up imports us to read switches)
        from npu_shim.import_route import on_import

        on_import(activate)
