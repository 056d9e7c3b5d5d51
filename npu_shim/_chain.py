"""Running a container's own ``sitecustomize`` after the shim's (the rare path of start-up).

Python's ``site`` imports the first ``sitecustomize`` on ``sys.path`` and stops;
with the shim's directory first on PYTHONPATH a container's own one (say,
OpenTelemetry's launcher) would be silently shadowed. This runs it once, after
the shim's, as if the shim were not there, and reports an exception in it the
way ``site.execsitecustomize`` does.
"""

import os
import sys

# npu_shim.BOOTSTRAP_MARKER; spelled out because this module also runs without the npu_shim package
# (loaded by path from an installed bootstrap in an interpreter that is not the shim's own).
BOOTSTRAP_MARKER = "__npu_shim_bootstrap__"


def is_npu_shim_bootstrap(path: str) -> bool:
    """Whether ``path`` is one of npu_shim's own sitecustomize files (another copy on sys.path)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return BOOTSTRAP_MARKER in file.read(4096)
    except OSError:
        return False


def run_next_sitecustomize(path_finder: type, search: list[str]) -> None:
    while True:
        spec = path_finder.find_spec("sitecustomize", search)
        if spec is None or spec.loader is None:
            return
        if not (spec.origin and is_npu_shim_bootstrap(spec.origin)):
            break
        ours = os.path.dirname(spec.origin)  # another copy of the shim's bootstrap: look past it
        search = [entry for entry in search if os.path.abspath(entry or os.curdir) != os.path.abspath(ours)]
    from importlib.util import module_from_spec  # only now: it costs more than the rest of start-up

    shim_sitecustomize = sys.modules.get("sitecustomize")
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules["sitecustomize"] = shim_sitecustomize
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write(
                f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{err.__class__.__name__}: {err}\n"
            )
