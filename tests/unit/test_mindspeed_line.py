"""``use_flash_attn`` per MindSpeed line, and what earlier engines in the process left on (npu_shim.mindspeed_line).

A small fake of the two functions npu_shim reads from ``mindspeed.args_utils`` (the options a
line knows, and the one argument namespace ``repatch`` writes to), behind a ``repatch`` that
keeps every key as MindSpeed does. The real behaviour per line is held by tests/kit and tests/matrix.
"""

from __future__ import annotations

import logging
import sys
from argparse import Namespace
from types import SimpleNamespace

import pytest
from test_repatch_semantics import EngineConfig

import npu_shim.mindspeed_line as mindspeed_line  # noqa: PLR0402 - `from npu_shim import` would activate the shim
from npu_shim.fixes.shared_repatch import MINDSPEED_IMPL, mindspeed_repatch

KEY = "use_flash_attn_npu_batch_invariant"
IGNORED = f"override_transformer_config.{KEY}=True: this MindSpeed has no batch-invariant flash attention"
INHERITED = f"MindSpeed's batch-invariant flash attention ({KEY}) was turned on earlier in this process"


class FakeMindSpeed:
    """One process's MindSpeed: the options of its line, one namespace, a repatch that only adds keys."""

    def __init__(self, batch_invariant: bool) -> None:
        # MindSpeed's own options only: Megatron's (use_flash_attn, context_parallel_size) have no default there
        self.defaults: dict = {"optimization_level": 2, "cp_window_size": 1}
        if batch_invariant:
            self.defaults[KEY] = False
        self.args = Namespace(**self.defaults)
        self.calls: list[dict] = []

    def get_mindspeed_args(self, get_defaults: bool = False) -> Namespace:
        return Namespace(**self.defaults) if get_defaults else self.args

    def get_full_args(self) -> Namespace:
        return self.args

    def repatch(self, config: dict) -> None:
        self.calls.append(dict(config))
        for key, value in config.items():
            setattr(self.args, key, value)


@pytest.fixture
def process(monkeypatch):
    """A fresh process: no keys passed yet, no warning given yet."""
    monkeypatch.setattr(mindspeed_line, "_passed", set())
    monkeypatch.setattr(sys.modules["npu_shim.settings"], "_warned", set())

    def with_mindspeed(batch_invariant: bool) -> FakeMindSpeed:
        fake = FakeMindSpeed(batch_invariant)
        args_utils = SimpleNamespace(get_mindspeed_args=fake.get_mindspeed_args, get_full_args=fake.get_full_args)
        monkeypatch.setitem(sys.modules, mindspeed_line.ARGS_UTILS, args_utils)
        monkeypatch.setitem(sys.modules, MINDSPEED_IMPL, SimpleNamespace(repatch=fake.repatch))
        return fake

    return with_mindspeed


def warnings_of(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "npu_shim"]


def test_without_the_feature_the_key_keeps_fusion_attention_and_says_so_once(process, caplog):
    mindspeed = process(batch_invariant=False)
    with caplog.at_level(logging.WARNING, logger="npu_shim"):
        mindspeed_repatch(EngineConfig({KEY: True}))
        mindspeed_repatch(EngineConfig({KEY: True}))
    assert mindspeed.calls == [{KEY: True, "use_flash_attn": True}] * 2
    assert [message.startswith(IGNORED) and message.endswith("stays on") for message in warnings_of(caplog)] == [True]


def test_without_the_feature_an_explicit_use_flash_attn_false_is_kept(process, caplog):
    mindspeed = process(batch_invariant=False)
    with caplog.at_level(logging.WARNING, logger="npu_shim"):
        mindspeed_repatch(EngineConfig({KEY: True, "use_flash_attn": False}))
    assert mindspeed.calls == [{KEY: True, "use_flash_attn": False}]
    assert warnings_of(caplog)[0].endswith("stays off, as the config sets it")


def test_with_the_feature_the_key_turns_fusion_attention_off_as_upstream(process, caplog):
    mindspeed = process(batch_invariant=True)
    with caplog.at_level(logging.WARNING, logger="npu_shim"):
        mindspeed_repatch(EngineConfig({KEY: True, "use_flash_attn": True}))
    assert mindspeed.calls == [{KEY: True, "use_flash_attn": False}]
    assert warnings_of(caplog) == []


def test_a_key_an_earlier_engine_set_keeps_fusion_attention_off_for_the_next(process, caplog):
    mindspeed = process(batch_invariant=True)
    with caplog.at_level(logging.WARNING, logger="npu_shim"):
        mindspeed_repatch(EngineConfig({KEY: True}))  # the critic
        mindspeed_repatch(EngineConfig({"use_flash_attn": True}))  # the ref, then the actor
        mindspeed_repatch(EngineConfig())
    assert mindspeed.calls[1:] == [{"use_flash_attn": False}] * 2
    assert [message.startswith(INHERITED) for message in warnings_of(caplog)] == [True]


