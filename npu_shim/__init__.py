"""npu_shim: backports verl's MindSpeed value-head engine to verl releases that lack it.

``import npu_shim`` activates the shim in this interpreter and, through
``PYTHONPATH``, in the interpreters it starts afterwards (``NPU_SHIM_PROPAGATE=0``
turns the latter off). ``PYTHONPATH=<checkout>`` or ``PYTHONPATH=$(python -m
npu_shim bootstrap-dir)`` activates it in every interpreter through
``sitecustomize``. Nothing heavy is imported until verl is.
"""

# No `from __future__ import annotations`: this module is on every interpreter's start-up path.
import os
import sys

from npu_shim import _startup

__version__ = "0.1.0"
__all__ = ["__version__", "activated_via", "bootstrap_dir", "ray_runtime_env"]


def bootstrap_dir() -> str:
    """The directory to put on PYTHONPATH so that every interpreter activates the shim."""
    return _startup.BOOTSTRAP_DIR


def activated_via() -> str | None:
    """``"sitecustomize"``, ``"import"``, or None when the shim is not active in this process."""
    return _startup.activated_via


def ray_runtime_env(runtime_env: dict | None = None) -> dict:
    """``runtime_env`` (a copy) with the shim's bootstrap directory first on the workers' PYTHONPATH.

    For ``ray.init(runtime_env=...)`` or a job submission, when the cluster was
    started without the shim. The shim must be installed at the same path on
    every node, as it is in a container image. Ray expands ``${PYTHONPATH}`` to
    the worker's own value, so entries the nodes already have are kept.
    """
    merged = dict(runtime_env or {})
    env_vars = dict(merged.get("env_vars") or {})
    existing = env_vars.get("PYTHONPATH", "${PYTHONPATH}")
    entries = [entry for entry in existing.split(os.pathsep) if entry and entry != bootstrap_dir()]
    env_vars["PYTHONPATH"] = os.pathsep.join([bootstrap_dir(), *entries])
    merged["env_vars"] = env_vars
    return merged


def _started_by_our_sitecustomize() -> bool:
    return getattr(sys.modules.get("sitecustomize"), _startup.BOOTSTRAP_MARKER, False)


if not _started_by_our_sitecustomize() and _startup.activate("import"):
    _startup.propagate()
