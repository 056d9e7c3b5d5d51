"""What the imported verl looks like, read from ``sys.modules`` without importing anything.

The post-import hook runs right after ``verl.workers.engine`` has executed, so
every engine module verl managed to import is in ``sys.modules``; one that is
missing failed inside verl's own ``try/except ImportError`` (MindSpeed absent on
0.6.x, Megatron absent anywhere).
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

ENGINE_PACKAGE = "verl.workers.engine"
MEGATRON_PACKAGE = "verl.workers.engine.megatron"
MEGATRON_IMPL = "verl.workers.engine.megatron.transformer_impl"
MINDSPEED_PACKAGE = "verl.workers.engine.mindspeed"
MINDSPEED_IMPL = "verl.workers.engine.mindspeed.transformer_impl"


def installed_verl_version() -> str:
    """``verl.__version__`` of the verl imported in this process, or ``""``."""
    return str(getattr(sys.modules.get("verl"), "__version__", ""))


@dataclass(frozen=True)
class VerlLayout:
    engine_package: ModuleType
    registry: Any  # verl's EngineRegistry, or None before 0.6 (the old register(key) API)
    megatron_impl: ModuleType | None
    mindspeed_impl: ModuleType | None

    @property
    def megatron_package(self) -> ModuleType | None:
        return sys.modules.get(MEGATRON_PACKAGE)

    @property
    def mindspeed_package(self) -> ModuleType | None:
        return sys.modules.get(MINDSPEED_PACKAGE)

    @property
    def verl_version(self) -> str:
        return installed_verl_version()

    def slots(self, model_type: str, backend: str) -> dict[Any, Any]:
        """verl's registry's own dict of ``device: class`` for the pair (empty, and not verl's, where it has none)."""
        return getattr(self.registry, "_engines", {}).get(model_type, {}).get(backend, {})

    def registered(self, model_type: str, backend: str, device: str) -> Any:
        """The class registered for the key, or None. 0.9 keys may be ``(device, vendor)`` tuples."""
        for key, engine_class in self.slots(model_type, backend).items():
            if key == device or (isinstance(key, tuple) and key[:1] == (device,)):
                return engine_class
        return None


def has_keyed_registry(registry: Any) -> bool:
    """True for verl >= 0.6: ``register(model_type=, backend=, device=)`` over a nested ``_engines`` dict."""
    register = getattr(registry, "register", None)
    if register is None or not isinstance(getattr(registry, "_engines", None), dict):
        return False
    try:
        parameters = inspect.signature(register).parameters
    except (TypeError, ValueError):
        return False
    return {"model_type", "backend", "device"} <= parameters.keys()


def read_layout(engine_package: ModuleType) -> VerlLayout:
    base = sys.modules.get(f"{ENGINE_PACKAGE}.base")
    registry = getattr(base, "EngineRegistry", None) or getattr(engine_package, "EngineRegistry", None)
    return VerlLayout(
        engine_package=engine_package,
        registry=registry if has_keyed_registry(registry) else None,
        megatron_impl=sys.modules.get(MEGATRON_IMPL),
        mindspeed_impl=sys.modules.get(MINDSPEED_IMPL),
    )
