"""The MindSpeed stand-in of simulated_npu, held to MindSpeed's behaviour on the real megatron-core.

If one of these fails, the kit (not the shim) has regressed: the matrix tests lean on
each property below to tell a repatch that works from one that only looks right.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import pytest
from helpers import clean_env, run_ranks

from simulated_npu import simulated_npu_env

pytest_plugins = ["simulated_npu.pytest_plugin"]

BATCH_INVARIANT = {"use_flash_attn": True, "use_flash_attn_npu_batch_invariant": True}


@pytest.fixture
def megatron(repatch_calls):  # repatch_calls: the stand-in starts, and is left, as in a fresh process
    import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)
    from megatron.core import parallel_state
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from mindspeed.args_utils import get_mindspeed_args

    # Megatron's own forward: from import on, MindSpeed's generate-mask feature wraps it (below CP 2)
    original = (parallel_state.initialize_model_parallel, DotProductAttention.forward.__wrapped__)
    yield types.SimpleNamespace(
        parallel_state=parallel_state,
        attention=DotProductAttention,
        repatch=megatron_adaptor.repatch,
        args=get_mindspeed_args,
        original_initialize=original[0],
        original_forward=original[1],
    )
    from simulated_npu import fresh_mindspeed

    fresh_mindspeed()
    assert (parallel_state.initialize_model_parallel, DotProductAttention.forward.__wrapped__) == original


@pytest.fixture
def on_a_ring_line(megatron):
    """For the tests that watch MindSpeed's CP wrapper: a line that has it, whatever line this process started as
    (``core_r0.18.0`` in the environment of Megatron 0.18, which has none)."""
    from simulated_npu import fresh_mindspeed, mindspeed_line

    started = mindspeed_line()
    fresh_mindspeed("core_r0.16.0")
    yield megatron
    fresh_mindspeed(started)


def test_arguments_persist_between_calls_until_overwritten(on_a_ring_line):
    megatron = on_a_ring_line
    megatron.repatch({"context_parallel_size": 2})
    megatron.repatch({"use_flash_attn": True})
    assert (megatron.args().context_parallel_size, megatron.args().use_flash_attn) == (2, True)
    assert megatron.parallel_state.initialize_model_parallel.__wrapped__ is megatron.original_initialize
    assert attention()[1] == "forward", "CP 2 persisted: MindSpeed's CP class, no fusion attention"
    megatron.repatch({"context_parallel_size": 1})
    assert megatron.parallel_state.initialize_model_parallel is megatron.original_initialize
    assert attention() == (MEGATRON_CLASS, "dot_product_attention_forward"), "use_flash_attn persisted"


@pytest.mark.parametrize("line", ["core_r0.16.0"], indirect=True)  # the one line with batch-invariant attention
def test_fusion_and_batch_invariant_attention_together_raise_as_mindspeed_does(line, megatron):
    with pytest.raises(RuntimeError, match=r"^the patch of forward exist !$"):
        megatron.repatch(BATCH_INVARIANT)
    assert megatron.attention.forward is megatron.original_forward, "the failed call leaves the patches removed"
    with pytest.raises(RuntimeError, match="the patch of forward exist"):
        megatron.repatch({})  # both keys persist: every later call fails the same way
    megatron.repatch({"use_flash_attn": False})
    assert megatron.attention.forward.__name__ == "dot_product_attention_forward_batch_invariant"


def test_patched_attention_has_no_kernel_behind_it(megatron):
    megatron.repatch({"use_flash_attn": True})
    layer = types.SimpleNamespace(attn_mask_type=None, config=None)
    with pytest.raises(RuntimeError, match="npu_fusion_attention: simulated NPU"):
        megatron.attention.forward(layer, None, None, None, "a mask")


def test_unknown_keys_are_stored_and_a_config_that_is_not_a_mapping_fails_as_in_mindspeed(megatron, repatch_calls):
    from mindspeed.args_utils import get_full_args  # what npu_shim reads (npu_shim.mindspeed_line)

    megatron.repatch({"no_such_mindspeed_option": 3})
    megatron.repatch({"use_flash_attn": True})  # a later call without the key: MindSpeed keeps what it was given
    assert get_full_args().no_such_mindspeed_option == 3
    # the line's own options (how npu_shim tells the lines apart) do not grow with what a call stored
    assert not hasattr(megatron.args(get_defaults=True), "no_such_mindspeed_option")
    for not_a_mapping in (argparse.Namespace(context_parallel_size=2), ["context_parallel_size", 2]):
        with pytest.raises(AttributeError, match="items"):
            megatron.repatch(not_a_mapping)
    assert not hasattr(megatron.args(), "context_parallel_size"), "a failed call sets nothing"
    assert len(repatch_calls) == 4, "every call is recorded, the failed ones too"


def test_copies_bound_by_from_import_are_patched_and_restored_too(on_a_ring_line):
    megatron = on_a_ring_line
    copy = types.ModuleType("npu_shim_test_copy")
    copy.initialize_model_parallel = megatron.original_initialize
    sys.modules[copy.__name__] = copy
    try:
        megatron.repatch({"context_parallel_size": 2})
        assert copy.initialize_model_parallel is megatron.parallel_state.initialize_model_parallel
        assert copy.initialize_model_parallel is not megatron.original_initialize
        megatron.repatch({"context_parallel_size": 1})
        assert copy.initialize_model_parallel is megatron.original_initialize
    finally:
        del sys.modules[copy.__name__]


def test_ring_windows_split_a_ring_as_mindspeed_does(simulated_npu):
    from mindspeed.core.context_parallel import model_parallel_utils as cp

    try:
        cp.build_ring_state(rank=1, ring=[0, 1, 2, 3], window_size=2)
        assert cp.ring_state() == {"intra_window": [0, 1], "inter_window_kv": [1, 3], "inter_window_dkv": [1, 2]}
        cp.build_ring_state(rank=3, ring=[0, 1, 2, 3], window_size=1)
        assert cp.ring_state() == {
            "intra_window": [3],
            "inter_window_kv": [0, 1, 2, 3],
            "inter_window_dkv": [0, 1, 2, 3],
        }
    finally:
        cp.forget_ring_state()


RANK_CHILD = Path(__file__).with_name("ring_state_rank_child.py")


def test_ring_state_is_built_only_when_repatch_comes_before_the_parallel_state():
    reports = run_ranks(RANK_CHILD, lambda rank, address: simulated_npu_env(clean_env(RANK=str(rank), **address)))
    for rank, report in enumerate(reports):
        assert report["repatch_first"] == {
            "intra_window": [rank],
            "inter_window_kv": [0, 1],
            "inter_window_dkv": [0, 1],
        }
        assert report["repatch_after"] == dict.fromkeys(("intra_window", "inter_window_kv", "inter_window_dkv"))
        assert report["wrapper_installed_after"] is True


# -- MindSpeed's lines (mindspeed.lines): what differs where verl's config reaches them -----------------

LINES = ("core_r0.16.0", "2.3.0_core_r0.12.1", "f2b0977e", "core_r0.17.0", "core_r0.18.0", "master")
# at CP >= 2 (MindSpeed's context_parallel_feature.py on each branch): the CP class replaces Megatron's attention
# classes on these; core_r0.17.0 only wraps initialize_model_parallel; core_r0.18.0 does neither
SWAPS_ATTENTION = ("core_r0.16.0", "2.3.0_core_r0.12.1", "f2b0977e", "master")
MEGATRON_CLASS = "megatron.core.transformer.dot_product_attention.DotProductAttention"
CP_CLASS = "mindspeed.core.context_parallel.adaptor.MindSpeedCPDotProductAttention"


def attention() -> tuple[str, str]:
    from megatron.core.transformer import dot_product_attention

    cls = dot_product_attention.DotProductAttention
    return f"{cls.__module__}.{cls.__qualname__}", cls.forward.__name__


@pytest.fixture
def line(request, megatron):
    from simulated_npu import fresh_mindspeed

    fresh_mindspeed(request.param)
    return request.param


def test_the_kit_lists_every_line_the_stand_in_simulates(simulated_npu):
    from mindspeed.lines import LINES as SIMULATED

    from simulated_npu import MINDSPEED_LINES

    assert sorted(MINDSPEED_LINES) == sorted(SIMULATED)


@pytest.mark.parametrize("line", LINES, indirect=True)
def test_only_core_r0_16_0_has_batch_invariant_attention(line, megatron):
    has_it = line == "core_r0.16.0"
    assert hasattr(megatron.args(), "use_flash_attn_npu_batch_invariant") is has_it
    if has_it:
        with pytest.raises(RuntimeError, match="the patch of forward exist"):
            megatron.repatch(BATCH_INVARIANT)
        megatron.repatch({"use_flash_attn": False, "use_flash_attn_npu_batch_invariant": True})
        assert attention() == (MEGATRON_CLASS, "dot_product_attention_forward_batch_invariant")
    else:  # the key is stored and does nothing: fusion attention as asked
        megatron.repatch(BATCH_INVARIANT)
        assert attention() == (MEGATRON_CLASS, "dot_product_attention_forward")
        megatron.repatch({"use_flash_attn": False, "use_flash_attn_npu_batch_invariant": True})
        assert attention() == (MEGATRON_CLASS, "forward"), "Megatron's own, unfused attention"


@pytest.mark.parametrize("line", LINES, indirect=True)
def test_context_parallel_swaps_the_attention_class_where_mindspeed_does_ring_attention(line, megatron):
    megatron.repatch({"use_flash_attn": True, "context_parallel_size": 2})
    if line in SWAPS_ATTENTION:
        assert attention() == (CP_CLASS, "forward")
    else:  # Megatron's own class; no fusion attention, and no generate-mask wrapper, at CP 2
        assert attention() == (MEGATRON_CLASS, "forward")
    assert megatron.attention.forward is megatron.original_forward, "Megatron's class is left unpatched"
    if line == "core_r0.18.0":  # CP is Megatron's own there: no wrapper either
        assert megatron.parallel_state.initialize_model_parallel is megatron.original_initialize
    else:
        assert megatron.parallel_state.initialize_model_parallel.__wrapped__ is megatron.original_initialize
    megatron.repatch({"use_flash_attn": True})  # context_parallel_size persists: still no fusion attention
    assert attention()[1] == "forward"


def te_attention_resolves() -> bool:
    from mindspeed.features_manager import te_attention_resolves

    return te_attention_resolves()


@pytest.mark.parametrize("line", ["core_r0.16.0"], indirect=True)
def test_at_context_parallel_2_batch_invariant_attention_is_the_only_forward_patch(line, megatron):
    if not te_attention_resolves():
        pytest.skip("megatron-core without an importable TE module (0.12): core_r0.16.0 pairs with Megatron 0.16")
    megatron.repatch({**BATCH_INVARIANT, "context_parallel_size": 2})  # nothing refused: fusion is not registered
    # it lands on the CP class through TEDotProductAttention.forward, whose owner is looked up when first
    # applied (the CP class by then); DotProductAttention.forward's owner is Megatron's class, bound at import
    assert attention() == (CP_CLASS, "dot_product_attention_forward_batch_invariant")
    assert megatron.attention.forward.__name__ == "dot_product_attention_forward_batch_invariant"


@pytest.mark.parametrize("line", LINES, indirect=True)
def test_generate_mask_wraps_megatron_attention_from_import_below_context_parallel_2(line, megatron):
    """MindSpeed's generate-mask feature, on by default on every line: Megatron's forward is a wrapper."""
    wrapped = megatron.attention.forward
    assert wrapped.__wrapped__ is megatron.original_forward, "wrapped at import, before any repatch"
    assert wrapped.__qualname__ == megatron.original_forward.__qualname__, "functools.wraps, as MindSpeed's"
    megatron.repatch({"use_flash_attn": True})
    assert megatron.attention.forward.__wrapped__.__name__ == "dot_product_attention_forward", "around fusion"
    megatron.repatch({"use_flash_attn": False, "context_parallel_size": 2})
    assert not hasattr(megatron.args(), "no_create_attention_mask_in_dataloader")
    assert not hasattr(megatron.attention.forward, "__wrapped__"), "no wrapper at CP 2"
    megatron.repatch({"context_parallel_size": 1, "no_create_attention_mask_in_dataloader": True})
    assert megatron.attention.forward is megatron.original_forward, "Megatron's option turns the feature off"


@pytest.mark.parametrize("line", ["core_r0.16.0"], indirect=True)
def test_batch_invariant_ops_keys_need_mindspeeds_kernel_package_and_touch_no_attention(line, megatron):
    """``use_batch_invariant_ops``/``batch_invariant_mode`` turn the feature on for kernels, not attention:
    MindSpeed imports ``batch_invariant_ops`` in ``repatch``, which fails without it, patches left removed."""
    for key in ("use_batch_invariant_ops", "batch_invariant_mode"):
        with pytest.raises(ModuleNotFoundError, match="batch_invariant_ops"):
            megatron.repatch({key: True, "use_flash_attn": True})
        assert megatron.attention.forward is megatron.original_forward, key
        megatron.repatch({key: False})
        assert attention() == (MEGATRON_CLASS, "dot_product_attention_forward"), f"{key} replaced no forward"


@pytest.mark.parametrize("line", ["2.3.0_core_r0.12.1", "core_r0.18.0"], indirect=True)
def test_batch_invariant_ops_keys_are_stored_where_the_feature_does_not_exist(line, megatron):
    megatron.repatch({"use_batch_invariant_ops": True, "batch_invariant_mode": True, "use_flash_attn": True})
    assert attention() == (MEGATRON_CLASS, "dot_product_attention_forward")


@pytest.mark.parametrize("line", ["2.1.0_core_r0.12.1"], indirect=True)
def test_2_1_0_has_no_repatch(line, megatron):
    import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)

    with pytest.raises(ImportError, match="cannot import name 'repatch'"):
        from mindspeed.megatron_adaptor import repatch  # noqa: F401 - verl's own guarded import
    assert not hasattr(megatron_adaptor, "repatch")


def test_repatch_applies_pre_patches_first_and_force_patch_replaces_a_replacement(megatron, monkeypatch):
    """Every line read (``2.3.0_core_r0.12.1``, ``core_r0.16.0``, ``core_r0.18.0``): ``repatch`` registers and applies
    the features' pre-patches, then their patches; ``register_patch(..., force_patch=True)`` takes the place of a
    replacement registered before (MindSpeed 0.18's norm and configuration patches use it), where a second plain
    replacement raises."""
    from mindspeed import features_manager

    target = "megatron.core.parallel_state.get_context_parallel_world_size"
    original = megatron.parallel_state.get_context_parallel_world_size
    seen = {}

    def pre_replacement() -> int:
        return 1

    def replacement() -> int:
        return 1

    class Probe(features_manager.Feature):
        def is_need_apply(self, args):
            return getattr(args, "probe_force", None) is not None

        def pre_register_patches(self, manager, args):
            manager.register_patch(target, pre_replacement)

        def register_patches(self, manager, args):
            seen["pre-patch applied first"] = megatron.parallel_state.get_context_parallel_world_size is pre_replacement
            manager.register_patch(target, replacement, force_patch=args.probe_force)

    listed = features_manager.features
    monkeypatch.setattr(features_manager, "features", lambda: [*listed(), Probe()])
    megatron.repatch({"probe_force": True})
    assert seen == {"pre-patch applied first": True}
    assert megatron.parallel_state.get_context_parallel_world_size is replacement
    with pytest.raises(RuntimeError, match=r"^the patch of get_context_parallel_world_size exist !$"):
        megatron.repatch({"probe_force": False})
    megatron.repatch({"probe_force": None})  # the feature off: its patches removed, none applied
    assert megatron.parallel_state.get_context_parallel_world_size is original
