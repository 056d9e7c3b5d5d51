"""How the shim reaches the interpreters that verl starts (Ray workers, torchrun and multiprocessing children).

verl builds its engines in Ray actor processes, so a patch applied only in the
driver does not reach them: every interpreter has to start with the shim's
bootstrap directory on PYTHONPATH.
"""

from __future__ import annotations

import os

from npu_shim.names import BOOTSTRAP_MARKER, PACKAGE, PACKAGE_DIR, VERL_MODULES
from npu_shim.switches import switch

BOOTSTRAP_DIR = os.path.join(PACKAGE_DIR, "bootstrap")


def is_npu_shim_bootstrap(path: str) -> bool:
    """Whether ``path`` is one of npu_shim's own sitecustomize files (a copy, or the checkout's link)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return BOOTSTRAP_MARKER in file.read(4096)
    except OSError:
        return False


def bootstrap_dir(package_dir: str | None = None) -> str:
    """The directory to put on PYTHONPATH so that every interpreter activates the shim.

    ``npu_shim/bootstrap`` of an installed shim; the checkout itself for a shim
    run from a checkout (its root ``sitecustomize.py``): the installed bootstrap
    activates only where npu_shim is already on sys.path, and a checkout is not.
    ``package_dir``: that of another npu_shim than this one.
    """
    package_dir = package_dir or PACKAGE_DIR
    checkout = os.path.dirname(package_dir)
    candidate = os.path.join(checkout, "sitecustomize.py")
    if os.path.isfile(candidate) and is_npu_shim_bootstrap(candidate):
        return checkout
    return os.path.join(package_dir, "bootstrap")


def with_bootstrap_first(pythonpath: str, bootstrap: str | None = None) -> str:
    """``pythonpath`` with the bootstrap directory (this shim's, or ``bootstrap``) first, once; others in order."""
    first = bootstrap or bootstrap_dir()
    # this shim's own entries go too (a checkout's npu_shim/bootstrap would activate nothing)
    ours = {first, bootstrap_dir(), BOOTSTRAP_DIR}
    entries = [entry for entry in pythonpath.split(os.pathsep) if entry and entry not in ours]
    return os.pathsep.join([first, *entries])


# PYTHONPATH as it was before propagate() changed it (None: unset), for the doctor, which judges
# the environment its caller gave it; _UNCHANGED while propagate() has changed nothing.
_UNCHANGED = object()
pythonpath_before: object = _UNCHANGED


def propagate() -> None:
    """Put the bootstrap directory first on PYTHONPATH so that child interpreters activate too."""
    global pythonpath_before
    if switch("NPU_SHIM_PROPAGATE"):
        if pythonpath_before is _UNCHANGED:
            pythonpath_before = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = with_bootstrap_first(os.environ.get("PYTHONPATH", ""))


def environ_as_given() -> dict[str, str]:
    """``os.environ`` without what propagate() added: the environment this process was given."""
    env = dict(os.environ)
    if pythonpath_before is None:
        env.pop("PYTHONPATH", None)
    elif isinstance(pythonpath_before, str):
        env["PYTHONPATH"] = pythonpath_before
    return env


def ray_runtime_env(runtime_env: dict | None = None, bootstrap: str | None = None) -> dict:
    """A copy of ``runtime_env`` whose workers start with the shim (their own PYTHONPATH kept).

    The shim must be installed at the same path on every node, as in a container
    image; Ray expands ``${PYTHONPATH}`` to the node's own value. ``bootstrap``: another
    shim's bootstrap directory than this one's (the one workers import, for ``npu-shim runtime-env``).
    """
    merged = dict(runtime_env or {})
    env_vars = dict(merged.get("env_vars") or {})
    env_vars["PYTHONPATH"] = with_bootstrap_first(env_vars.get("PYTHONPATH", "${PYTHONPATH}"), bootstrap)
    merged["env_vars"] = env_vars
    return merged


def verl_modules_runtime_env(runtime_env: dict | None = None) -> dict:
    """A copy of ``runtime_env`` whose workers import npu_shim when they import verl (0.6.0 and later).

    ``VERL_USE_EXTERNAL_MODULES`` keeps the modules ``runtime_env`` already names, written as verl
    accepts them (``"foo, npu_shim"`` would make ``import verl`` fail on ``" npu_shim"``).
    The shim must be installed in the workers' environment (no PYTHONPATH is added).
    """
    merged = dict(runtime_env or {})
    env_vars = dict(merged.get("env_vars") or {})
    # verl imports each comma-separated name exactly as written: no blanks around a name, no empty names
    modules = [name.strip() for name in env_vars.get(VERL_MODULES, "").split(",") if name.strip()]
    if PACKAGE not in modules:
        modules.append(PACKAGE)
    env_vars[VERL_MODULES] = ",".join(modules)
    merged["env_vars"] = env_vars
    return merged
