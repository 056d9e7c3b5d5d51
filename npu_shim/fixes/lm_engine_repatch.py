"""Backport of the LM-head engine's repatch placement (verl #5697, then #6135's shared function).

Mirrors: ``MindspeedEngineWithLMHead._init_device_mesh`` in verl >= 0.8.0, which
runs ``_mindspeed_repatch(self.engine_config)`` and then Megatron's own
``_init_device_mesh``.
Missing when: ``MindspeedEngineWithLMHead`` defines no ``_init_device_mesh`` and
repatches at the end of ``__init__`` instead (0.6.x, 0.7.x): after Megatron's
parallel state exists, too late for MindSpeed's context-parallel wrapper; 0.7.1
also writes ``use_flash_attn`` into the user's ``override_transformer_config``.
Does: drops that ``__init__`` (the class then inherits Megatron's, as upstream's
effectively does) and adds upstream's ``_init_device_mesh``. It acts only on an
``__init__`` whose code is exactly a known release's (bytecode and constants:
:mod:`npu_shim.fingerprint`), so a verl that changed it, even one constant, is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from npu_shim import fingerprint
from npu_shim.changes import ChangeSet
from npu_shim.fixes import ALREADY_APPLIED, APPLIED, NATIVE, NOT_APPLICABLE, Outcome, is_ours, mark_as_ours
from npu_shim.fixes.shared_repatch import mindspeed_repatch
from npu_shim.layout import VerlLayout

NAME = "lm_engine_repatch"
CLASS_NAME = "MindspeedEngineWithLMHead"
# code_fingerprint(MindspeedEngineWithLMHead.__init__.__code__) of the PyPI releases, per Python
# minor version (bytecode differs between them); from scripts/fingerprints.py. A Python
# not listed here recognises nothing: the fix then says "not applicable" and leaves verl alone.
KNOWN_INITS: fingerprint.KnownCode = {
    (3, 10): {
        "22b42823b07e892aaf63426c0e3f6b2e": "0.6.0, 0.6.1, 0.7.0",
        "8a4e66cc8c914ea4693093963c1b3a20": "0.7.1",
    },
    (3, 11): {
        "7bd88482d92bdbb24b7ecb947439a32c": "0.6.0, 0.6.1, 0.7.0",
        "5e4dac957ef41570bba26bd179a91ce2": "0.7.1",
    },
    (3, 12): {
        "2fb785936ca945b3aedc0e910de36637": "0.6.0, 0.6.1, 0.7.0",
        "fdbdf8a6fbcdde6a68adfc4d6ecc103c": "0.7.1",
    },
    (3, 13): {
        "eda81d5156d319b1d2cd0f5657e5911e": "0.6.0, 0.6.1, 0.7.0",
        "48750f450013ed93bc67b099d69e1519": "0.7.1",
    },
}


def known_release(init: Any) -> str | None:
    """The verl releases whose ``MindspeedEngineWithLMHead.__init__`` has exactly this code, or None."""
    return fingerprint.known_release(init, KNOWN_INITS)


def repatch_then_init_device_mesh(engine_class: type) -> Callable[[Any], None]:
    def _init_device_mesh(self: Any) -> None:
        mindspeed_repatch(self.engine_config)
        super(engine_class, self)._init_device_mesh()

    mark_as_ours(_init_device_mesh)
    _init_device_mesh.__qualname__ = f"{engine_class.__qualname__}._init_device_mesh"
    return _init_device_mesh


def apply(layout: VerlLayout, changes: ChangeSet) -> Outcome:
    engine_class = getattr(layout.mindspeed_impl, CLASS_NAME, None)
    if engine_class is None:
        return Outcome(NAME, NOT_APPLICABLE, f"verl has no {CLASS_NAME}")
    own_mesh_init = engine_class.__dict__.get("_init_device_mesh")
    if own_mesh_init is not None:
        if is_ours(own_mesh_init):
            return Outcome(NAME, ALREADY_APPLIED, f"{CLASS_NAME}._init_device_mesh was added earlier in this process")
        why = f"{CLASS_NAME} already repatches in _init_device_mesh (verl #5697; #5700 on release/v0.7.1)"
        return Outcome(NAME, NATIVE, why)
    release = known_release(engine_class.__dict__.get("__init__"))
    if release is None:
        return Outcome(
            NAME, NOT_APPLICABLE, f"{CLASS_NAME}.__init__ is not the code of verl 0.6.0-0.7.1; left as verl ships it"
        )
    changes.delattr(engine_class, "__init__")
    changes.setattr(engine_class, "_init_device_mesh", repatch_then_init_device_mesh(engine_class))
    return Outcome(
        NAME,
        APPLIED,
        f"{CLASS_NAME} (__init__ of verl {release}) now repatches in _init_device_mesh, once, on a copy of the config",
    )
