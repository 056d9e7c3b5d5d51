"""npu_shim bootstrap for a checkout: ``PYTHONPATH=<this directory>`` activates the shim in every interpreter.

Python 2.7 syntax on purpose: every interpreter that sees this PYTHONPATH runs
this file, and npu_shim itself needs Python 3.10; older ones skip it silently.
Standard library only until verl itself is imported; see npu_shim/__init__.py.
"""

import sys

__npu_shim_bootstrap__ = True  # tells npu_shim it is being started from here, not by `import npu_shim`

if sys.version_info >= (3, 10):
    import npu_shim

    npu_shim.run_as_sitecustomize(__file__)
