"""``import npu_shim`` from anywhere but npu_shim's own sitecustomize: which route is this?

- verl importing the modules ``VERL_USE_EXTERNAL_MODULES`` names (every verl from 0.6.0):
  activate, and let children inherit the variable: no PYTHONPATH to add, so interpreters
  that never import verl (Ray's helpers, pip) pay nothing;
- an import of one of our modules by its full name (``from npu_shim.doctor import ...``):
  Python imports the package first, but reading constants or running the doctor
  must leave the process as it was;
- anything else is the ``import npu_shim`` route: activate here and in later children.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from npu_shim.names import PACKAGE, VERL_MODULES


def names_npu_shim(modules: str | None) -> bool:
    """Whether a VERL_USE_EXTERNAL_MODULES value names this package as verl reads it: split on commas, not stripped."""
    return PACKAGE in (modules or "").split(",")


def imported_by_verl() -> bool:
    return "verl" in sys.modules and names_npu_shim(os.environ.get(VERL_MODULES))


def imported_for_a_module_of_ours() -> bool:
    """Whether the import in progress is of one of our modules by its full name; the import system's frames tell."""
    prefix = PACKAGE + "."
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_find_and_load" and frame.f_code.co_filename.startswith("<frozen importlib"):
            name = frame.f_locals.get("name")
            if isinstance(name, str) and name.startswith(prefix):
                return True
        frame = frame.f_back
    return False


def on_import(activate: Callable[[str], bool]) -> None:
    """The package is being imported (``activate``: its own, passed in, so that this module never imports it)."""
    if imported_by_verl():
        activate(VERL_MODULES)
    elif imported_for_a_module_of_ours():
        pass  # `import npu_shim` (or `npu_shim.activate()`) is the route; a module of ours is not
    elif activate("import"):
        from npu_shim.propagation import propagate

        propagate()
