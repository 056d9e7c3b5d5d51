"""A child of tests/kit/test_torch_version.py: ``import torch`` with the simulated torch_npu autoloaded in compute mode,
where the kit supports only torch 0.1 (its ``SUPPORTED`` set so before torch loads it): a torch it is not tested on.

torch loads the stand-in through its ``torch.backends`` entry point; the test reads what this process prints last.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

NAME = "torch_npu._torch_version"
home = Path(next(iter(importlib.util.find_spec("torch_npu").submodule_search_locations)))  # torch_npu not imported
spec = importlib.util.spec_from_file_location(NAME, home / "_torch_version.py")
version_gate = sys.modules[NAME] = importlib.util.module_from_spec(spec)  # the stand-in's own import finds it here
spec.loader.exec_module(version_gate)
version_gate.SUPPORTED = ((0, 1),)

import torch  # noqa: E402, F401

print("torch imported")  # not reached: the kit refuses
