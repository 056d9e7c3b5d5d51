"""What npu_shim's start-up rarely needs (2.7 syntax): every case but the common one (docs/design.md), decided with
realpaths (a venv's lib64 is its lib), and the later ``sitecustomize`` ours hides from ``site`` (a container's own,
OpenTelemetry's launcher), run after ours as ``site`` would have run it, an error in it reported the same way.
"""

import os
import sys

MARKER = "__npu_shim_bootstrap__"  # what npu_shim's own sitecustomize files hold
DISABLE = "NPU_SHIM_DISABLE"  # the one switch start-up reads: the others are read where they act


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
        source, path, description = imp.find_module("sitecustomize", [entry])
    except ImportError:
        return False
    try:
        if _is_ours(os.path.join(path, "__init__.py") if os.path.isdir(path) else path):
            return False
        try:
            imp.load_module("sitecustomize", source, path, description)
        except ImportError:  # 2.7's site swallows any ImportError of sitecustomize, silently
            pass
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
        # 3.x's site takes an ImportError of that name for "no sitecustomize", and says nothing
        if not (isinstance(error, ImportError) and error.name == "sitecustomize"):
            _report(error)
    return True


def start(bootstrap):
    """npu_shim's start-up where its sitecustomize (``bootstrap``: that module) did not decide it."""
    here = os.path.dirname(os.path.abspath(bootstrap.__file__))
    checkout = os.path.isdir(os.path.join(here, "npu_shim"))
    site_dir = here if checkout else os.path.dirname(here)
    served = sys.version_info >= (3, 10) and (
        checkout or site_dir in sys.path or os.path.realpath(site_dir) in map(os.path.realpath, sys.path)
    )
    if served:
        if DISABLE in os.environ:
            __import__("npu_shim").activate("sitecustomize")  # reads the switches, reports a bad value
        else:  # the bootstrap module is the watcher (a later sitecustomize takes its place in sys.modules)
            sys.meta_path.insert(0, bootstrap)
    run = _run_python2 if sys.version_info[0] < 3 else _run_python3
    for entry in list(sys.path):  # the first sitecustomize on sys.path that is not npu_shim's, if there is one
        if run(entry or os.curdir):
            break
    # start-up's helper, not a module of the process; last, since Python 2 empties a module's globals when the
    # module goes
    sys.modules.pop(__name__, None)
