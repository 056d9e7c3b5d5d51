"""npu_shim bootstrap for a checkout: ``PYTHONPATH=<this directory>`` activates the shim in every interpreter.

Standard library only until verl itself is imported; see npu_shim/__init__.py.
"""

__npu_shim_bootstrap__ = True  # tells npu_shim it is being started from here, not by `import npu_shim`

import npu_shim

npu_shim.run_as_sitecustomize(__file__)
