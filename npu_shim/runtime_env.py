"""``npu-shim runtime-env``: the Ray ``runtime_env`` that gives verl's workers the shim, ready to paste.

Two spellings of one dict: JSON for ``ray job submit --runtime-env-json``, and
Hydra's override grammar for verl's trainer (``+ray_kwargs.ray_init.runtime_env=...``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any

from npu_shim.names import PACKAGE_DIR, VERL_MODULES
from npu_shim.propagation import bootstrap_dir, ray_runtime_env, verl_modules_runtime_env

VERL_ROUTE = VERL_MODULES
PYTHONPATH_ROUTE = "PYTHONPATH"
HYDRA_KEY = "+ray_kwargs.ray_init.runtime_env"
# A string Hydra reads as that same string without quotes: no separators (, : = spaces), not a number,
# and not one of the words it turns into a bool or None.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_HYDRA_WORDS = frozenset({"true", "false", "null", "nan", "inf"})


def default_route(package_dir: str | None = None) -> str:
    """verl's own route for an installed shim; a checkout is not importable by workers without PYTHONPATH.

    ``package_dir``: the npu_shim package the workers import, when it is not this one.
    """
    installed = bootstrap_dir(package_dir) == os.path.join(package_dir or PACKAGE_DIR, "bootstrap")
    return VERL_ROUTE if installed else PYTHONPATH_ROUTE


def runtime_env(route: str, package_dir: str | None = None) -> dict[str, Any]:
    if route == VERL_ROUTE:
        return verl_modules_runtime_env()
    return ray_runtime_env(bootstrap=bootstrap_dir(package_dir))


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
    """The override for verl's trainer, or None when ``env`` needs Ray's ``${VAR}`` expansion.

    verl passes ``ray_init`` to Ray unresolved but later resolves its whole config:
    an unescaped ``${PYTHONPATH}`` fails there as an OmegaConf interpolation, and an
    escaped one reaches Ray with its backslash. verl's own route needs neither.
    """
    text = json.dumps(env)
    return None if "${" in text else f"{HYDRA_KEY}={hydra_value(env)}"


def render(route: str, as_json: bool, package_dir: str | None = None) -> str:
    env = runtime_env(route, package_dir)
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
            else f"# none for this route (it needs Ray's ${{PYTHONPATH}} expansion); use --route {VERL_ROUTE}",
        ]
    )
