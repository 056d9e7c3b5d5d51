"""npu_shim bootstrap for an installed shim: put this directory on PYTHONPATH to activate it everywhere.

``python -m npu_shim bootstrap-dir`` prints this directory. Standard library
only until verl itself is imported; see npu_shim/_startup.py.
"""

__npu_shim_bootstrap__ = True  # tells npu_shim it is being started from here, not by `import npu_shim`

try:
    from npu_shim._startup import run_as_sitecustomize
except ImportError:  # propagated from a checkout that is not installed: the package sits two levels up
    import os
    import sys

    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from npu_shim._startup import run_as_sitecustomize

run_as_sitecustomize(__file__)
