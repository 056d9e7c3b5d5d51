"""What npu_shim's start-up rarely needs (2.7 syntax): every case but the common one, a sitecustomize it hides,
bytecode it must not leave.

npu_shim's sitecustomize decides the common case itself, with as little code as will do (an interpreter that
cannot cache bytecode compiles it at each start): npu_shim serves the interpreter, NPU_SHIM_DISABLE is not set (the
other switches are read where they act), no later ``sitecustomize.py`` (one stat per later entry: listing an entry
no import has read yet, site-packages say, cost more than all the other checks). Every other case comes here,
where :func:`start` decides as it does, but with realpaths (a venv's lib64 is its lib): an interpreter npu_shim
does not serve, one with NPU_SHIM_DISABLE set (to anything: npu_shim.activate reads it and reports a bad value),
one with a hidden sitecustomize.

Python's ``site`` imports the first ``sitecustomize`` on ``sys.path`` and stops, so npu_shim's
would hide one later on the path (a container's own, say OpenTelemetry's launcher, or an old
Python's in its site-packages). This runs it after npu_shim's, as ``site`` would have, an error
in it reported the same way: in every interpreter, served by npu_shim or not.

An interpreter npu_shim does not serve (another environment's or version's) also writes the
bytecode of an installed shim's bootstrap, and ``pip uninstall npu-shim`` removes only its own
interpreter's: a directory left behind would make ``import npu_shim`` succeed as an empty
namespace package. This removes such bytecode.

npu_shim's sitecustomize imports this (a checkout links it beside its sitecustomize.py), which takes itself out of
sys.modules again.
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
        found = imp.find_module("sitecustomize", [entry])
    except ImportError:
        return False
    source, path, description = found
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


def run_next_sitecustomize():
    """Run the first sitecustomize on sys.path that is not npu_shim's, if there is one."""
    run = _run_python2 if sys.version_info[0] < 3 else _run_python3
    for entry in list(sys.path):
        if run(entry or os.curdir):
            return


def _forget_stray_bytecode(paths, package):
    """Remove bytecode of an installed npu_shim this interpreter wrote, unless pip uninstall removes it.

    pip removes the bytecode of its own interpreter (the one npu_shim is installed for), which has
    compiled npu_shim/__init__ too, at install or when it ran. Python 2 writes ``.pyc`` beside the
    source: pip removes that with it, ``uv pip uninstall`` does not (and then leaves npu_shim/ behind).
    """
    tag = getattr(getattr(sys, "implementation", None), "cache_tag", None)
    if tag and os.path.exists(os.path.join(package, "__pycache__", "__init__.%s.pyc" % tag)):
        return
    for path in paths:
        if path:
            for remove, target in ((os.remove, path), (os.rmdir, os.path.dirname(path))):
                try:
                    remove(target)
                except OSError:  # not written (read-only, PYTHONDONTWRITEBYTECODE), or not empty yet
                    break


def _bytecode(module):
    """Where this interpreter wrote a module's bytecode (``module``: its globals): ``__cached__``, or on
    Python 2 beside the source."""
    if sys.version_info[0] >= 3:
        return module.get("__cached__")
    return os.path.splitext(module["__file__"])[0] + ".pyc"


def start(bootstrap):
    """npu_shim's start-up where its sitecustomize (``bootstrap``: that module) did not decide it."""
    here = os.path.dirname(os.path.abspath(bootstrap.__file__))
    checkout = os.path.isdir(os.path.join(here, "npu_shim"))
    site_dir = here if checkout else os.path.dirname(os.path.dirname(here))
    served = sys.version_info >= (3, 10) and (
        checkout or site_dir in sys.path or os.path.realpath(site_dir) in map(os.path.realpath, sys.path)
    )
    if served:
        if DISABLE in os.environ:
            __import__("npu_shim").activate("sitecustomize")  # reads the switches, reports a bad value
        else:  # the bootstrap module is the watcher (a later sitecustomize takes its place in sys.modules)
            sys.meta_path.insert(0, bootstrap)
    elif not checkout:  # an installed shim, not ours to serve
        _forget_stray_bytecode([_bytecode(globals()), _bytecode(vars(bootstrap))], os.path.dirname(here))
    run_next_sitecustomize()
    # start-up's helper, not a module of the process; last, since Python 2 empties a module's globals when the
    # module goes
    sys.modules.pop(__name__, None)
