"""verl #7507 (open, no upstream fix): a Ray worker sets its NPU by the place of Ray's id in ASCEND_RT_VISIBLE_DEVICES.

Mirrors: verl #7507: where Ray leaves that variable alone, the place in it of a worker's Ray id is its device index.
Missing when: ``Worker._setup_env_cuda_visible_devices`` is a release's and both that variable and
``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES`` are set: verl sets Ray's physical id as the device (docs/fixes.md).
Does: rebinds it to :func:`setup_env_visible_devices`: verl's own code, reading Ray's NPU ids as their places ("1").
"""

from __future__ import annotations

import os
import sys
from typing import Any

from npu_shim.patcher import get_original, with_globals
from npu_shim.recognition import Rebinding

NAME = "ray_npu_device_index"
WATCHES = "verl.single_controller.base.worker"
CLASS_NAME = "Worker"
METHOD = "_setup_env_cuda_visible_devices"
NOSET = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"
VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"
RESOURCE = "NPU"  # Ray's resource name for Ascend NPUs, the key verl reads its id under


def visible_devices(environ: Any = os.environ) -> list[str] | None:
    """The devices the worker sees where Ray's NPU ids are physical ids among them; None where verl's id is right."""
    listed = environ.get(VISIBLE)
    if not environ.get(NOSET) or not listed:  # verl's test of the variable: any value but ""
        return None
    return [entry.strip() for entry in listed.split(",")]


def device_index(accelerator_id: str, visible: list[str]) -> str:
    """Ray's ``accelerator_id`` as its index among ``visible`` (``"5"`` of ``4,5,6,7``: ``"1"``); else as it is."""
    key = str(accelerator_id).strip()
    return str(visible.index(key)) if key in visible else accelerator_id


class _ContextWithIndices:
    """Ray's runtime context, but for its ``NPU`` ids: their indices among the visible devices."""

    def __init__(self, context: Any, visible: list[str]) -> None:
        self._context, self._visible = context, visible

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def get_accelerator_ids(self) -> Any:
        ids = dict(self._context.get_accelerator_ids())
        if RESOURCE in ids:
            ids[RESOURCE] = [device_index(accelerator_id, self._visible) for accelerator_id in ids[RESOURCE]]
        return ids


class _RayWithIndices:
    """The ``ray`` module for verl's function: the same in all but its runtime context's NPU ids."""

    def __init__(self, ray: Any, visible: list[str]) -> None:
        self._ray, self._visible = ray, visible

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ray, name)

    def get_runtime_context(self) -> _ContextWithIndices:
        return _ContextWithIndices(self._ray.get_runtime_context(), self._visible)


def setup_env_visible_devices(self: Any) -> Any:
    """verl's ``Worker._setup_env_cuda_visible_devices``, with Ray's NPU id translated where it is physical."""
    own = get_original(getattr(sys.modules[WATCHES], CLASS_NAME), METHOD)
    visible = visible_devices()
    if visible is None:
        return own(self)
    return with_globals(own, ray=_RayWithIndices(own.__globals__["ray"], visible))(self)


setup_env_visible_devices.__qualname__ = f"{CLASS_NAME}.{METHOD}"  # where it lives once applied


def _needs_nothing(owner: Any) -> str:
    if not os.environ.get(NOSET):
        return f"{NOSET} is not set: Ray gives each NPU worker its own {VISIBLE}, and verl never reads Ray's id"
    if not os.environ.get(VISIBLE):
        return f"{VISIBLE} is not set: Ray's NPU ids are the device indices"
    return ""


SETUP = Rebinding(
    fix=NAME,
    source=f"verl/single_controller/base/worker.py:{CLASS_NAME}.{METHOD}",
    missing_in=("0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1"),
    change="verl #7507 (open)",
    if_left=f"a Ray worker whose NPU id is not its index in {VISIBLE} dies in set_device with torch_npu's "
    "'Invalid device ID', or takes another worker's NPU",
    breaks_critic=True,  # every Ray worker of verl, a critic's too, dies in set_device or takes another NPU
    needs_nothing=_needs_nothing,
    replacement=setup_env_visible_devices,
    applied=f"now sets the NPU by the place of Ray's id in {VISIBLE}",
)
FIX = SETUP.as_fix(WATCHES)
