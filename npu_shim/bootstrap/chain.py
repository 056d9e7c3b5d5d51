"""What npu_shim's start-up rarely needs: a sitecustomize it hides, and bytecode it must not leave (2.7 syntax).

Python's ``site`` imports the first ``sitecustomize`` on ``sys.path`` and stops, so npu_shim's
would hide one later on the path (a container's own, say OpenTelemetry's launcher, or an old
Python's in its site-packages). This runs it after npu_shim's, as ``site`` would have, an error
in it reported the same way: in every interpreter, served by npu_shim or not.

An interpreter npu_shim does not serve (another environment's or version's) also writes the
bytecode of an installed shim's bootstrap, and ``pip uninstall npu-shim`` removes only its own
interpreter's: a directory left behind would make ``import npu_shim`` succeed as an empty
namespace package. This removes such bytecode.

npu_shim's sitecustomize runs this with ``exec`` (importing it would write bytecode too), and
only when one of the two is needed.
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
    finders = [f for f in sys.meta_path if getattr(f, "__name__", "") == "PathFinder"]  # its caches are warm
    spec = finders[0].find_spec("sitecustomize", [entry]) if finders else None
    if spec is None or spec.loader is None or (spec.origin and _is_ours(spec.origin)):
        return False
    from importlib.util import module_from_spec

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


def after_npu_shim(stray_bytecode=None):
    """Remove ``stray_bytecode`` (and its directory, if that empties), then run the sitecustomize ours hides."""
    if stray_bytecode:
        for remove, path in ((os.remove, stray_bytecode), (os.rmdir, os.path.dirname(stray_bytecode))):
            try:
                remove(path)
            except OSError:  # not written (read-only, PYTHONDONTWRITEBYTECODE), or the directory is not empty
                break
    run_next_sitecustomize()
