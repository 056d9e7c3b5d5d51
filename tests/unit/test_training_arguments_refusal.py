"""The shim's repatch refuses a ``TEDotProductAttention.__init__`` MindSpeed wrapped to read Megatron-LM's arguments.

``npu_shim.mindspeed_line.refuse_training_arguments``, told by what ``repatch`` left, not by the line: fakes of the
Transformer Engine module, of ``megatron.training`` and of MindSpeed's arguments. What MindSpeed ``core_r0.18.0``
really does, on the kit's stand-in and on its real source at CP = 2: tests/matrix/test_cp_options.py and
tests/real_mindspeed/test_real_cp_options.py.
"""

from __future__ import annotations

import functools
import sys
from argparse import Namespace
from types import SimpleNamespace
from typing import Any

import pytest
from test_repatch_semantics import EngineConfig

import npu_shim.mindspeed_line as mindspeed_line  # noqa: PLR0402 - `from npu_shim import` would activate the shim
from npu_shim.fixes.shared_repatch import MINDSPEED_IMPL, mindspeed_repatch

OPTIONS = {"cp_window_size": 1, "use_cp_send_recv_overlap": False, "optimization_level": 2}


class TEDotProductAttention:
    def __init__(self, config: Any = None) -> None:
        self.config = config


ORIGINAL_INIT = TEDotProductAttention.__init__


def reads_training_arguments(init: Any) -> Any:
    """As MindSpeed 0.18's ``te_dot_product_attention_init_wrapper``."""

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        from megatron.training import get_args

        self.cp_window_size = get_args().cp_window_size

    return wrapper


def reads_nothing(init: Any) -> Any:
    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)

    return wrapper


def not_initialised() -> Any:
    raise AssertionError("args is not initialized.")


@pytest.fixture
def mindspeed(monkeypatch):
    """A process's MindSpeed whose ``repatch`` wraps TE's attention ``__init__`` as ``wrap`` says, per call."""
    monkeypatch.setattr(mindspeed_line, "_passed", set())
    monkeypatch.setattr(sys.modules["npu_shim.settings"], "_warned", set())
    monkeypatch.setattr(TEDotProductAttention, "__init__", ORIGINAL_INIT)
    state = SimpleNamespace(args=Namespace(**OPTIONS), wrappers=[], calls=0)

    def repatch(config: dict) -> None:
        state.calls += 1
        for key, value in config.items():
            setattr(state.args, key, value)
        init = ORIGINAL_INIT  # MindSpeed removes its patches and applies them again
        for wrap in state.wrappers:
            init = wrap(init)
        TEDotProductAttention.__init__ = init

    args_utils = SimpleNamespace(
        get_mindspeed_args=lambda get_defaults=False: Namespace(**OPTIONS) if get_defaults else state.args,
        get_full_args=lambda: state.args,
    )
    monkeypatch.setitem(sys.modules, mindspeed_line.ARGS_UTILS, args_utils)
    monkeypatch.setitem(sys.modules, MINDSPEED_IMPL, SimpleNamespace(repatch=repatch))
    monkeypatch.setitem(
        sys.modules, mindspeed_line.TE_ATTENTION_MODULE, SimpleNamespace(TEDotProductAttention=TEDotProductAttention)
    )
    monkeypatch.setitem(sys.modules, mindspeed_line.MEGATRON_TRAINING, SimpleNamespace(get_args=not_initialised))
    return state


def test_a_wrapper_that_reads_megatron_lms_arguments_is_refused_naming_the_key(mindspeed):
    mindspeed.wrappers = [reads_training_arguments]
    with pytest.raises(ValueError) as refused:
        mindspeed_repatch(EngineConfig({"use_cp_send_recv_overlap": True}, context_parallel_size=2))
    assert str(refused.value).startswith(
        "override_transformer_config.use_cp_send_recv_overlap=True with context_parallel_size=2: MindSpeed hands "
    )
    assert "(megatron.training.get_args(); here: AssertionError: args is not initialized.)" in str(refused.value)
    assert str(refused.value).endswith(
        "Under verl leave cp_window_size at 1 and use_cp_send_recv_overlap off: context parallelism works without them."
    )


def test_found_under_other_wrappers_and_a_key_an_earlier_engine_left_is_named_so(mindspeed):
    mindspeed.wrappers = [reads_training_arguments, reads_nothing]  # MindSpeed's is not the outermost
    mindspeed.args.cp_window_size = 2  # from an earlier engine of the process
    with pytest.raises(ValueError, match=r"^override_transformer_config.cp_window_size=2 \(from an earlier engine "):
        mindspeed_repatch(EngineConfig(context_parallel_size=2))


@pytest.mark.parametrize("wrappers", [[], [reads_nothing]], ids=["not wrapped", "a wrapper that reads nothing"])
def test_nothing_is_refused_where_te_attention_does_not_read_megatron_lms_arguments(mindspeed, wrappers):
    """The lines that wrap no ``TEDotProductAttention.__init__`` (all but core_r0.18.0), or not for this."""
    mindspeed.wrappers = wrappers
    mindspeed_repatch(EngineConfig({"cp_window_size": 2}, context_parallel_size=2))
    assert mindspeed.calls == 1


def test_nothing_is_refused_where_megatron_lms_arguments_are_initialised(mindspeed, monkeypatch):
    """Megatron-LM's own training (not verl's): MindSpeed's wrapper reads them, as MindSpeed meant."""
    mindspeed.wrappers = [reads_training_arguments]
    initialised = SimpleNamespace(get_args=lambda: Namespace(cp_window_size=2))
    monkeypatch.setitem(sys.modules, mindspeed_line.MEGATRON_TRAINING, initialised)
    mindspeed_repatch(EngineConfig({"cp_window_size": 2}, context_parallel_size=2))
    assert TEDotProductAttention.__init__ is not ORIGINAL_INIT


def test_where_megatron_training_was_never_imported_nothing_initialised_its_arguments(mindspeed, monkeypatch):
    mindspeed.wrappers = [reads_training_arguments]
    monkeypatch.delitem(sys.modules, mindspeed_line.MEGATRON_TRAINING)
    with pytest.raises(ValueError, match=r"here: nothing in this process imported megatron.training, so nothing "):
        mindspeed_repatch(EngineConfig({"use_cp_send_recv_overlap": True}, context_parallel_size=2))
