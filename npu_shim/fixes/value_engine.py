"""Backport of ``MindspeedEngineWithValueHead`` (verl #6135, released in 0.8.0).

Mirrors: the class in verl's MindSpeed engine module, registered for ``(value_model, megatron, npu)``, and its exports.
Missing when: the registry has nothing for that key beside a ``MegatronEngineWithValueHead`` (0.6.x, 0.7.x): a
Megatron critic on an NPU fails with ``AssertionError: Unknown device: npu ...``.
Does: defines the class in upstream's module (it pickles by reference), registers it through verl's own API, exports it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from npu_shim.fingerprint import parameters
from npu_shim.fixes.shared_repatch import MINDSPEED_IMPL, repatch_then_init_device_mesh
from npu_shim.patcher import ENGINE_PACKAGE, MISSING, NATIVE, NOT_APPLICABLE, Fix, Outcome, Writer

NAME = "value_engine"
CLASS_NAME = "MindspeedEngineWithValueHead"
BASE_NAME = "MegatronEngineWithValueHead"
KEY = {"model_type": "value_model", "backend": "megatron", "device": "npu"}
KEY_TEXT = "({model_type}, {backend}, {device})".format(**KEY)
MEGATRON_PACKAGE = "verl.workers.engine.megatron"
MEGATRON_IMPL = "verl.workers.engine.megatron.transformer_impl"
MINDSPEED_PACKAGE = "verl.workers.engine.mindspeed"


@dataclass(frozen=True)
class VerlLayout:
    """What the imported verl's engines look like, read from ``sys.modules`` without importing anything: right after
    ``verl.workers.engine`` has executed, an engine module that is missing failed in verl's own ``try/except``."""

    registry: Any  # verl's EngineRegistry, or None before 0.6 (the old register(key) API)
    megatron_impl: ModuleType | None
    mindspeed_impl: ModuleType | None

    def slots(self, model_type: str, backend: str) -> dict[Any, Any]:
        """verl's registry's own dict of ``device: class`` for the pair (empty, and not verl's, where it has none)."""
        return getattr(self.registry, "_engines", {}).get(model_type, {}).get(backend, {})

    def registered(self, model_type: str, backend: str, device: str) -> Any:
        """The class registered for the key, or None. 0.9 keys may be ``(device, vendor)`` tuples."""
        for key, engine_class in self.slots(model_type, backend).items():
            if key == device or (isinstance(key, tuple) and key[:1] == (device,)):
                return engine_class
        return None


def read_layout(engine_package: ModuleType) -> VerlLayout:
    base = sys.modules.get(f"{ENGINE_PACKAGE}.base")
    registry = getattr(base, "EngineRegistry", None) or getattr(engine_package, "EngineRegistry", None)
    # verl >= 0.6: register(model_type=, backend=, device=) over a nested _engines dict
    takes_key = set(KEY) <= parameters(getattr(registry, "register", None)).keys()
    keyed = takes_key and isinstance(getattr(registry, "_engines", None), dict)
    return VerlLayout(
        registry=registry if keyed else None,
        megatron_impl=sys.modules.get(MEGATRON_IMPL),
        mindspeed_impl=sys.modules.get(MINDSPEED_IMPL),
    )


def judge(engine_package: ModuleType) -> Outcome:
    """Not a fingerprint: it reads verl's registry (nothing for the key, beside a ``MegatronEngineWithValueHead``)."""
    layout = read_layout(engine_package)
    if layout.registry is None:
        return Outcome(NAME, NOT_APPLICABLE, "verl has no (model_type, backend, device) engine registry (verl < 0.6)")
    registered = layout.registered(**KEY)
    if registered is not None:
        return Outcome(NAME, NATIVE, f"verl registers {registered.__qualname__} for {KEY_TEXT}")
    if layout.megatron_impl is None:
        return Outcome(NAME, NOT_APPLICABLE, "verl's Megatron engine did not import")
    if getattr(layout.megatron_impl, BASE_NAME, None) is None:
        return Outcome(NAME, NOT_APPLICABLE, f"{MEGATRON_IMPL} has no {BASE_NAME}")
    if layout.mindspeed_impl is None:
        return Outcome(NAME, NOT_APPLICABLE, "verl's MindSpeed engine module did not import (is MindSpeed installed?)")
    return Outcome(NAME, MISSING, f"verl registers nothing for {KEY_TEXT}:")


def edit(engine_package: ModuleType, writer: Writer) -> None:
    """Upstream's class (over this verl's value-head engine) in upstream's module, registered, and its exports."""
    layout = read_layout(engine_package)
    value_head_engine = getattr(layout.megatron_impl, BASE_NAME)

    class MindspeedEngineWithValueHead(value_head_engine):  # type: ignore[misc, valid-type]
        """verl's Megatron value-head (critic) engine on Ascend NPUs through MindSpeed (added by npu_shim)."""

    engine_class = MindspeedEngineWithValueHead
    # Upstream's name and place, so that pickle finds the class by reference where the shim is active (Ray ships it).
    engine_class.__module__ = layout.mindspeed_impl.__name__
    engine_class.__qualname__ = CLASS_NAME
    engine_class._init_device_mesh = repatch_then_init_device_mesh(engine_class)
    writer.bind(layout.mindspeed_impl, CLASS_NAME, engine_class)
    layout.registry.register(**KEY)(engine_class)
    slots = layout.slots(KEY["model_type"], KEY["backend"])
    writer.on_revert(lambda: slots.pop(KEY["device"], None))
    if layout.registered(**KEY) is not engine_class:
        raise RuntimeError(f"verl's EngineRegistry.register did not record {CLASS_NAME}")
    for package in (engine_package, sys.modules.get(MINDSPEED_PACKAGE)):
        writer.export(package, CLASS_NAME, engine_class)
    for package in (engine_package, sys.modules.get(MEGATRON_PACKAGE)):
        writer.export(package, BASE_NAME, value_head_engine)


FIX = Fix(name=NAME, judge=judge, edit=edit, applied=f"registered {CLASS_NAME}({BASE_NAME})")
