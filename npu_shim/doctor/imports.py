"""An import the probe makes itself, to say what a guarded import (verl's, Megatron's) hid."""

from __future__ import annotations

import contextlib
import importlib
import sys
from types import ModuleType
from typing import Any


def import_or_failure(module: str) -> tuple[ModuleType | None, dict[str, Any] | None]:
    """``module`` imported here, or how that failed: ``{"module", "error": "Type: message", "missing"}``, where
    ``missing`` is the ``name`` of a ``ModuleNotFoundError`` (the module that is not installed), else None."""
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the report
            return importlib.import_module(module), None
    except Exception as error:
        missing = error.name if isinstance(error, ModuleNotFoundError) else None
        return None, {"module": module, "error": f"{type(error).__name__}: {error}", "missing": missing}
