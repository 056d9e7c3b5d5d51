"""Pythons npu_shim does not serve (2.7, 3.6-3.9): start exactly as if npu_shim's sitecustomize were not there.

Python's ``site`` imports the first ``sitecustomize`` on ``sys.path`` and stops, so npu_shim's
would hide the one such an interpreter has later on its path (its own site-packages', or one
later on PYTHONPATH). This finds that one, past every copy of npu_shim's, and runs it as
``site`` would, reporting an error in it the same way. Python 2.7 syntax; the bootstrap files
run it with ``exec`` (no import: it must not make npu_shim importable here).
"""

import os
import sys

MARKER = "__npu_shim_bootstrap__"  # what npu_shim's own sitecustomize files hold


def _is_ours(path):
    try:
        with open(path, "rb") as source:
            return MARKER.encode("ascii") in source.read(4096)
    except (IOError, OSError):
        return False


def _report(error):
    """As the interpreter's own site.execsitecustomize reports an exception in sitecustomize."""
    if sys.flags.verbose:
        sys.excepthook(*sys.exc_info())
    elif sys.version_info[0] < 3:
        sys.stderr.write("'import sitecustomize' failed; use -v for traceback\n")
    else:
        sys.stderr.write(
            "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n" % (type(error).__name__, error)
        )


def _run_python2(entry):
    import imp

    try:
        found = imp.find_module("sitecustomize", [entry])
    except ImportError:
        return False
    source, path, description = found
    try:
        if _is_ours(os.path.join(path, "__init__.py") if os.path.isdir(path) else path):
            return False
        try:
            imp.load_module("sitecustomize", source, path, description)
        except Exception as error:
            _report(error)
        return True
    finally:
        if source is not None:
            source.close()


def _run_python3(entry):
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    spec = PathFinder.find_spec("sitecustomize", [entry])
    if spec is None or spec.loader is None or (spec.origin and _is_ours(spec.origin)):
        return False
    module = module_from_spec(spec)
    shims = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        sys.modules["sitecustomize"] = shims
        _report(error)
    return True


def run_next_sitecustomize():
    """Run the first sitecustomize on sys.path that is not npu_shim's, if there is one."""
    run = _run_python2 if sys.version_info[0] < 3 else _run_python3
    for entry in list(sys.path):
        if run(entry or os.curdir):
            return
