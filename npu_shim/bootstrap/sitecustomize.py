"""npu_shim bootstrap for an installed shim: put this directory on PYTHONPATH to activate it everywhere.

``python -m npu_shim bootstrap-dir`` prints this directory. Every interpreter
that sees that PYTHONPATH runs this file, including other environments' and
other versions' (a system python3, a second pyenv Python). It activates the
shim only in an interpreter whose own sys.path already holds the directory
npu_shim is installed in, and adds nothing to sys.path: other interpreters
never see this environment's packages (they still get their own later
sitecustomize, if any). Python 2.7 syntax on purpose; Pythons older than 3.10
(npu_shim's minimum) only run the sitecustomize this directory hides from them
(legacy_chain.py). Standard library only until verl itself is imported; see
npu_shim/__init__.py.
"""

import os
import sys

__npu_shim_bootstrap__ = True  # tells npu_shim it is being started from here, not by `import npu_shim`


def _installed_here(package_parent):
    """Whether the directory holding this npu_shim package is on this interpreter's own sys.path."""
    if package_parent in sys.path:  # the common case: site has made sys.path entries absolute
        return True
    # Rare: the same directory under another name (a venv's lib64 -> lib symlink).
    real = os.path.realpath(package_parent)
    return any(entry and os.path.realpath(entry) == real for entry in sys.path)


def _run_shadowed_sitecustomize(here, package_parent):
    """Another environment's interpreter: run the sitecustomize this directory hides from it, if any."""
    search = [entry for entry in sys.path if entry != here]
    finder = next((f for f in sys.meta_path if getattr(f, "__name__", "") == "PathFinder"), None)
    if finder is None or finder.find_spec("sitecustomize", search) is None:
        return
    # Load npu_shim._chain by path: importing the npu_shim package here would activate the shim.
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("_npu_shim_chain", os.path.join(package_parent, "npu_shim", "_chain.py"))
    chain = module_from_spec(spec)
    spec.loader.exec_module(chain)
    chain.run_next_sitecustomize(finder, search)


def _run_legacy_chain(here):
    """An interpreter npu_shim does not serve: only the sitecustomize this directory hides from it."""
    legacy = os.path.join(here, "legacy_chain.py")
    chain = {"__name__": "_npu_shim_legacy_chain"}
    with open(legacy) as source:
        exec(compile(source.read(), legacy, "exec"), chain)
    chain["run_next_sitecustomize"]()


def _main():
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.version_info < (3, 10):
        _run_legacy_chain(here)
        return
    package_parent = os.path.dirname(os.path.dirname(here))
    if not _installed_here(package_parent):
        _run_shadowed_sitecustomize(here, package_parent)
        return
    import npu_shim

    npu_shim.run_as_sitecustomize(__file__)


_main()
