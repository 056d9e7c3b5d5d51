"""npu_shim's start-up: the sitecustomize.py of every interpreter with npu_shim's directory on PYTHONPATH.

That directory is a checkout (whose sitecustomize.py links here) or an installed shim's
npu_shim/bootstrap. Every interpreter that sees it runs this, other versions' (2.7 included)
and environments' too: so 2.7 syntax, standard library only, and little code, since an
interpreter that cannot cache bytecode compiles all of it at each start (importing the npu_shim
package here would double that). Where npu_shim serves (3.10+, npu_shim on its sys.path) this
puts a finder first in sys.meta_path that registers npu_shim's hook when verl is first imported.
What is rarely needed is in chain.py, run only then.
"""

import os
import sys

__npu_shim_bootstrap__ = True  # tells npu_shim that it was started from here


class VerlImportWatcher(object):
    """Finds nothing: the first import of verl registers npu_shim's hook. It stays in sys.meta_path."""

    fired = False

    def find_spec(self, fullname, path=None, target=None):
        if not self.fired and (fullname == "verl" or fullname.startswith("verl.")):
            self.fired = True
            from npu_shim import install_hook

            install_hook()


def _start(here):
    checkout = os.path.isdir(os.path.join(here, "npu_shim"))
    package = os.path.join(here, "npu_shim") if checkout else os.path.dirname(here)
    site_dir = os.path.dirname(package)
    served = sys.version_info >= (3, 10) and (
        checkout or site_dir in sys.path or os.path.realpath(site_dir) in map(os.path.realpath, sys.path)
    )  # the realpaths: a venv's lib64 is its lib
    if served:
        if "NPU_SHIM_DISABLE" in os.environ or "NPU_SHIM_STRICT" in os.environ or "NPU_SHIM_PROPAGATE" in os.environ:
            __import__("npu_shim").activate("sitecustomize")  # reads the switches, reports a bad value
        else:  # npu_shim finds it there (a later sitecustomize takes this module's place in sys.modules)
            sys.meta_path.insert(0, VerlImportWatcher())
    # chain.py: a sitecustomize this one hides (Python 2 has no PathFinder to ask), or bytecode this
    # interpreter wrote of an installed bootstrap that pip uninstall would leave: pip removes only
    # its own interpreter's, which compiled npu_shim/__init__ at install or when it ran.
    cached = None if served or checkout else globals().get("__cached__")
    owners = cached and cached.replace("bootstrap/__pycache__/sitecustomize.", "__pycache__/__init__.")
    stray = cached and os.path.isfile(cached) and not os.path.exists(owners)
    finders = [finder for finder in sys.meta_path if getattr(finder, "__name__", "") == "PathFinder"]
    later = [entry for entry in sys.path if entry != here]
    if stray or not finders or finders[0].find_spec("sitecustomize", later):
        path = os.path.join(package, "bootstrap", "chain.py")
        chain = {"__name__": "_npu_shim_chain"}
        with open(path) as source:
            exec(compile(source.read(), path, "exec"), chain)
        chain["after_npu_shim"](cached if stray else None)


if __name__ == "sitecustomize":  # not when npu_shim imports this file for VerlImportWatcher
    _start(os.path.dirname(os.path.abspath(__file__)))
