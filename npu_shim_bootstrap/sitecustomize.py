"""npu_shim's start-up (__npu_shim_bootstrap__): waits first in sys.meta_path for verl or Megatron, then hands over
to npu_shim.watcher. Short: without cached bytecode each start compiles it (docs/costs.md, docs/design.md)."""

import os
import sys

npu_shim_waiting = ("verl", "megatron")


def find_spec(name, *_):
    if name.partition(".")[0] in npu_shim_waiting:
        return __import__("npu_shim.watcher").watcher.find_spec(name)


if __name__ == "sitecustomize":
    here = os.path.dirname(__file__)
    if (
        sys.version_info >= (3, 10)
        and (os.path.dirname(here) in sys.path or os.path.isdir(here + "/npu_shim"))
        and "NPU_SHIM_DISABLE" not in os.environ
        and here in sys.path
        and not any(os.path.exists(entry + "/sitecustomize.py") for entry in sys.path[sys.path.index(here) + 1 :])
    ):
        sys.meta_path.insert(0, sys.modules[__name__])
    else:
        __import__("_npu_shim_chain").start(sys.modules[__name__])
