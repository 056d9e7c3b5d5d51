"""npu_shim bootstrap for an installed shim: put this directory on PYTHONPATH to activate it everywhere.

``python -m npu_shim bootstrap-dir`` prints this directory. Standard library
only until verl itself is imported; see npu_shim/__init__.py.
"""

__npu_shim_bootstrap__ = True  # tells npu_shim it is being started from here, not by `import npu_shim`

import os
import sys

# The directory that holds the npu_shim package: site-packages when installed (already
# on sys.path), the checkout when propagated from one that is not installed.
_package_parent = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
_appended = () if _package_parent in sys.path else (_package_parent,)
sys.path.extend(_appended)

import npu_shim  # noqa: E402

npu_shim.run_as_sitecustomize(__file__, *_appended)  # a checkout's own sitecustomize there is ours too
