"""npu_shim's start-up (__npu_shim_bootstrap__), run by every interpreter with npu_shim's directory on PYTHONPATH.

Short on purpose: where no bytecode is cached, each interpreter compiles it at each start (docs/costs.md).
npu_shim/first_import.py explains it; _npu_shim_chain.py, beside it, decides every case but the common one.
"""

import os
import sys

npu_shim_waiting = ("verl", "megatron")


def find_spec(name, *_):
    if name.partition(".")[0] in npu_shim_waiting:
        return __import__("npu_shim.first_import").first_import.first_import(globals(), name)


if __name__ == "sitecustomize":
    here = __file__[:-17]
    if (
        sys.version_info >= (3, 10)
        and (here[:-19] in sys.path or os.path.isdir(here + "/npu_shim"))
        and "NPU_SHIM_DISABLE" not in os.environ
        and here in sys.path
        and not any(os.path.exists(entry + "/sitecustomize.py") for entry in sys.path[sys.path.index(here) + 1 :])
    ):
        sys.meta_path.insert(0, sys.modules[__name__])
    else:
        __import__("_npu_shim_chain").start(sys.modules[__name__])
