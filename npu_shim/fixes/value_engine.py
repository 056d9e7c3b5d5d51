"""Backport of ``MindspeedEngineWithValueHead`` (verl #6135, released in 0.8.0).

Mirrors: the class in ``verl/workers/engine/mindspeed/transformer_impl.py``,
registered for ``(value_model, megatron, npu)``, and its exports from
``verl.workers.engine``, ``.megatron`` and ``.mindspeed``.
Missing when: verl's registry has nothing for ``(value_model, megatron, npu)``
although it has ``MegatronEngineWithValueHead`` (0.6.x, 0.7.x, main before #6135);
without it a Megatron critic on an NPU fails with
``AssertionError: Unknown device: npu for model_type: value_model and backend: megatron``.
Does: defines the class as upstream does, in upstream's module (so it pickles by
reference), registers it through verl's own ``EngineRegistry.register`` and adds
the exports.
"""

from __future__ import annotations

from npu_shim.changes import ChangeSet
from npu_shim.fixes.shared_repatch import mindspeed_repatch
from npu_shim.layout import MEGATRON_IMPL, VerlLayout
from npu_shim.verdicts import ALREADY_APPLIED, APPLIED, NATIVE, NOT_APPLICABLE, Outcome, is_ours, mark_as_ours

NAME = "value_engine"
CLASS_NAME = "MindspeedEngineWithValueHead"
BASE_NAME = "MegatronEngineWithValueHead"
KEY = {"model_type": "value_model", "backend": "megatron", "device": "npu"}
KNOWN = ()  # it reads verl's registry, not verl's code


def build_engine_class(value_head_engine: type, module_name: str) -> type:
    """Upstream's class, over this verl's own ``MegatronEngineWithValueHead``."""

    class MindspeedEngineWithValueHead(value_head_engine):  # type: ignore[misc, valid-type]
        """verl's Megatron value-head (critic) engine on Ascend NPUs through MindSpeed (added by npu_shim)."""

        def _init_device_mesh(self) -> None:
            # MindSpeed must see this engine's config (context parallel size in
            # particular) before Megatron's parallel state is initialised.
            mindspeed_repatch(self.engine_config)
            super()._init_device_mesh()

    # Upstream's name and place, so that pickle finds the class by reference in
    # any interpreter where the shim is active (Ray ships engines' classes).
    MindspeedEngineWithValueHead.__module__ = module_name
    MindspeedEngineWithValueHead.__qualname__ = CLASS_NAME
    MindspeedEngineWithValueHead._init_device_mesh.__qualname__ = f"{CLASS_NAME}._init_device_mesh"
    mark_as_ours(MindspeedEngineWithValueHead)
    return MindspeedEngineWithValueHead


def apply(layout: VerlLayout, changes: ChangeSet) -> Outcome:
    if layout.registry is None:
        return Outcome(NAME, NOT_APPLICABLE, "verl has no (model_type, backend, device) engine registry (verl < 0.6)")
    registered = layout.registered(**KEY)
    if registered is not None:
        if is_ours(registered):
            return Outcome(NAME, ALREADY_APPLIED, f"{CLASS_NAME} was registered earlier in this process")
        return Outcome(NAME, NATIVE, f"verl registers {registered.__qualname__} for {_key()}")
    value_head_engine = getattr(layout.megatron_impl, BASE_NAME, None)
    if value_head_engine is None:
        why = (
            "verl's Megatron engine did not import"
            if layout.megatron_impl is None
            else f"{MEGATRON_IMPL} has no {BASE_NAME}"
        )
        return Outcome(NAME, NOT_APPLICABLE, why)
    mindspeed_impl = layout.mindspeed_impl
    if mindspeed_impl is None:
        return Outcome(NAME, NOT_APPLICABLE, "verl's MindSpeed engine module did not import (is MindSpeed installed?)")

    engine_class = build_engine_class(value_head_engine, mindspeed_impl.__name__)
    changes.setattr(mindspeed_impl, CLASS_NAME, engine_class)
    _register(layout, engine_class, changes)
    for package in (layout.engine_package, layout.mindspeed_package):
        changes.export(package, CLASS_NAME, engine_class)
    for package in (layout.engine_package, layout.megatron_package):
        changes.export(package, BASE_NAME, value_head_engine)
    return Outcome(NAME, APPLIED, f"registered {CLASS_NAME}({BASE_NAME}) for {_key()}")


def _register(layout: VerlLayout, engine_class: type, changes: ChangeSet) -> None:
    layout.registry.register(**KEY)(engine_class)
    slots = layout.registry._engines[KEY["model_type"]][KEY["backend"]]
    changes.on_revert(lambda: slots.pop(KEY["device"], None))
    if layout.registered(**KEY) is not engine_class:
        raise RuntimeError(f"verl's EngineRegistry.register did not record {CLASS_NAME} for {_key()}")


def _key() -> str:
    return "({model_type}, {backend}, {device})".format(**KEY)
