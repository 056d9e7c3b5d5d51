"""What npu_shim reads of verl's registry (npu_shim.layout), on registries of every shape verl has had."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from npu_shim.layout import VerlLayout


class Engine:
    pass


def layout_over(slots: dict) -> VerlLayout:
    registry = SimpleNamespace(_engines={"value_model": {"megatron": slots}})
    return VerlLayout(engine_package=ModuleType("engine"), registry=registry, megatron_impl=None, mindspeed_impl=None)


@pytest.mark.parametrize("key", ["npu", ("npu", "ascend"), ("npu",)])
def test_a_key_of_the_device_or_of_the_device_and_a_vendor_is_registered(key):
    """verl >= 0.9 registers with vendor=: its keys may be (device, vendor) tuples, tried first by its lookup."""
    assert layout_over({key: Engine}).registered("value_model", "megatron", "npu") is Engine


@pytest.mark.parametrize("key", ["cuda", ("cuda", "npu"), ("nvidia",)])
def test_another_device_is_not(key):
    assert layout_over({key: Engine}).registered("value_model", "megatron", "npu") is None
    assert layout_over({}).registered("critic", "megatron", "npu") is None


def test_every_place_that_names_the_switches_names_the_same_ones():
    """npu_shim's __init__ spells the switch names out, the start-up files the one they read (NPU_SHIM_DISABLE):
    none of them may import npu_shim.switches."""
    import re

    from npu_shim import _SWITCHES, switches
    from npu_shim.bootstrap import _npu_shim_chain

    bootstrap = (Path(switches.__file__).parent / "bootstrap" / "sitecustomize.py").read_text(encoding="utf-8")
    assert set(re.findall(r'"(NPU_SHIM_[A-Z_]+)"', bootstrap)) == {_npu_shim_chain.DISABLE} == {"NPU_SHIM_DISABLE"}
    assert set(switches.SWITCHES) == _SWITCHES
