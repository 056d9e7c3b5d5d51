"""An import the probe makes itself, to say what a guarded import (verl's, Megatron's) hid."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from types import ModuleType

from npu_shim.doctor.report import ImportFailure


def import_or_failure(module: str) -> tuple[ModuleType | None, ImportFailure | None]:
    """``module`` imported here, or how that failed."""
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the report
            return importlib.import_module(module), None
    except Exception as error:
        missing = error.name if isinstance(error, ModuleNotFoundError) else None
        return None, ImportFailure(module, f"{type(error).__name__}: {error}", missing)


def package_folder(package: ModuleType | None) -> str | None:
    """The folder an imported package came from (which verl or MindSpeed of several on the path this is); None where
    it is not imported or has no file (a namespace package)."""
    file = getattr(package, "__file__", None)
    return os.path.dirname(os.path.abspath(file)) if file else None


def found(name: str) -> bool:
    """Whether ``name`` is found here; found, not imported (importing MindSpeed or Megatron to ask would patch them)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that raises, a parent that fails to import, a spec-less module
        return False
