"""``npu-shim runtime-env``: the Ray ``runtime_env`` that gives verl's workers the shim, ready to paste.

Two spellings of one dict: JSON for ``ray job submit --runtime-env-json``, and
Hydra's override grammar for verl's trainer (``+ray_kwargs.ray_init.runtime_env=...``).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import npu_shim
from npu_shim.propagation import ray_runtime_env, verl_modules_runtime_env

VERL_ROUTE = "VERL_USE_EXTERNAL_MODULES"
PYTHONPATH_ROUTE = "PYTHONPATH"
HYDRA_KEY = "+ray_kwargs.ray_init.runtime_env"


def default_route() -> str:
    """verl's own route for an installed shim; a checkout is not importable by workers without PYTHONPATH."""
    return VERL_ROUTE if npu_shim.bootstrap_dir() == npu_shim.BOOTSTRAP_DIR else PYTHONPATH_ROUTE


def runtime_env(route: str) -> dict[str, Any]:
    return verl_modules_runtime_env() if route == VERL_ROUTE else ray_runtime_env()


def hydra_value(value: Any) -> str:
    """``value`` in Hydra's override grammar: strings quoted, OmegaConf's ``${`` escaped (Ray expands it, not Hydra)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{hydra_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${")
    return f"'{text}'"


def hydra_override(env: dict[str, Any]) -> str:
    return f"{HYDRA_KEY}={hydra_value(env)}"


def render(route: str, as_json: bool) -> str:
    env = runtime_env(route)
    if as_json:
        return json.dumps(env)
    return "\n".join(
        [
            f"# route: {route}",
            "# ray job submit:",
            f"--runtime-env-json={shlex.quote(json.dumps(env))}",
            "# verl trainer override:",
            shlex.quote(hydra_override(env)),
        ]
    )
