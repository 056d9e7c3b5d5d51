"""The kit as a test bed for Ascend code on several ranks: kernels, device semantics, ring attention, FusedAdam.

Each group runs in child interpreters in compute mode (``NPU_SHIM_SIM_COMPUTE=1``), which print one JSON report;
the assertions are made here. References are computed in the child without the kit: plain CPU tensors, torch's
``scaled_dot_product_attention`` and autograd, ``torch.optim.AdamW``, never the kit's own kernels. The children,
beside this file: fusion_kernels_child.py, device_semantics_child.py, fused_adam_child.py,
ring_attention_rank_child.py (with ring_case.py), te_layer_norm_linear_child.py.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from helpers import clean_env, run_python_file, run_ranks

from simulated_npu import simulated_npu_env

TOLERANCE = 1e-5  # float32 inputs; the kernels under test run in float32 too
MEGATRON_0_12 = version("megatron-core").startswith("0.12.")
# Megatron plays no part in the kernels and the device's rules: they run once, beside megatron-core 0.16
ONCE = pytest.mark.skipif(MEGATRON_0_12, reason="no Megatron: beside 0.16 only")
SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices, npu:0 and cpu!"
RING_NOT_BUILT = "Context parallel ranks for ring intra window not initialized"

HERE = Path(__file__).parent


def run_child(
    child: str, env_extra: dict[str, str] | None = None, args: tuple[str, ...] = (), **env_options: Any
) -> dict[str, Any]:
    """``child``, a program beside this file, on the simulated NPU in compute mode: its JSON report."""
    env = simulated_npu_env(clean_env(**(env_extra or {})), compute=True, **env_options)
    return run_python_file(HERE / child, env, *args, timeout=300).report


# -- torch_npu's kernels: statistics, windows and sparse modes, the gradient, RMS norm --------------------------


@ONCE
def test_the_kernels_compute_what_torch_npu_documents_against_plain_torch():
    report = run_child("fusion_kernels_child.py")
    for check in ("mode0_band", "mode0_no_mask", "mode1", "mode4", "tnd_out"):
        assert report[check] <= TOLERANCE, check
    shape, dtype, top, total = report["dense_statistics"]
    assert (shape, dtype) == ([2, 4, 6, 8], "torch.float32")
    assert top <= TOLERANCE and total <= TOLERANCE
    assert report["tnd_statistics"][0] == [8, 4, 8]
    assert max(report["tnd_statistics"][1:]) <= TOLERANCE, "each sequence's rows, head-major, each value 8 times"
    assert report["mode3_wrong_mask"][0] == "ValueError" and "2048 x 2048" in report["mode3_wrong_mask"][1]
    assert report["dropout"] == [
        "NotImplementedError",
        "npu_fusion_attention (simulated): dropout (keep_prob=0.9) is not modelled",
    ]
    assert report["prefix_mode"][0] == "NotImplementedError"
    for check in ("grad_bsh_causal", "grad_tnd_causal"):
        device, *gaps = report[check]
        assert device == "npu:0"
        assert max(gaps) <= TOLERANCE, (check, gaps)
    device, rstd_shape, y_gap, rstd_gap = report["rms_norm"]
    assert (device, rstd_shape) == ("npu:0", [3, 5, 1])
    assert y_gap <= TOLERANCE and rstd_gap <= TOLERANCE


# -- a device where user code goes wrong as on a real one --------------------------------------------------------


@ONCE
def test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one():
    report = run_child("device_semantics_child.py")
    for check in ("add_cpu", "cat_cpu", "cpu_linear"):
        kind, message = report[check]
        assert kind == "RuntimeError" and message.startswith(SAME_DEVICE), (check, report[check])
    assert report["zero_dim_cpu"] == ["ran", ["npu:0", 0.0]], "a 0-dim CPU tensor is a scalar on any device"
    assert report["cpu_index"] == ["ran", ["npu:0", 0.0]], "CPU indices are allowed, as on CUDA"
    assert report["to_cpu"] == ["ran", ["cpu", 0.0]]
    assert report["gives_back"] == ["ran", [True, True, True, True, 101.0, True, False]], (
        "an in-place or out= op gives back its argument; a view shares its base's memory, and torch sees it alias"
    )
    for name in ("t_", "transpose_", "unsqueeze_", "squeeze_", "as_strided_"):
        assert report[name] == ["ran", [True, True, True, 0.0]], (name, "as the CPU's sizes, strides and values")
    for name in ("resize_", "out_of_another_size"):  # a wrapper's size is fixed: refused, with the reason
        kind, message = report[name]
        assert kind == "RuntimeError" and "a wrapper's size is fixed" in message, (name, report[name])
    assert report["resize_same"] == ["ran", [2, 3]]
    assert report["load_defaults"] == ["ran", ["npu:0", True, "npu:0", 0.0, 0.0, 0.0]]
    assert report["load_to_cpu"] == ["ran", ["cpu", True, "cpu", 0.0, 0.0, 0.0]]
    product, softmax, added, gap = report["autocast"]
    assert (product, softmax, added) == ("torch.bfloat16", "torch.float32", "torch.float32"), "CUDA's autocast lists"
    assert gap == 0.0, "the product of the inputs cast to bf16"
    assert report["autocast_off"] == "torch.float32"
    assert report["memory"] == [4000, 4000, 0, True, True], "a view holds its storage; freed with the last tensor"
    assert report["peak_reset"] is True
    assert report["deepcopy"] == ["npu:0", [1.0, 1.0, 1.0]], "a deep copy shares no memory with the original"
    assert report["dropout"] == [True, True, True], "each mask a new draw from the device's generator, not the CPU's"
    assert report["dropout_replayed"] is True, "the same state, the same mask"


# -- the FusedAdam Megatron builds, per line: MindSpeed's, MegatronAdaptor's or TransformerEngineNPU's ---------------

MINDSPEED_ADAM = "mindspeed.core.optimizer.adamw.AdamW"
TENPU_ADAM = "transformer_engine.pytorch.optimizers.fused_adam.FusedAdam"
ADAMS = (MINDSPEED_ADAM, TENPU_ADAM)  # the child runs these against torch's AdamW
# Each line beside the Megatron it patches: the newest line of each Megatron.
LINE_BESIDE_THIS_MEGATRON = {"0.12": "2.3.0_core_r0.12.1", "0.16": "core_r0.16.0", "0.18": "core_r0.18.0"}[
    ".".join(version("megatron-core").split(".")[:2])
]
# core_r0.18.0's three layers, as installed: (MegatronAdaptor, TransformerEngineNPU)
STACKS = [(True, True), (True, False), (False, True)] if LINE_BESIDE_THIS_MEGATRON == "core_r0.18.0" else [(True, True)]


@pytest.mark.parametrize(("megatron_adaptor", "transformer_engine_npu"), STACKS, ids=str)
def test_the_fused_adam_megatron_builds_is_the_lines_and_computes_adamw(megatron_adaptor, transformer_engine_npu):
    """Megatron imports Transformer Engine's FusedAdam before apex's. ``2.3.0_core_r0.12.1`` and ``core_r0.16.0``:
    MindSpeed makes apex's its AdamW (no TE). ``core_r0.18.0``: TransformerEngineNPU's, as MindSpeed 0.18's own
    swap optimizer notes; without TENPU, MegatronAdaptor's apex one (MindSpeed's AdamW); without MA ``import
    mindspeed`` fails there, and Megatron takes its torch branch."""
    line = LINE_BESIDE_THIS_MEGATRON
    report = run_child(
        "fused_adam_child.py",
        args=ADAMS,
        mindspeed_line=line,
        megatron_adaptor=megatron_adaptor,
        transformer_engine_npu=transformer_engine_npu,
    )
    assert report["line"] == line
    if not megatron_adaptor:
        assert report["adam"] == TENPU_ADAM, "TENPU alone is still Transformer Engine to Megatron"
    elif line == "core_r0.18.0" and transformer_engine_npu:
        assert report["adam"] == TENPU_ADAM
    else:
        assert report["adam"] == MINDSPEED_ADAM
    assert report["torch_branch"] == [False, False], "Megatron takes its TE/Apex branch (the distributed optimizer too)"
    assert report["state_before_a_step"] == [0, False], "no step anywhere before the first"
    assert report["update_gap"] <= TOLERANCE, "the same update as torch's AdamW"
    tensor, device, count, state = report["step"]
    assert count == 3 and state == ["exp_avg", "exp_avg_sq"], "the step is counted per group, not per parameter"
    assert (tensor, device) == ((True, "npu:0") if line == "2.3.0_core_r0.12.1" else (False, ""))


def test_without_megatron_adaptor_or_tenpu_megatron_takes_its_torch_branch():
    """Neither MindSpeed's apex (MA's on core_r0.18.0) nor TE: torch's AdamW, as Megatron does on a CPU."""
    if LINE_BESIDE_THIS_MEGATRON != "core_r0.18.0":
        pytest.skip("MegatronAdaptor and TransformerEngineNPU are packages of their own only beside Megatron 0.18")
    report = run_child(
        "fused_adam_child.py",
        args=ADAMS,
        mindspeed_line="core_r0.18.0",
        megatron_adaptor=False,
        transformer_engine_npu=False,
    )
    assert report["adam"] == "torch.optim.adamw.AdamW" and report["torch_branch"] == [True, True]


