"""Backport of ``_mindspeed_repatch`` (verl #6135, with #6674's semantics as in verl 0.9.x).

Mirrors: upstream's function, but with ``use_flash_attn`` set per MindSpeed line (:mod:`npu_shim.mindspeed_line`).
Missing when: verl's MindSpeed engine module has no ``_mindspeed_repatch`` (verl < 0.8.0).
Does: binds :func:`mindspeed_repatch` there under upstream's name, for the engines npu_shim adds and anyone calling it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from npu_shim import mindspeed_line
from npu_shim.patcher import MISSING, NATIVE, NOT_APPLICABLE, Fix, Outcome, Writer

NAME = "shared_repatch"
UPSTREAM_NAME = "_mindspeed_repatch"
MINDSPEED_IMPL = "verl.workers.engine.mindspeed.transformer_impl"


def mindspeed_repatch(engine_config: Any) -> None:
    """Re-run MindSpeed's Megatron patches for this engine's config before ``_init_device_mesh`` initialises
    Megatron's parallel state: MindSpeed wraps it for context parallelism only if its patches see the CP size."""
    # The `repatch` verl's own module bound (None without MindSpeed), looked up per call: importing mindspeed here
    # would patch Megatron out of order.
    repatch = getattr(sys.modules.get(MINDSPEED_IMPL), "repatch", None)
    if repatch is None:
        return
    config = dict(engine_config.get("override_transformer_config", None) or {})  # never the user's dict
    backend = config.get("attention_backend")
    if isinstance(backend, str):
        from megatron.core.transformer.enums import AttnBackend  # loaded, and patched, by the time engines are built

        try:
            config["attention_backend"] = AttnBackend[backend]
        except KeyError:
            choices = ", ".join(member.name for member in AttnBackend)
            raise ValueError(
                f"override_transformer_config.attention_backend={backend!r} is not a Megatron AttnBackend; "
                f"use one of: {choices}"
            ) from None
    if engine_config.context_parallel_size > 1:
        config["context_parallel_size"] = engine_config.context_parallel_size
    mindspeed_line.fit(config)  # use_flash_attn as upstream sets it, but for this MindSpeed line and process
    repatch(config)
    mindspeed_line.refuse_training_arguments(config)  # core_r0.18.0's double-ring options, refused before the mesh


def repatch_then_init_device_mesh(engine_class: type) -> Callable[[Any], None]:
    """Upstream's ``_init_device_mesh`` of a MindSpeed engine (LM or value head): the repatch, then the base's."""

    def _init_device_mesh(self: Any) -> None:
        mindspeed_repatch(self.engine_config)
        super(engine_class, self)._init_device_mesh()

    _init_device_mesh.__qualname__ = f"{engine_class.__qualname__}._init_device_mesh"
    return _init_device_mesh


def judge(engine_package: ModuleType) -> Outcome:
    """Not a fingerprint: it binds a name verl lacks, so it checks that verl's MindSpeed module has none."""
    module = sys.modules.get(MINDSPEED_IMPL)
    if module is None:
        return Outcome(NAME, NOT_APPLICABLE, "verl's MindSpeed engine module did not import")
    if getattr(module, UPSTREAM_NAME, None) is not None:
        return Outcome(NAME, NATIVE, f"{MINDSPEED_IMPL}.{UPSTREAM_NAME} exists (verl >= 0.8.0)")
    return Outcome(NAME, MISSING, f"{MINDSPEED_IMPL} has no {UPSTREAM_NAME} (verl < 0.8.0):")


def edit(engine_package: ModuleType, writer: Writer) -> None:
    writer.bind(sys.modules[MINDSPEED_IMPL], UPSTREAM_NAME, mindspeed_repatch)


FIX = Fix(name=NAME, judge=judge, edit=edit, applied="bound npu_shim's")
