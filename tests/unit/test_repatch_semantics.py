"""``mindspeed_repatch`` matches upstream's newest ``_mindspeed_repatch`` (verl 0.9.x, #6135 + #6674)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from synthetic_verl import SYNTHETIC_MEGATRON, _write

from npu_shim.fixes.shared_repatch import MINDSPEED_IMPL, mindspeed_repatch


class EngineConfig(dict):
    def __init__(self, override: dict | None = None, context_parallel_size: int = 1) -> None:
        super().__init__(override_transformer_config=override if override is not None else {})
        self.context_parallel_size = context_parallel_size


@pytest.fixture
def calls(monkeypatch, tmp_path) -> list[dict]:
    """verl's MindSpeed module with a recording ``repatch``, and a synthetic megatron for ``AttnBackend``."""
    recorded: list[dict] = []
    monkeypatch.setitem(sys.modules, MINDSPEED_IMPL, SimpleNamespace(repatch=recorded.append))
    monkeypatch.syspath_prepend(str(_write(tmp_path, SYNTHETIC_MEGATRON)))
    for name in [m for m in sys.modules if m == "megatron" or m.startswith("megatron.")]:
        monkeypatch.delitem(sys.modules, name)
    return recorded


def test_defaults_to_flash_attention(calls):
    mindspeed_repatch(EngineConfig())
    assert calls == [{"use_flash_attn": True}]


def test_an_explicit_use_flash_attn_is_kept(calls):
    mindspeed_repatch(EngineConfig({"use_flash_attn": False}))
    assert calls == [{"use_flash_attn": False}]


def test_works_on_a_copy_of_the_users_config(calls):
    user = {"attention_backend": "fused", "seq_length": 8}
    mindspeed_repatch(EngineConfig(user))
    assert user == {"attention_backend": "fused", "seq_length": 8}
    assert calls[0] is not user


@pytest.mark.parametrize(
    "user", [{"seq_length": 8}, {"use_flash_attn_npu_batch_invariant": True}, {"use_flash_attn": False}]
)
def test_never_writes_into_the_users_config(calls, user):
    """Whatever the config holds (no attention_backend to map included): MindSpeed gets a copy."""
    before = dict(user)
    mindspeed_repatch(EngineConfig(user, context_parallel_size=2))
    assert user == before
    assert calls[0] is not user


def test_a_string_attention_backend_becomes_megatrons_enum(calls):
    mindspeed_repatch(EngineConfig({"attention_backend": "flash"}))
    from megatron.core.transformer.enums import AttnBackend

    assert calls == [{"attention_backend": AttnBackend.flash, "use_flash_attn": True}]


def test_an_unknown_attention_backend_is_a_clear_error(calls):
    with pytest.raises(
        ValueError, match=r"attention_backend='flashy' is not a Megatron AttnBackend; use one of: flash"
    ):
        mindspeed_repatch(EngineConfig({"attention_backend": "flashy"}))
    assert calls == []


def test_batch_invariant_flash_attention_turns_fusion_attention_off(calls):
    mindspeed_repatch(EngineConfig({"use_flash_attn_npu_batch_invariant": True, "use_flash_attn": True}))
    assert calls == [{"use_flash_attn_npu_batch_invariant": True, "use_flash_attn": False}]


@pytest.mark.parametrize(
    ("size", "expected"), [(1, {"use_flash_attn": True}), (4, {"use_flash_attn": True, "context_parallel_size": 4})]
)
def test_context_parallel_size_only_when_above_one(calls, size, expected):
    mindspeed_repatch(EngineConfig(context_parallel_size=size))
    assert calls == [expected]


class UnreadConfig:
    """An engine config that fails the test if anything of it is read."""

    def get(self, *args: object) -> None:
        raise AssertionError("the engine config was read")

    @property
    def context_parallel_size(self) -> int:
        raise AssertionError("the engine config was read")


def test_nothing_when_mindspeed_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, MINDSPEED_IMPL, SimpleNamespace(repatch=None))
    assert mindspeed_repatch(UnreadConfig()) is None  # returned before reading the config


def test_a_repatch_that_raises_fails_engine_construction_as_upstream(synthetic, run_with):
    code = """
    import mindspeed.megatron_adaptor as adaptor
    def failing(config):
        raise RuntimeError("MindSpeed refused the config")
    adaptor.repatch = failing
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.megatron.transformer_impl import EngineConfig
    try:
        EngineRegistry.new("value_model", "megatron", None, EngineConfig({}), None, None)
    except RuntimeError as error:
        print(repr(error))
    """
    run = run_with(code, synthetic("0.7.1"))
    assert run.stdout.splitlines()[0] == "RuntimeError('MindSpeed refused the config')"
