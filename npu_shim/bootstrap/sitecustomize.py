"""npu_shim's start-up: the sitecustomize.py of every interpreter with npu_shim's directory on PYTHONPATH.

That directory is a checkout (whose sitecustomize.py links here) or an installed shim's npu_shim/bootstrap.
Every interpreter that sees it runs this, other versions' (2.7 included) and environments' too: so 2.7 syntax,
standard library only, and as little code as will do, since an interpreter that cannot cache bytecode compiles
all of it at each start, and compiling costs by the expression, not by the line (docs/costs.md measures it:
comments and docstrings cost almost nothing).

In the common case, where npu_shim serves this interpreter (3.10+, npu_shim importable from the directory beside
this one or its parent's parent), none of npu_shim's switches is set and no later sitecustomize is hidden by
this one, it puts a finder first in sys.meta_path that waits for the first import of verl and of Megatron
(npu_shim/first_import.py does what follows them). Every other case is _npu_shim_chain.py's, beside this file.
"""

import os
import sys

__npu_shim_bootstrap__ = True  # tells npu_shim, and _npu_shim_chain, that this file is npu_shim's
SWITCHES = {"NPU_SHIM_DISABLE", "NPU_SHIM_STRICT", "NPU_SHIM_PROPAGATE", "NPU_SHIM_MEGATRON_ADAPTOR"}


class VerlImportWatcher(object):
    """Looks at the top-level name of every import, and stays in sys.meta_path; the rest is first_import's."""

    waiting = ("verl", "megatron")  # first_import takes each name out as it comes

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.waiting:
            from npu_shim.first_import import first_import

            return first_import(self, name)


if __name__ == "sitecustomize":  # not where npu_shim imports this file for VerlImportWatcher
    # __file__ is absolute on 3.10+ (the 19 characters: "/npu_shim/bootstrap"); an unusual spelling of a path
    # falls to _npu_shim_chain, which decides as this does with realpaths.
    here = os.path.dirname(__file__)
    if (
        sys.version_info >= (3, 10)
        and (here[:-19] in sys.path or os.path.isdir(here + "/npu_shim"))
        and SWITCHES.isdisjoint(os.environ)
        and here in sys.path
        and not sys.modules["_frozen_importlib_external"].PathFinder.find_spec(
            "sitecustomize", sys.path[sys.path.index(here) + 1 :]
        )
    ):
        sys.meta_path.insert(0, VerlImportWatcher())
    else:
        import _npu_shim_chain  # beside this file (a checkout links it too)

        del sys.modules["_npu_shim_chain"]
        _npu_shim_chain.start(globals())
