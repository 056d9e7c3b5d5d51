"""SIMULATED MindSpeed's release lines: what each line users run does where verl depends on it.

One profile per line, chosen by ``NPU_SHIM_SIM_MINDSPEED`` (default ``core_r0.16.0``) or, in
tests, by ``mindspeed.megatron_adaptor.simulate_fresh_process(line)``. Read from each line's
source (Ascend/MindSpeed, branch heads named in the README), never copied from it:

- ``repatch``: ``mindspeed.megatron_adaptor.repatch`` exists (``2.1.0_core_r0.12.1`` has none,
  so verl's ``from mindspeed.megatron_adaptor import repatch`` fails there);
- ``batch_invariant``: the batch-invariant feature and its ``--use-flash-attn-npu-batch-invariant``
  option exist (``core_r0.16.0`` only); it replaces ``DotProductAttention.forward`` (and
  ``TEDotProductAttention.forward``) at any CP size;
- ``ring_context_parallel``: at ``context_parallel_size > 1`` MindSpeed wraps
  ``parallel_state.initialize_model_parallel``, whose wrapper fills the ring state
  (``core_r0.18.0`` leaves CP to Megatron and its ``model_parallel_utils`` has no ring globals);
- ``cp_attention_class``: at ``context_parallel_size > 1`` (default ``megatron_cp_algo``) MindSpeed's
  context-parallel class replaces both ``DotProductAttention`` and ``TEDotProductAttention``
  (``2.3.0_core_r0.12.1``, ``core_r0.16.0``, master; ``core_r0.17.0`` swaps only for an adaptive CP
  algorithm, ``core_r0.18.0`` never);
- ``fused_adam``: the always-on ``requirements_basic`` makes ``apex.optimizers.FusedAdam`` MindSpeed's own
  AdamW (compute mode, :mod:`mindspeed.core.optimizer.adamw`); ``adam_step_on_device``: that AdamW keeps its
  step as a tensor on the device (the ``*_core_r0.12.1`` lines) rather than an int. ``core_r0.17.0`` and
  ``core_r0.18.0`` moved that into the separate MegatronAdaptor package (its stand-in does it, with an int step);
- ``megatron_adaptor_package``: ``mindspeed/__init__.py`` is ``import megatron_adaptor`` (``core_r0.17.0``,
  ``core_r0.18.0``): without MegatronAdaptor ``import mindspeed`` fails, and MA, not MindSpeed, has already
  made ``torch.compile`` eager and sent CUDA calls to the NPU (the kit's stand-in, ``megatron_adaptor``); Transformer
  Engine's layers are TransformerEngineNPU's (the kit's ``transformer_engine`` stand-in) under Megatron's own TE
  classes, and MindSpeed's basics are its ``npu-enhancement`` (``mindspeed.compute.register_basic_patches``);
- ``megatron_te_attention``: at CP 1 Transformer Engine's attention is Megatron's own ``DotProductAttention``
  (the ``*_core_r0.12.1`` lines' ``transformer_engine_basic``), whose ``forward`` ``use_flash_attn`` replaces;
  elsewhere MindSpeed's own TE attention class;
- ``te_linear_drops_bias``: MindSpeed's ``TELayerNormColumnParallelLinear`` never adds its linear's bias unless
  Megatron asked for it back (``skip_bias_add``), so a QKV bias (Qwen2's) is ignored and never trained:
  ``2.3.0_core_r0.12.1`` (since MindSpeed 634145d7, Dec 2025; fixed on ``core_r0.14.0`` and later, and on
  ``26.0.0_core_r0.12.1``, by 71b9e055's change), not ``f2b0977e`` (Oct 2025), which adds it.
Fusion attention (``use_flash_attn``) replaces ``DotProductAttention.forward`` at CP < 2 on every line,
and the generate-mask feature wraps it there (``features_manager``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

VARIABLE = "NPU_SHIM_SIM_MINDSPEED"
DEFAULT = "core_r0.16.0"


@dataclass(frozen=True)
class Line:
    name: str
    repatch: bool
    batch_invariant: bool
    ring_context_parallel: bool
    cp_attention_class: bool
    fused_adam: bool = True
    adam_step_on_device: bool = False
    megatron_te_attention: bool = False
    te_linear_drops_bias: bool = False
    megatron_adaptor_package: bool = False


LINES = {
    "2.3.0_core_r0.12.1": Line(
        "2.3.0_core_r0.12.1",
        repatch=True,
        batch_invariant=False,
        ring_context_parallel=True,
        cp_attention_class=True,
        adam_step_on_device=True,
        megatron_te_attention=True,
        te_linear_drops_bias=True,
    ),
    "core_r0.16.0": Line(
        "core_r0.16.0", repatch=True, batch_invariant=True, ring_context_parallel=True, cp_attention_class=True
    ),
    # core_r0.17.0 and core_r0.18.0: `import mindspeed` imports the separate MegatronAdaptor package
    # (`import megatron_adaptor` in mindspeed/__init__.py); the kit installs its stand-in for these lines.
    "core_r0.17.0": Line(
        "core_r0.17.0",
        repatch=True,
        batch_invariant=False,
        ring_context_parallel=True,
        cp_attention_class=False,
        fused_adam=False,
        megatron_adaptor_package=True,
    ),
    "core_r0.18.0": Line(
        "core_r0.18.0",
        repatch=True,
        batch_invariant=False,
        ring_context_parallel=False,
        cp_attention_class=False,
        fused_adam=False,
        megatron_adaptor_package=True,
    ),
    "master": Line("master", repatch=True, batch_invariant=False, ring_context_parallel=True, cp_attention_class=True),
    # no repatch: ring CP only from MindSpeed's own command line, which nothing under verl gives it
    "2.1.0_core_r0.12.1": Line(
        "2.1.0_core_r0.12.1",
        repatch=False,
        batch_invariant=False,
        ring_context_parallel=True,
        cp_attention_class=True,
        adam_step_on_device=True,
        megatron_te_attention=True,
    ),
}
# f2b0977e (Oct 2025) is an ancestor of 2.3.0_core_r0.12.1 and the same in all of the above but the TE linear's bias
LINES["f2b0977e"] = replace(LINES["2.3.0_core_r0.12.1"], name="f2b0977e", te_linear_drops_bias=False)

_selected: Line | None = None


def by_name(name: str) -> Line:
    try:
        return LINES[name]
    except KeyError:
        raise ValueError(
            f"{VARIABLE}={name!r} names no simulated MindSpeed line; use one of: {', '.join(LINES)}"
        ) from None


def current() -> Line:
    """The line this process simulates: chosen once from the environment, or by :func:`select`."""
    global _selected
    if _selected is None:
        _selected = by_name(os.environ.get(VARIABLE, "").strip() or DEFAULT)
    return _selected


def select(name: str) -> Line:
    """Test-only: simulate another line from now on (a real process has one MindSpeed for its lifetime)."""
    global _selected
    _selected = by_name(name)
    return _selected
