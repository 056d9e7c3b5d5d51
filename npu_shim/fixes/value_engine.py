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

from types import ModuleType

from npu_shim import originals
from npu_shim.fixes.shared_repatch import mindspeed_repatch
from npu_shim.layout import MEGATRON_IMPL, read_layout
from npu_shim.patching import Edit, Export, Fix, Patch, Register
from npu_shim.recognition import Judgement
from npu_shim.verdicts import ALREADY_APPLIED, MISSING, NATIVE, NOT_APPLICABLE

NAME = "value_engine"
CLASS_NAME = "MindspeedEngineWithValueHead"
BASE_NAME = "MegatronEngineWithValueHead"
KEY = {"model_type": "value_model", "backend": "megatron", "device": "npu"}


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
    return MindspeedEngineWithValueHead


def judge(engine_package: ModuleType) -> Judgement:  # noqa: PLR0911 - one verdict per case
    """Not a fingerprint: it reads verl's registry (nothing for the key, beside a ``MegatronEngineWithValueHead``)."""
    layout = read_layout(engine_package)
    if layout.registry is None:
        return Judgement(NAME, NOT_APPLICABLE, "verl has no (model_type, backend, device) engine registry (verl < 0.6)")
    if originals.was_replaced(layout.mindspeed_impl, CLASS_NAME):
        return Judgement(NAME, ALREADY_APPLIED, f"{CLASS_NAME} was registered earlier in this process")
    registered = layout.registered(**KEY)
    if registered is not None:
        return Judgement(NAME, NATIVE, f"verl registers {registered.__qualname__} for {_key()}")
    if layout.megatron_impl is None:
        return Judgement(NAME, NOT_APPLICABLE, "verl's Megatron engine did not import")
    if getattr(layout.megatron_impl, BASE_NAME, None) is None:
        return Judgement(NAME, NOT_APPLICABLE, f"{MEGATRON_IMPL} has no {BASE_NAME}")
    if layout.mindspeed_impl is None:
        why = "verl's MindSpeed engine module did not import (is MindSpeed installed?)"
        return Judgement(NAME, NOT_APPLICABLE, why)
    return Judgement(NAME, MISSING, f"verl registers nothing for {_key()}:")


def edits(engine_package: ModuleType) -> list[Edit]:
    """Upstream's class in upstream's module, registered, and the exports upstream has."""
    layout = read_layout(engine_package)
    value_head_engine = getattr(layout.megatron_impl, BASE_NAME)
    engine_class = build_engine_class(value_head_engine, layout.mindspeed_impl.__name__)
    return [
        Patch(layout.mindspeed_impl, CLASS_NAME, engine_class),
        Register(layout, KEY, engine_class),
        *(Export(package, CLASS_NAME, engine_class) for package in (engine_package, layout.mindspeed_package)),
        *(Export(package, BASE_NAME, value_head_engine) for package in (engine_package, layout.megatron_package)),
    ]


FIX = Fix(name=NAME, judge=judge, edits=edits, applied=f"registered {CLASS_NAME}({BASE_NAME})")


def _key() -> str:
    return "({model_type}, {backend}, {device})".format(**KEY)
