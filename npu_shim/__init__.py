"""npu_shim: what upstream verl fixed later for Ascend NPUs, on the verl you run. See README.md.

``import npu_shim`` activates the shim here and in the interpreters started afterwards;
``PYTHONPATH=$(python -m npu_shim bootstrap-dir)`` activates it in every interpreter.
"""

# The process's activation state. No `from __future__ import annotations`: importing it to read a constant pays for it.
import os
import sys

from npu_shim.settings import SWITCHES, VERSION, WAITING, read_all

__version__ = VERSION
__all__ = ["__version__", "activate", "activated_via"]

# `importlib.reload(npu_shim)` re-runs this module in its namespace: keep what an earlier run set.
_activated_via: "str | None" = globals().get("_activated_via")


def activate(via: str = "import") -> bool:
    """Activate the shim in this process, once however often called, before or after verl is imported; False when
    NPU_SHIM_DISABLE is set. After Megatron was imported, one warning says MegatronAdaptor came too late."""
    global _activated_via
    if os.environ.keys() & SWITCHES.keys() and read_all()["NPU_SHIM_DISABLE"]:  # every bad value is reported too
        return False
    if _activated_via is None:
        _activated_via = via
        from npu_shim import watcher

        watcher.take_over()
        if "verl" in sys.modules:
            watcher.find_spec("verl")
        if "megatron" in sys.modules and "megatron" in watcher.npu_shim_waiting:
            watcher.came_too_late()
    return True


def activated_via() -> "str | None":
    """How the shim was activated ("sitecustomize", "VERL_USE_EXTERNAL_MODULES", "verl.plugins", "import"), or None."""
    return _activated_via


if _activated_via is None:
    if any(hasattr(finder, WAITING) for finder in sys.meta_path):  # npu_shim's sitecustomize started this process
        _activated_via = "sitecustomize"
    elif not hasattr(sys.modules.get("sitecustomize"), WAITING):  # (whose start-up imports us to read switches)
        from npu_shim.watcher import route_of_this_import

        _route = route_of_this_import()
        if _route is not None and activate(_route) and _route == "import":
            from npu_shim.propagation import propagate

            propagate()