# -- ring attention on two ranks ----------------------------------------------------------------------------------


def ring_ranks(order: str) -> list[dict[str, Any]]:
    return run_ranks(
        HERE / "ring_attention_rank_child.py",
        lambda rank, address: simulated_npu_env(clean_env(RANK=str(rank), ORDER=order, **address), compute=True),
    )


def test_mindspeeds_ring_attention_on_two_ranks_equals_causal_attention_over_the_whole_sequence():
    """verl's CP chunk layout, grouped key/value heads, two packed sequences: forward and gradients."""
    for rank, report in enumerate(ring_ranks("repatch first")):
        assert report["class"] == "mindspeed.core.context_parallel.adaptor.MindSpeedCPDotProductAttention"
        device, shape, gap = report["out"]
        assert (device, shape) == ("npu:0", [10, 4, 8]), rank
        assert gap <= TOLERANCE, rank
        assert max(report["grads"]) <= TOLERANCE, (rank, report["grads"])


def test_without_mindspeeds_ring_the_first_forward_fails_as_mindspeeds_does():
    """A repatch after Megatron's parallel state: the class is swapped, the ring never built."""
    for report in ring_ranks("mesh first"):
        assert report["class"] == "mindspeed.core.context_parallel.adaptor.MindSpeedCPDotProductAttention"
        assert report["error"] == RING_NOT_BUILT


# -- MindSpeed's TE layer-norm linear, per line: the bias of Qwen2's QKV projection ---------------------------------


def test_mindspeeds_te_layer_norm_linear_drops_its_bias_on_2_3_0_only():
    """MindSpeed 2.3.0_core_r0.12.1's TELayerNormColumnParallelLinear adds no bias unless Megatron asked for it back
    (skip_bias_add): Qwen2's QKV bias is ignored and never trained there; f2b0977e and core_r0.16.0 add it."""
    report = run_child("te_layer_norm_linear_child.py")
    without, with_bias, returned_none = report["2.3.0_core_r0.12.1"]
    assert without <= TOLERANCE and with_bias > 0.5 and returned_none
    for line in ("f2b0977e", "core_r0.16.0"):
        without, with_bias, returned_none = report[line]
        assert with_bias <= TOLERANCE and without > 0.5 and returned_none, line
