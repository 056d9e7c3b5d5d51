"""Whether a module is found here, without importing it: importing MindSpeed or Megatron to ask would patch them."""

from __future__ import annotations

import importlib.util


def found(name: str) -> bool:
    """Whether ``name`` (top-level, or a submodule of an importable package) is found here; found, not imported."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that raises, a parent that fails to import, a spec-less module
        return False
