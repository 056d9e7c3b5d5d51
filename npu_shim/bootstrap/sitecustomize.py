"""npu_shim's start-up: the sitecustomize.py of every interpreter with npu_shim's directory on PYTHONPATH.

That directory is a checkout (whose sitecustomize.py links here) or an installed shim's
npu_shim/bootstrap. Every interpreter that sees it runs this, other versions' (2.7 included)
and environments' too: so 2.7 syntax, standard library only, and little code, since an
interpreter that cannot cache bytecode compiles all of it at each start (importing the npu_shim
package here would double that). Where npu_shim serves (3.10+, npu_shim on its sys.path) this
puts a finder first in sys.meta_path that registers npu_shim's hook when verl is first imported, and
imports MegatronAdaptor when Megatron first is, before it (npu_shim/megatron_first.py).
The rest, rarely needed, is _npu_shim_chain.py's (other interpreters always need it).
"""

import os
import sys

__npu_shim_bootstrap__ = True  # tells npu_shim that it was started from here


class VerlImportWatcher(object):
    """Looks at a top-level name: the first import of verl registers npu_shim's hook, the first of megatron
    imports MegatronAdaptor before it where that is installed. It stays in sys.meta_path."""

    fired = False  # verl's
    megatron_fired = False

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top == "verl" and not self.fired:
            self.fired = True
            from npu_shim import install_hook

            install_hook()
        elif top == "megatron" and not self.megatron_fired:
            self.megatron_fired = True  # first: MegatronAdaptor may import Megatron itself
            # npu_shim is imported only where MegatronAdaptor is installed: elsewhere Megatron imports as before
            if "megatron_adaptor" not in sys.modules and sys.modules["_frozen_importlib_external"].PathFinder.find_spec(
                "megatron_adaptor"
            ):
                from npu_shim.megatron_first import before_megatron

                return before_megatron(fullname)  # None, unless MegatronAdaptor imported that module already


def _start(here):
    checkout = os.path.isdir(os.path.join(here, "npu_shim"))
    site_dir = here if checkout else os.path.dirname(os.path.dirname(here))
    served = sys.version_info >= (3, 10) and (
        checkout or site_dir in sys.path or os.path.realpath(site_dir) in map(os.path.realpath, sys.path)
    )  # the realpaths: a venv's lib64 is its lib
    if served:
        if (
            "NPU_SHIM_DISABLE" in os.environ
            or "NPU_SHIM_STRICT" in os.environ
            or "NPU_SHIM_PROPAGATE" in os.environ
            or "NPU_SHIM_MEGATRON_ADAPTOR" in os.environ
        ):
            __import__("npu_shim").activate("sitecustomize")  # reads the switches, reports a bad value
        else:  # npu_shim finds it there (a later sitecustomize takes this module's place in sys.modules)
            sys.meta_path.insert(0, VerlImportWatcher())
        # Done, unless a sitecustomize this one hides comes later on sys.path (none can come before).
        later = sys.path[sys.path.index(here) + 1 :] if here in sys.path else sys.path
        if not sys.modules["_frozen_importlib_external"].PathFinder.find_spec("sitecustomize", later):
            return
    import _npu_shim_chain  # beside this file (a checkout links it too): the rare work

    del sys.modules["_npu_shim_chain"]
    _npu_shim_chain.after_npu_shim(globals(), served)


if __name__ == "sitecustomize":  # not when npu_shim imports this file for VerlImportWatcher
    _start(os.path.dirname(os.path.abspath(__file__)))
