"""How the shim reaches the interpreters verl starts (Ray workers, torchrun and multiprocessing children), and
``npu-shim runtime-env``: the Ray ``runtime_env`` that gives verl's workers the shim, as JSON and as a Hydra override.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any

from npu_shim.settings import BOOTSTRAP, BOOTSTRAP_MARKER, PACKAGE, PACKAGE_DIR, VERL_MODULES, switch

HYDRA_KEY = "+ray_kwargs.ray_init.runtime_env"
# A string Hydra reads as that same string without quotes: no separators (, : = spaces), not a number,
# and not one of the words it turns into a bool or None.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_HYDRA_WORDS = frozenset({"true", "false", "null", "nan", "inf"})


def is_npu_shim_bootstrap(path: str) -> bool:
    """Whether ``path`` is one of npu_shim's own sitecustomize files (a copy, or the checkout's link)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return BOOTSTRAP_MARKER in file.read(4096)
    except OSError:
        return False


def bootstrap_dir(package_dir: str | None = None) -> str:
    """The directory to put on PYTHONPATH so that every interpreter activates the shim (that of the npu_shim in
    ``package_dir``, by default this one): ``npu_shim_bootstrap`` beside an installed package; a checkout itself (its
    root ``sitecustomize.py``), since the installed bootstrap activates only where npu_shim is already importable."""
    parent = os.path.dirname(package_dir or PACKAGE_DIR)
    candidate = os.path.join(parent, "sitecustomize.py")
    if os.path.isfile(candidate) and is_npu_shim_bootstrap(candidate):
        return parent
    return os.path.join(parent, BOOTSTRAP)


def with_bootstrap_first(pythonpath: str, bootstrap: str | None = None) -> str:
    """``pythonpath`` with the bootstrap directory (this shim's, or ``bootstrap``) first, once; others in order."""
    first = bootstrap or bootstrap_dir()
    # this shim's own entries go too (a checkout's npu_shim_bootstrap, beside the package, would activate nothing)
    ours = {first, bootstrap_dir(), os.path.join(os.path.dirname(PACKAGE_DIR), BOOTSTRAP)}
    entries = [entry for entry in pythonpath.split(os.pathsep) if entry and entry not in ours]
    return os.pathsep.join([first, *entries])


# What propagate() changed, as it was given (None: unset): the doctor judges the environment its caller gave it
_given: dict[str, str | None] = {}


def propagate() -> None:
    """Put the bootstrap directory first on PYTHONPATH so that child interpreters activate too."""
    if switch("NPU_SHIM_PROPAGATE"):
        _given.setdefault("PYTHONPATH", os.environ.get("PYTHONPATH"))
        os.environ["PYTHONPATH"] = with_bootstrap_first(os.environ.get("PYTHONPATH", ""))


def environ_as_given() -> dict[str, str]:
    """``os.environ`` without what propagate() added: the environment this process was given."""
    env = {**os.environ, **_given}
    return {name: value for name, value in env.items() if value is not None}


def ray_runtime_env(runtime_env: dict | None = None, bootstrap: str | None = None) -> dict:
    """A copy of ``runtime_env`` whose workers start with the shim (``bootstrap``: another shim's directory than this
    one's), their own PYTHONPATH kept: Ray expands ``${PYTHONPATH}`` to the node's. The shim must be installed at the
    same path on every node, as in a container image."""
    env_vars = dict((runtime_env or {}).get("env_vars") or {})
    env_vars["PYTHONPATH"] = with_bootstrap_first(env_vars.get("PYTHONPATH", "${PYTHONPATH}"), bootstrap)
    return {**(runtime_env or {}), "env_vars": env_vars}


def verl_modules_runtime_env(runtime_env: dict | None = None) -> dict:
    """A copy of ``runtime_env`` whose workers import npu_shim, installed there, when they import verl (>= 0.6.0);
    the modules it already names are kept."""
    env_vars = dict((runtime_env or {}).get("env_vars") or {})
    # verl imports each comma-separated name exactly as written ("foo, npu_shim" fails on " npu_shim"): no blanks
    # around a name, no empty names
    modules = [name.strip() for name in env_vars.get(VERL_MODULES, "").split(",") if name.strip()]
    if PACKAGE not in modules:
        modules.append(PACKAGE)
    env_vars[VERL_MODULES] = ",".join(modules)
    return {**(runtime_env or {}), "env_vars": env_vars}


def default_route(package_dir: str | None = None) -> str:
    """verl's own route for an installed shim (``package_dir``: the one workers import, by default this one); a
    checkout is not importable by workers without PYTHONPATH."""
    installed = bootstrap_dir(package_dir) == os.path.join(os.path.dirname(package_dir or PACKAGE_DIR), BOOTSTRAP)
    return VERL_MODULES if installed else "PYTHONPATH"


def hydra_value(value: Any) -> str:
    """``value`` in Hydra's override grammar: dicts and lists as such, every string quoted."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{hydra_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _HYDRA_WORDS:  # readable: no quotes needed
        return text
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def hydra_override(env: dict[str, Any]) -> str | None:
    """The override for verl's trainer, or None when ``env`` needs Ray's ``${VAR}`` expansion: verl resolves its whole
    config, where an unescaped ``${PYTHONPATH}`` fails as an OmegaConf interpolation and an escaped one reaches Ray
    with its backslash."""
    return None if "${" in json.dumps(env) else f"{HYDRA_KEY}={hydra_value(env)}"


def render(route: str, as_json: bool, package_dir: str | None = None) -> str:
    env = verl_modules_runtime_env() if route == VERL_MODULES else ray_runtime_env(bootstrap=bootstrap_dir(package_dir))
    if as_json:
        return json.dumps(env)
    override = hydra_override(env)
    return "\n".join(
        [
            f"# route: {route}",
            "# ray job submit:",
            f"--runtime-env-json={shlex.quote(json.dumps(env))}",
            "# verl trainer override:",
            shlex.quote(override)
            if override
            else f"# none for this route (it needs Ray's ${{PYTHONPATH}} expansion); use --route {VERL_MODULES}",
        ]
    )
