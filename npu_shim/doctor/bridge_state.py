"""The bridge verl's Megatron engines build their models through, and whether it imports (verl #6931: from 0.9.0
Megatron-Bridge by default, and where it does not import every Megatron engine fails only when built, in the Ray actor).
Also the probe's own imports of what a guarded import (verl's, Megatron's) hid: :func:`import_or_failure`."""

from __future__ import annotations

import contextlib
import importlib
import shlex
import sys
from types import ModuleType
from typing import Any

MEGATRON_BRIDGE = "Megatron-Bridge"
VERL_BRIDGE_MODULE = "verl.models.mcore.bridge"  # what verl's Megatron engine imports for Megatron-Bridge
MEGATRON_ENGINE_MODULE = "verl.workers.engine.megatron"
# What verl's Ascend images install beside Megatron-Bridge (0.5.0, `--no-deps`), by the module each gives: Megatron-
# Bridge imports them unguarded (verl #7335's scripts; verl's Ascend Dockerfiles)
BESIDE_BRIDGE = {
    "modelopt": "nvidia-modelopt[torch]>=0.37.0",
    "omegaconf": "omegaconf",
    "hydra": "hydra-core",
    "megatron.energon": "megatron-energon",
}
VANILLA = (
    "set vanilla_mbridge=True for each Megatron role (actor_rollout_ref.actor.megatron.vanilla_mbridge=True "
    "critic.megatron.vanilla_mbridge=True: the legacy mbridge, deprecated in verl)"
)
# The oldest megatron-core Megatron-Bridge imports on: 0.5.0 (what verl's images install; 0.4.0 to 0.6.2 need Python
# 3.12) imports megatron.core modules and names that 0.12 to 0.17 lack (measured 2026-12-06: 0.17.1 fails with
# `cannot import name 'safe_get_world_size'`, 0.18.0 imports). Below it only the legacy mbridge builds.
OLDEST_MEGATRON_FOR_BRIDGE = (0, 18)
MEGATRON_VERSION_MODULE = "megatron.core.package_info"  # megatron-core's __version__, installed or from source


def error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def import_or_failure(module: str) -> tuple[ModuleType | None, dict[str, Any] | None]:
    """``module`` imported, or how that failed: the report's ``{module, error, missing}``."""
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the report
            return importlib.import_module(module), None
    except Exception as error:
        missing = error.name if isinstance(error, ModuleNotFoundError) else None
        return None, {"module": module, "error": error_text(error), "missing": missing}


def default_bridge() -> str | None:
    """The bridge verl's default engine config builds through: None where this verl has no such choice (0.6.x)."""
    config = sys.modules.get("verl.workers.config")
    vanilla = getattr(getattr(config, "McoreEngineConfig", None), "__dataclass_fields__", {}).get("vanilla_mbridge")
    return None if vanilla is None else "mbridge" if vanilla.default else MEGATRON_BRIDGE


def bridge_state() -> dict[str, Any]:
    """The default bridge here, and how verl's import of Megatron-Bridge fails: tried only where verl's Megatron
    engine module imported and the default is Megatron-Bridge (else no model to build, or mbridge builds it)."""
    default = default_bridge()
    tried = default == MEGATRON_BRIDGE and MEGATRON_ENGINE_MODULE in sys.modules
    failure = import_or_failure(VERL_BRIDGE_MODULE)[1] if tried else None
    return {"default": default, "import_error": failure, "meaning": meaning(failure)}


def meaning(failure: dict[str, Any] | None) -> str | None:
    """What a failed Megatron-Bridge import means for verl's Megatron engines, and the ways out this Megatron leaves."""
    if failure is None:
        return None
    missing, beside = failure["missing"], " ".join(shlex.quote(package) for package in BESIDE_BRIDGE.values())
    pip = f"{shlex.quote(sys.executable)} -m pip install"  # this interpreter's: the one verl's engines run in
    cause = f"`import {failure['module']}` fails: {failure['error']}"
    ways_out = (
        f"install Megatron-Bridge and what verl's Ascend images install beside it ({pip} --no-deps megatron-bridge "
        f"&& {pip} {beside}), or {VANILLA}"
    )
    if missing in ("megatron.bridge", "megatron"):
        cause = "Megatron-Bridge is not installed"
    elif package := BESIDE_BRIDGE.get(missing) or BESIDE_BRIDGE.get((missing or "").partition(".")[0]):
        cause = f"Megatron-Bridge is installed but {cause}: verl's Ascend images install {package} beside it"
        ways_out = f"{pip} {shlex.quote(package)}, or {VANILLA}"
    elif missing == "transformer_engine":  # Megatron-Bridge imports it unguarded; on an NPU: TENPU's name
        cause = (
            f"Megatron-Bridge is installed but {cause}: Transformer Engine is not installed (on an NPU: "
            "TransformerEngineNPU, module transformer_engine)"
        )
        ways_out = f"install TransformerEngineNPU, or {VANILLA}"
    megatron = sys.modules.get(MEGATRON_VERSION_MODULE) or import_or_failure(MEGATRON_VERSION_MODULE)[0]
    parts = str(getattr(megatron, "__version__", "")).split(".")[:2]  # megatron-core's (major, minor)
    version = tuple(map(int, parts)) if len(parts) == 2 and all(map(str.isdigit, parts)) else None
    if version is not None and version < OLDEST_MEGATRON_FOR_BRIDGE:
        oldest = ".".join(map(str, OLDEST_MEGATRON_FOR_BRIDGE))
        ways_out = (
            f"{VANILLA}, with mbridge installed ({pip} mbridge); Megatron-Bridge does not import beside "
            f"megatron-core {version[0]}.{version[1]} (it needs {oldest} or later)"
        )
    return (
        f"verl's Megatron engines build their models through Megatron-Bridge by default (vanilla_mbridge=False), "
        f"and {cause}: every Megatron engine with verl's default config (critic and actor) fails when it is built; "
        f"fix: {ways_out}"
    )
