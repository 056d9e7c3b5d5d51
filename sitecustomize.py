"""npu_shim bootstrap for a checkout: ``PYTHONPATH=<this directory>`` activates the shim in every interpreter.

Standard library only until verl itself is imported; see npu_shim/_startup.py.
"""

__npu_shim_bootstrap__ = True  # tells npu_shim it is being started from here, not by `import npu_shim`

from npu_shim._startup import run_as_sitecustomize

run_as_sitecustomize(__file__)
