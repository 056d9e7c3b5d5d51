"""The kit's TransformerEngineNPU stand-in (``transformer_engine``) under Megatron 0.18's own TE classes.

On MindSpeed ``core_r0.18.0`` Megatron's ``TE*`` wrappers build TENPU's layers, which do their own tensor-parallel
communication and ring context parallelism. Each check runs Megatron's real classes over the stand-in in child
interpreters (compute mode) and compares with plain torch on the CPU: one ``F.linear`` / ``rms_norm`` over the whole
weight, ``scaled_dot_product_attention`` over the whole sequence. Beside Megatron 0.18 only, the line's Megatron.
The children, beside this file: tenpu_what_megatron_sees_child.py, tenpu_linears_rank_child.py,
tenpu_ring_attention_rank_child.py (with ring_case.py), tenpu_double_ring_child.py, tenpu_wgrad_fusion_child.py.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from helpers import clean_env, run_python_file, run_ranks

from simulated_npu import simulated_npu_env

pytestmark = pytest.mark.skipif(
    not version("megatron-core").startswith("0.18."), reason="core_r0.18.0's Megatron is 0.18 (the kit beside 0.18)"
)
LINE = "core_r0.18.0"
TOLERANCE = 1e-5  # float32 throughout
VERSION = "2.9.0+simulated"
HERE = Path(__file__).parent


def run_child(child: str, **env_options: Any) -> dict[str, Any]:
    """``child``, a program beside this file, on the simulated NPU (compute mode, this line): its JSON report."""
    env = simulated_npu_env(clean_env(), compute=True, mindspeed_line=LINE, **env_options)
    return run_python_file(HERE / child, env, timeout=300).report


def test_with_tenpu_megatron_has_transformer_engine_and_mindspeed_puts_its_norm_over_it():
    report = run_child("tenpu_what_megatron_sees_child.py")
    assert report == {
        "have_te": True,
        "te_version": "2.9.0+simulated",  # packaging's normal form of VERSION
        "distribution": VERSION,  # package metadata, as Megatron's fallback reads it
        "spec_provider": "megatron.core.extensions.transformer_engine_spec_provider",  # Megatron's own
        "norm": "mindspeed.compute.PTNorm",  # MindSpeed 0.18's npu-enhancement, force-patched over TENorm
    }


def test_without_tenpu_megatron_has_no_transformer_engine_and_no_te_specs():
    """What a core_r0.18.0 image without TransformerEngineNPU gives verl: MindSpeed imports, Megatron has no TE."""
    report = run_child("tenpu_what_megatron_sees_child.py", transformer_engine_npu=False)
    assert report["have_te"] is False
    assert (report["distribution"], report["spec_provider"]) == ("PackageNotFoundError", None)


# -- TENPU's linears at TP 2, under Megatron's TE wrappers ------------------------------------------------------


def ranks(child: str, **variables: str) -> list[dict[str, Any]]:
    """``child``, a program beside this file, on two ranks: their JSON reports."""
    return run_ranks(
        HERE / child,
        lambda rank, address: simulated_npu_env(
            clean_env(RANK=str(rank), **address, **variables),
            compute=True,
            mindspeed_line=LINE,
        ),
    )


@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["tp2", "tp2-sp"])
def test_tenpus_linears_at_tp2_compute_the_whole_layer_and_its_gradients(sequence_parallel):
    """A norm, a column-parallel then a row-parallel linear (an MLP's shape), with biases: the same output and
    weight gradients as one plain layer over the whole weights, each rank holding its rows or columns."""
    for rank, report in enumerate(ranks("tenpu_linears_rank_child.py", SEQUENCE_PARALLEL=str(int(sequence_parallel)))):
        assert report["classes"] == [
            "transformer_engine.pytorch.module.LayerNormLinear",
            "transformer_engine.pytorch.module.Linear",
        ]
        assert report["shapes"] == [[6, 8], [8, 6]], "each rank keeps its half"
        assert report["tensor_parallel"] == [0, 1, False], "Megatron's attributes: rows, columns, a whole bias"
        device, shape, gap = report["out"]
        assert (device, shape) == ("npu:0", [2 if sequence_parallel else 4, 1, 8]), rank
        assert gap <= TOLERANCE, rank
        gaps = {name: value for name, value in report["grads"].items() if value is not None}
        assert max(gaps.values()) <= TOLERANCE, (rank, gaps)


# -- gradient-accumulation fusion: the weight gradients in Megatron's main_grad --------------------------------------


def test_gradient_accumulation_fusion_puts_the_weight_gradients_in_main_grad_as_megatrons_ddp_expects():
    """What Megatron-Bridge asks wherever ``transformer_engine`` imports (``gradient_accumulation_fusion=True``):
    TENPU's linears (``fuse_wgrad_accumulation``) and Megatron's own output layer (the MegatronAdaptor stand-in's
    ``fused_weight_gradient_mlp_cuda``) accumulate each weight gradient into ``main_grad`` in float32, inside
    Megatron's real DDP; what the kit does not model is refused by name."""
    report = run_child("tenpu_wgrad_fusion_child.py")
    assert report["megatron_sees_the_extension"] is True, "Megatron's tensor_parallel.layers found it at import"
    assert report["fused"] == [True, True, True]
    for rounds in (1, 2):  # the second backward adds to the first (micro-batches)
        gaps = report[f"main_grad_after_{rounds}"]
        assert set(gaps) == {"fc1.layer_norm_weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "head.weight"}
        assert max(gaps.values()) <= TOLERANCE, (rounds, gaps)
    assert report["grad_left"] == [], "DDP's hook clears the dummy gradient autograd was given"
    assert report["grad_added_to_main_grad"] == ["fc1.weight", "fc2.weight", "head.weight"], "the fused weights only"
    assert report["after_zero_grad_buffer"] == [0.0, False]
    bf16 = report["bf16"]
    assert bf16["vs_float32_product"] <= TOLERANCE, "accumulated in float32, from the bf16 operands"
    assert bf16["vs_bf16_rounded"] > 1e-3, "not rounded to bf16 first (the unfused path's rounding)"
    assert bf16["dummy_grad"] == [[8, 12], 0.0]
    assert report["overwrite_main_grad"] <= TOLERANCE
    refused = "simulated TransformerEngineNPU: fuse_wgrad_accumulation"
    assert report["bf16_main_grad"] == [
        "NotImplementedError",
        f"{refused} into a torch.bfloat16 main_grad is not modelled (float32 only: Megatron's grad_reduce_in_fp32, "
        "verl's default)",
    ]
    assert report["no_main_grad"] == [
        "NotImplementedError",
        f"{refused} needs weight.main_grad (Megatron's DDP gives every trainable parameter one); a weight without it "
        "is not modelled",
    ]
    assert report["wgrad_gemm_accum_fp16"][0] == "NotImplementedError"
    assert "wgrad_gemm_accum_fp16" in report["wgrad_gemm_accum_fp16"][1]


# -- TENPU's attention: ring context parallelism at CP 2, as at CP 1 ---------------------------------------------


def test_tenpus_ring_attention_at_cp2_equals_cp1_and_causal_attention_over_the_whole_sequence():
    """Megatron's ``TEDotProductAttention`` hands TENPU's attention the CP group; its ring (TE's ``p2p``) on verl's
    chunk layout, grouped key/value heads, two packed sequences: forward and gradients as at CP 1 and as plain torch."""
    for rank, report in enumerate(ranks("tenpu_ring_attention_rank_child.py")):
        assert report["ring"] == [0, 1]
        device, shape, gap = report["cp2"]
        assert (device, shape) == ("npu:0", [10, 32]), rank
        assert gap <= TOLERANCE and report["cp2_vs_cp1"] <= TOLERANCE, rank
        assert max(report["cp2_grads"]) <= TOLERANCE, (rank, report["cp2_grads"])
        assert report["cp1"] <= TOLERANCE and max(report["cp1_grads"]) <= TOLERANCE, rank


def test_tenpus_double_ring_is_refused_by_name_not_computed_as_a_single_ring():
    report = run_child("tenpu_double_ring_child.py")
    assert report["error"] == (
        "simulated TransformerEngineNPU ring attention: double-ring context parallelism (cp_window_size != 1)"
    )
