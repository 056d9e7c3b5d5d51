"""What npu_shim reads of verl's registry (value_engine.VerlLayout), on every shape verl's has had; the names
the start-up files share with the package."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from npu_shim.fixes.value_engine import VerlLayout


class Engine:
    pass


def layout_over(slots: dict) -> VerlLayout:
    registry = SimpleNamespace(_engines={"value_model": {"megatron": slots}})
    return VerlLayout(registry=registry, megatron_impl=None, mindspeed_impl=None)


@pytest.mark.parametrize("key", ["npu", ("npu", "ascend"), ("npu",)])
def test_a_key_of_the_device_or_of_the_device_and_a_vendor_is_registered(key):
    """verl >= 0.9 registers with vendor=: its keys may be (device, vendor) tuples, tried first by its lookup."""
    assert layout_over({key: Engine}).registered("value_model", "megatron", "npu") is Engine


@pytest.mark.parametrize("key", ["cuda", ("cuda", "npu"), ("nvidia",)])
def test_another_device_is_not(key):
    assert layout_over({key: Engine}).registered("value_model", "megatron", "npu") is None
    assert layout_over({}).registered("critic", "megatron", "npu") is None


def test_the_start_up_files_spell_what_they_share_with_the_package_as_it_does():
    """The bootstrap (outside the package, in Python 2.7's syntax) cannot import npu_shim.settings: its copies of the
    names must be the package's."""
    import re

    from npu_shim import settings

    folder = Path(settings.PACKAGE_DIR).parent / settings.BOOTSTRAP
    site = (folder / "sitecustomize.py").read_text(encoding="utf-8")
    chain = (folder / "_npu_shim_chain.py").read_text(encoding="utf-8")
    assert set(re.findall(r'"(NPU_SHIM_[A-Z_]+)"', site + chain)) == {"NPU_SHIM_DISABLE"}
    assert "NPU_SHIM_DISABLE" in settings.SWITCHES
    assert settings.BOOTSTRAP_MARKER in site
    assert f'MARKER = "{settings.BOOTSTRAP_MARKER}"' in chain
    assert re.search(rf"^{settings.WAITING} = \(\"verl\", \"megatron\"\)$", site, re.M)
