"""Backport of the LM-head engine's repatch placement (verl #5697, then #6135's shared function).

Mirrors: ``MindspeedEngineWithLMHead._init_device_mesh`` of verl >= 0.8.0: the repatch, then Megatron's mesh init.
Missing when: the class repatches at the end of ``__init__`` (0.6.x, 0.7.x): too late for MindSpeed (docs/fixes.md).
Does: drops that ``__init__`` (Megatron's is inherited) and adds upstream's ``_init_device_mesh``.
"""

from __future__ import annotations

from types import ModuleType

from npu_shim.fixes.shared_repatch import repatch_then_init_device_mesh
from npu_shim.patcher import Fix, Writer, is_ours
from npu_shim.recognition import KnownFunction

NAME = "lm_engine_repatch"
CLASS_NAME = "MindspeedEngineWithLMHead"
MESH_INIT = "_init_device_mesh"


def repatches_in_mesh_init(engine_class: type) -> str:
    """Why verl's LM engine has the change whatever its ``__init__``: its own ``_init_device_mesh`` (``""`` if none)."""
    own_mesh_init = vars(engine_class).get(MESH_INIT)
    if own_mesh_init is None or is_ours(own_mesh_init):
        return ""
    return f"{CLASS_NAME} already repatches in _init_device_mesh (verl #5697; #5700 on release/v0.7.1)"


LM_INIT = KnownFunction(
    fix=NAME,
    source=f"verl/workers/engine/mindspeed/transformer_impl.py:{CLASS_NAME}.__init__",
    missing_in=("0.6.0", "0.6.1", "0.7.0", "0.7.1"),
    fixed_in=(),  # the change moves the repatch out of __init__: a release with it has its own _init_device_mesh
    change="the repatch before the device mesh (verl #5697)",
    if_left="at context-parallel size >= 2 the actor fails at its first forward on MindSpeed "
    "(its context-parallel ranks are not initialized)",
    has_change=repatches_in_mesh_init,
    needed_on_any_version=True,  # no _init_device_mesh of its own: the repatch is in __init__, after the mesh
)


def edit(engine_package: ModuleType, writer: Writer) -> None:
    engine_class = LM_INIT.owner()
    writer.remove(engine_class, "__init__")
    writer.bind(engine_class, MESH_INIT, repatch_then_init_device_mesh(engine_class))


FIX = Fix(
    name=NAME,
    judge=lambda engine_package: LM_INIT.judge(LM_INIT.owner()),
    edit=edit,
    applied="is dropped: the engine now repatches in _init_device_mesh, once, on a copy of the config",
    known=(LM_INIT,),
)
