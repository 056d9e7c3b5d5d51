"""What the carried functions pass to verl and Megatron, against what upstream's fixed code passes.

The matrix runs them on real verl, but on tiny dense models at pipeline size 1 and with matching token ids, where
a wrong keyword or a dropped layer offset gives the same numbers. Here verl's and Megatron's functions are stand-ins
that record what they are given, held to upstream's code: verl 0.8.0's ``MegatronEngineWithValueHead.forward_step``
(#5870) and ``router_replay_utils.get_moe_num_layers_to_build`` (#5580).
"""

from __future__ import annotations

import inspect
import sys
from functools import partial
from types import ModuleType, SimpleNamespace

import pytest

from npu_shim.fixes import megatron_critic, moe_layer_offset


class Batch:
    device = None

    def to(self, device: str) -> Batch:
        self.device = device
        return self


@pytest.mark.parametrize("vision", [False, True])
@pytest.mark.parametrize("use_remove_padding", [True, False])
def test_the_critics_forward_passes_upstreams_keywords(monkeypatch, vision, use_remove_padding):
    calls = []

    def forward(*args, **kwargs):
        calls.append((args, kwargs))
        return "values"

    mcore = ModuleType("verl.models.mcore")
    mcore.get_mcore_forward_no_padding_fn = lambda hf_config: forward
    device = ModuleType("verl.utils.device")
    device.get_device_id = lambda: "npu:0"
    for name in ("verl", "verl.models", "verl.utils"):
        monkeypatch.setitem(sys.modules, name, ModuleType(name))
    monkeypatch.setitem(sys.modules, "verl.models.mcore", mcore)
    monkeypatch.setitem(sys.modules, "verl.utils.device", device)

    hf_config = SimpleNamespace(vision_config={}) if vision else SimpleNamespace()
    engine = SimpleNamespace(
        prepare_model_inputs=lambda batch: {"input_ids": "input ids", "multi_modal_inputs": {"pixels": 1}},
        # a tokenizer whose pad and eos differ: the pad id is the one upstream passes
        model_config=SimpleNamespace(hf_config=hf_config, tokenizer=SimpleNamespace(pad_token_id=7, eos_token_id=2)),
        engine_config=SimpleNamespace(use_remove_padding=use_remove_padding),
    )
    batch = Batch()
    values, postprocess = megatron_critic.value_forward_step(engine, iter([batch]), "model", print)

    assert values == "values"
    assert batch.device == "npu:0"
    assert calls == [
        (
            ("model", "input ids", {"pixels": 1}),
            {
                "value_model": True,
                "vision_model": vision,
                "pad_token_id": 7,
                "data_format": "thd" if use_remove_padding else "bshd",
            },
        )
    ]
    assert isinstance(postprocess, partial) and postprocess.func is print and postprocess.keywords == {"data": batch}


def offset_of_megatron_0_12(config):
    return config.offset


def offset_with_pp_rank(config, pp_rank=None):
    return config.offset


def offset_of_megatron_0_13(config, vp_stage=None, pp_rank=None):
    return config.offset


@pytest.mark.parametrize("offset_of", [offset_of_megatron_0_12, offset_with_pp_rank, offset_of_megatron_0_13])
def test_the_moe_layer_count_starts_at_this_stages_offset(monkeypatch, offset_of):
    """A second pipeline stage's layers 2 and 3 of four, where only layers 2 and up are MoE (first two dense)."""
    given = []

    def recording(config, **keywords):
        given.append(keywords)
        return offset_of(config, **keywords)

    recording.__signature__ = inspect.signature(offset_of)  # what the carry asks of the function it calls
    router_replay = ModuleType(moe_layer_offset.WATCHES)
    router_replay.get_num_layers_to_build = lambda config, vp_stage=None, pp_rank=None: 2
    router_replay.get_transformer_layer_offset = recording
    router_replay.is_moe_layer = lambda config, index: index >= 2
    monkeypatch.setitem(sys.modules, moe_layer_offset.WATCHES, router_replay)

    assert moe_layer_offset.moe_num_layers_to_build(SimpleNamespace(offset=2), vp_stage=0, pp_rank=1) == 2
    # each keyword where this Megatron takes it, as #5580's code passes them
    expected = {"offset_of_megatron_0_12": {}, "offset_with_pp_rank": {"pp_rank": 1}}
    assert given == [expected.get(offset_of.__name__, {"vp_stage": 0, "pp_rank": 1})]


def test_the_lm_engines_mesh_init_serves_a_users_subclass_too(monkeypatch):
    """The engine the fix patches may be subclassed (a user's engine): its repatch, then Megatron's mesh, once each.
    (The value engine's mesh init is the same function.)"""
    from npu_shim.fixes import shared_repatch

    calls = []
    monkeypatch.setattr(shared_repatch, "mindspeed_repatch", lambda config: calls.append(("repatch", config)))

    class MegatronEngine:  # Megatron's _init_device_mesh, as the patched engine's base has it
        engine_config = "engine config"

        def _init_device_mesh(self):
            calls.append(("mesh", type(self).__name__))

    class MindspeedEngineWithLMHead(MegatronEngine):
        pass

    MindspeedEngineWithLMHead._init_device_mesh = shared_repatch.repatch_then_init_device_mesh(
        MindspeedEngineWithLMHead
    )

    class UsersEngine(MindspeedEngineWithLMHead):
        pass

    for engine in (MindspeedEngineWithLMHead(), UsersEngine()):
        calls.clear()
        engine._init_device_mesh()
        assert calls == [("repatch", "engine config"), ("mesh", type(engine).__name__)]
