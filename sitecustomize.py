"""npu_shim bootstrap for a checkout: ``PYTHONPATH=<this directory>`` activates the shim in every interpreter.

Python 2.7 syntax on purpose: every interpreter that sees this PYTHONPATH runs
this file, and npu_shim itself needs Python 3.10; older ones only run the
sitecustomize this file hides from them (npu_shim/bootstrap/legacy_chain.py).
Standard library only until verl itself is imported; see npu_shim/__init__.py.
"""

import os
import sys

__npu_shim_bootstrap__ = True  # tells npu_shim it is being started from here, not by `import npu_shim`

if sys.version_info >= (3, 10):
    import npu_shim

    npu_shim.run_as_sitecustomize(__file__)
else:  # an interpreter npu_shim does not serve: only the sitecustomize this file hides from it
    _legacy = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npu_shim", "bootstrap", "legacy_chain.py")
    _chain = {"__name__": "_npu_shim_legacy_chain"}
    with open(_legacy) as source:
        exec(compile(source.read(), _legacy, "exec"), _chain)
    _chain["run_next_sitecustomize"]()