def test_a_later_engine_that_turns_the_key_off_gets_fusion_attention_back(process):
    mindspeed = process(batch_invariant=True)
    mindspeed_repatch(EngineConfig({KEY: True}))
    mindspeed_repatch(EngineConfig({KEY: False}))
    assert mindspeed.calls[1] == {KEY: False, "use_flash_attn": True}


def test_other_keys_an_earlier_engine_set_are_named_once(process, caplog):
    process(batch_invariant=False)
    with caplog.at_level(logging.WARNING, logger="npu_shim"):
        mindspeed_repatch(EngineConfig({"recompute_method": "uniform"}, context_parallel_size=2))
        mindspeed_repatch(EngineConfig())
        mindspeed_repatch(EngineConfig())
    named = [message.split(" does not set ")[1].split(",")[0] for message in warnings_of(caplog)]
    assert named == ["context_parallel_size", "recompute_method"]


def test_a_key_set_back_to_its_default_is_not_named(process, caplog):
    process(batch_invariant=False)
    with caplog.at_level(logging.WARNING, logger="npu_shim"):
        mindspeed_repatch(EngineConfig({"cp_window_size": 1}))
        mindspeed_repatch(EngineConfig())
    assert warnings_of(caplog) == []


@pytest.mark.parametrize("inherited", [False, True])
def test_batch_invariant_attention_with_context_parallelism_is_refused_where_mindspeed_has_it(process, inherited):
    """It would replace MindSpeed's ring attention: each CP rank attending to its own chunk only."""
    mindspeed = process(batch_invariant=True)
    if inherited:  # an earlier engine of the process set the key
        mindspeed_repatch(EngineConfig({KEY: True}))
    with pytest.raises(ValueError, match=rf"^override_transformer_config.{KEY}=True with context_parallel_size=2: "):
        mindspeed_repatch(EngineConfig({} if inherited else {KEY: True}, context_parallel_size=2))
    assert len(mindspeed.calls) == int(inherited), "MindSpeed was not asked"


def test_where_mindspeed_has_no_batch_invariant_attention_the_key_does_not_stop_context_parallelism(process):
    mindspeed = process(batch_invariant=False)
    mindspeed_repatch(EngineConfig({KEY: True}, context_parallel_size=2))
    assert mindspeed.calls == [{KEY: True, "context_parallel_size": 2, "use_flash_attn": True}]


def test_a_mindspeed_it_cannot_read_gets_upstreams_behaviour(process, monkeypatch):
    mindspeed = process(batch_invariant=False)

    def unreadable(get_defaults: bool = False) -> Namespace:
        raise AssertionError("args is not initialized.")

    monkeypatch.setattr(sys.modules[mindspeed_line.ARGS_UTILS], "get_mindspeed_args", unreadable)
    mindspeed_repatch(EngineConfig({KEY: True}))
    assert mindspeed.calls == [{KEY: True, "use_flash_attn": False}]
    assert mindspeed_line.has_batch_invariant_attention() is None


@pytest.mark.parametrize("batch_invariant", [True, False])
def test_has_batch_invariant_attention_reads_the_lines_options(process, batch_invariant):
    process(batch_invariant=batch_invariant)
    assert mindspeed_line.has_batch_invariant_attention() is batch_invariant


def test_a_context_parallel_size_an_earlier_engine_set_refuses_batch_invariant_attention_later(process):
    """The critic at CP 2, then the actor with the key at CP 1: MindSpeed still holds CP 2, so the pair is on.

    The shim's repatch hands MindSpeed the CP size only above 1, so the actor's call leaves the
    critic's 2 in MindSpeed's arguments: the refusal must read them, not the actor's config alone.
    """
    mindspeed = process(batch_invariant=True)
    mindspeed_repatch(EngineConfig(context_parallel_size=2))
    with pytest.raises(ValueError, match=rf"^override_transformer_config.{KEY}=True with context_parallel_size=2: "):
        mindspeed_repatch(EngineConfig({KEY: True}))
    assert len(mindspeed.calls) == 1, "MindSpeed was not asked"
    # An engine that sets the size back to 1 itself (in its override_transformer_config) gets the pair.
    mindspeed_repatch(EngineConfig({KEY: True, "context_parallel_size": 1}))
    assert mindspeed.calls[1] == {KEY: True, "context_parallel_size": 1, "use_flash_attn": False}
