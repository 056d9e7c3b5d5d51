"""How the shim reaches the interpreters that verl starts (Ray workers, torchrun and multiprocessing children).

verl builds its engines in Ray actor processes, so a patch applied only in the
driver does not reach them: every interpreter has to start with the shim's
bootstrap directory on PYTHONPATH.
"""

import os

import npu_shim
from npu_shim import bootstrap_dir


def with_bootstrap_first(pythonpath: str) -> str:
    """``pythonpath`` with the bootstrap directory as its first entry, once; other entries kept in order."""
    first = bootstrap_dir()
    ours = {first, npu_shim.BOOTSTRAP_DIR}  # a checkout's npu_shim/bootstrap would activate nothing: drop it too
    entries = [entry for entry in pythonpath.split(os.pathsep) if entry and entry not in ours]
    return os.pathsep.join([first, *entries])


def propagate() -> None:
    """Put the bootstrap directory first on PYTHONPATH so that child interpreters activate too."""
    if npu_shim.switch("NPU_SHIM_PROPAGATE"):
        os.environ["PYTHONPATH"] = with_bootstrap_first(os.environ.get("PYTHONPATH", ""))


def ray_runtime_env(runtime_env: dict | None = None) -> dict:
    """A copy of ``runtime_env`` whose workers start with the shim (their own PYTHONPATH kept).

    The shim must be installed at the same path on every node, as in a container
    image; Ray expands ``${PYTHONPATH}`` to the node's own value.
    """
    merged = dict(runtime_env or {})
    env_vars = dict(merged.get("env_vars") or {})
    env_vars["PYTHONPATH"] = with_bootstrap_first(env_vars.get("PYTHONPATH", "${PYTHONPATH}"))
    merged["env_vars"] = env_vars
    return merged
