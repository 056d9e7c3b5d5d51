"""A child of tests/conformance: the kit's torch_npu in the mode ``NPU_SHIM_SIM_COMPUTE`` sets, as one JSON line.

``modules``: each module of the kit's torch_npu and the public names it holds (its own: not the modules and typing
objects its source imports); ``resolved``: of the dotted names given as arguments, those the kit has as attributes or
modules (not those its ``__getattr__`` makes up); ``invented``: whether it answers for an op no torch_npu has.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types
from typing import Any

import torch
import torch_npu

MODULES = ["torch_npu", "torch_npu.npu", "torch_npu.contrib"]
if torch_npu._compute.enabled():
    MODULES.append("torch_npu.contrib.transfer_to_npu")  # it refuses to import in the default mode


def own(value: Any) -> bool:
    """Not what the module's source imports: other packages' modules, classes, functions and typing's forms."""
    if isinstance(value, types.ModuleType):
        return value.__name__.startswith("torch_npu")
    module = getattr(value, "__module__", None)
    if isinstance(value, type) or inspect.isroutine(value):
        return module is None or module.startswith("torch_npu")
    return module not in ("typing", "__future__")


def public(module: types.ModuleType) -> list[str]:
    return sorted(name for name, value in vars(module).items() if not name.startswith("_") and own(value))


def resolved(dotted: str) -> bool:
    head, *rest = dotted.split(".")
    value: Any = torch if head == "torch" else torch_npu
    path = head
    for part in rest:
        path = f"{path}.{part}"
        if isinstance(value, types.ModuleType) and part not in vars(value):
            try:
                value = importlib.import_module(path)
                continue
            except ImportError:
                return False
        if isinstance(value, types.ModuleType):
            value = vars(value)[part]
        elif hasattr(value, part):
            value = getattr(value, part)
        else:
            return False
    return True


modules = {name: public(importlib.import_module(name)) for name in MODULES}
print(
    json.dumps(
        {
            "modules": modules,
            "resolved": sorted(name for name in sys.argv[1:] if resolved(name)),
            "invented": hasattr(torch_npu, "npu_no_such_op_in_any_torch_npu"),
        }
    )
)
