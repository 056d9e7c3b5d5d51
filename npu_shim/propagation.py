"""How the shim reaches the interpreters that verl starts (Ray workers, torchrun and multiprocessing children).

verl builds its engines in Ray actor processes, so a patch applied only in the
driver does not reach them: every interpreter has to start with the shim's
bootstrap directory on PYTHONPATH.
"""

import os

import npu_shim
from npu_shim import bootstrap_dir


def propagate() -> None:
    """Put the bootstrap directory first on PYTHONPATH so that child interpreters activate too."""
    if not npu_shim.switch("NPU_SHIM_PROPAGATE"):
        return
    entries = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if entries[:1] == [bootstrap_dir()]:
        return
    os.environ["PYTHONPATH"] = os.pathsep.join([bootstrap_dir(), *(e for e in entries if e != bootstrap_dir())])


def ray_runtime_env(runtime_env: dict | None = None) -> dict:
    """A copy of ``runtime_env`` whose workers start with the shim (their own PYTHONPATH kept).

    The shim must be installed at the same path on every node, as in a container
    image; Ray expands ``${PYTHONPATH}`` to the node's own value.
    """
    merged = dict(runtime_env or {})
    env_vars = dict(merged.get("env_vars") or {})
    existing = env_vars.get("PYTHONPATH", "${PYTHONPATH}")
    entries = [entry for entry in existing.split(os.pathsep) if entry and entry != bootstrap_dir()]
    env_vars["PYTHONPATH"] = os.pathsep.join([bootstrap_dir(), *entries])
    merged["env_vars"] = env_vars
    return merged
