"""Compute mode of the simulated NPU (``NPU_SHIM_SIM_COMPUTE=1``), held to what the real torch_npu and MindSpeed do.

Compute mode is chosen when ``torch_npu`` is imported, which ``import torch`` does: every check runs
in a child interpreter started in that mode (one child per group of checks, to keep the file fast),
which prints one JSON report; the assertions are made here, on the values the child measured. The
references are computed in the child independently of the kit: plain CPU tensors, and torch's
``scaled_dot_product_attention`` with masks built there, never the kit's own kernels. The children, beside this
file: npu_tensors_child.py, fusion_attention_child.py, mindspeed_attention_child.py, default_mode_child.py,
te_spec_provider_child.py, megatron_adaptor_child.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import clean_env, run_python_file

from simulated_npu import simulated_npu_env

TOLERANCE = 1e-5  # float32 inputs; the kernels under test run softmax in float32 too
HERE = Path(__file__).parent


def run_child(child: str, **env_options: Any) -> dict[str, Any]:
    """``child``, a program beside this file, on the simulated NPU: its JSON report."""
    return run_python_file(HERE / child, simulated_npu_env(clean_env(), **env_options), timeout=300).report


# -- torch_npu: tensors, RNG, transfer_to_npu ------------------------------------------------------------


def test_npu_tensors_compute_as_the_cpu_and_cuda_code_lands_on_the_npu():
    report = run_child("npu_tensors_child.py", compute=True)
    assert report["device_count"] == 1, "Megatron's RNG tracker needs a device"
    assert report["lives_on"] == ["npu:0", "NpuTensor"]
    for check in ("matmul", "in_place", "grad"):
        device, difference = report[check]
        assert device == "npu:0", check
        assert difference <= TOLERANCE, check
    assert report["softmax"] <= TOLERANCE
    assert report["arange"] == ["npu:0", [2, 5, 8]]
    assert report["linspace"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert report["tolist"] is True
    assert report["item"] is True
    assert report["data_assign"] == [[4], [4.0, 4.0, 4.0, 4.0]], "the tensor kept computing on its old values"
    assert isinstance(report["nested"], list), report["nested"]
    assert report["nested"][0] == "npu:0"
    assert report["nested"][1] <= TOLERANCE
    # torch's own name for a PrivateUse1 tensor until transfer_to_npu; then the CUDA names that code
    # written for CUDA compares with (Megatron's distributed optimizer: "torch.cuda.BFloat16Tensor")
    assert report["type_before_transfer"] == ["torch.npu.FloatTensor", "torch.npu.BFloat16Tensor"]
    assert report["type_after_transfer"] == ["torch.cuda.FloatTensor", "torch.cuda.BFloat16Tensor", "torch.FloatTensor"]
    assert report["cpu_generator_untouched"] is True, "npu draws must come from the device's generator"
    assert report["rng_round_trip"] == [True, True]
    assert report["reseeded"] is True
    assert report["cuda_api"] == [True, 1, 0]
    assert report["cuda_devices"] == ["npu:0"] * 5 + [True]
    assert report["cuda_rng_is_the_npus"] == [True, True]


# -- torch_npu.npu_fusion_attention against an independent reference --------------------------------------


def test_npu_fusion_attention_equals_torch_attention_in_each_layout():
    report = run_child("fusion_attention_child.py", compute=True)
    assert report["BSH_mask"][0] == "npu:0"
    for check in ("BSH_mask", "SBH_causal", "BNSD_bottom_right", "default_scale", "TND_causal"):
        difference = report[check][1] if check == "BSH_mask" else report[check]
        assert difference <= TOLERANCE, f"{check}: {difference}"


# -- the MindSpeed stand-in: fusion attention computes, and is the forward verl's model runs -----------------


def test_mindspeed_fusion_attention_is_the_forward_after_repatch_and_computes():
    report = run_child("mindspeed_attention_child.py", compute=True)
    for line in ("core_r0.16.0", "2.3.0_core_r0.12.1"):
        assert report[line]["forward"] == "mindspeed.features_manager.dot_product_attention_forward", line
        assert report[line]["device"] == "npu:0", line
        assert report[line]["gap"] <= TOLERANCE, line
        assert report[line]["packed_gap"] <= TOLERANCE, (line, "packed sequences delimited by the padded starts")
        assert report[line]["without_fusion"] == "DotProductAttention.forward", "Megatron's own again"
    assert report["unfused_without_mask"] == "Please set micro_batch_size or set use_flash_attn=True in config."
    megatron_class = "megatron.core.transformer.dot_product_attention.DotProductAttention"
    mindspeed_te = "mindspeed.te_layers.TEDotProductAttention"  # MindSpeed's own TE attention (its stand-in)
    cp_class = "mindspeed.core.context_parallel.adaptor.MindSpeedCPDotProductAttention"
    assert report["te_attention"] == {
        "core_r0.16.0 CP 1": mindspeed_te,
        "core_r0.16.0 CP 2": cp_class,
        "2.3.0_core_r0.12.1 CP 1": megatron_class,
        "2.3.0_core_r0.12.1 CP 2": cp_class,
        "master CP 1": mindspeed_te,
        "master CP 2": cp_class,
    }


# -- default mode: unchanged ----------------------------------------------------------------------------------


@pytest.mark.parametrize("variable", [None, "0", "banana"])
def test_default_mode_is_unchanged(variable):
    extra = {} if variable is None else {"NPU_SHIM_SIM_COMPUTE": variable}
    env = simulated_npu_env(clean_env(**extra))
    run = run_python_file(HERE / "default_mode_child.py", env)
    report = run.report
    # a value that is not a boolean is named, as NPU_SHIM_DISABLE's is, not silently off
    assert ("NPU_SHIM_SIM_COMPUTE='banana' is not a boolean" in run.stderr) == (variable == "banana"), run.stderr
    # an npu tensor says why there is none, and what to set; an empty device's memory figures
    assert report["npu_tensor"].startswith("aten.empty.memory_format on npu: the simulated NPU"), report["npu_tensor"]
    assert "set NPU_SHIM_SIM_COMPUTE=1 before torch_npu is imported" in report["npu_tensor"]
    assert report["memory"] == [0, 0, {}]
    assert report["device_count"] == 0, "verl's set_random_seed would reach Megatron's CUDA RNG tracker"
    assert report["compute"] is False
    for name in ("npu_fusion_attention", "npu_rms_norm"):
        assert report[name] == f"torch_npu.{name}: simulated NPU (simulated_npu), no kernel to run"
    assert "needs compute mode" in report["transfer_to_npu"]


# -- Megatron's TE spec provider survives repatch ----------------------------------------------------------------


def test_megatrons_te_spec_provider_survives_repatch_on_every_megatron():
    """megatron-core 0.18 binds ``TESpecProvider = None`` in its GPT specs when Transformer Engine does not import;
    the stand-in gives the specs a provider, and a patch's removal rebinds every module holding the replacement
    back to the original (as MindSpeed's does). With Megatron's own class as the replacement, the first repatch
    made even its home module's ``TESpecProvider`` ``None``, and verl's model build died in
    ``get_gpt_layer_with_transformer_engine_spec`` (``'NoneType' object is not callable``)."""
    report = run_child("te_spec_provider_child.py", compute=True)
    assert report["home_keeps_megatrons_class"], report
    assert report["te_spec"] == "ModuleSpec", report


# -- MegatronAdaptor, the first of core_r0.18.0's three layers ---------------------------------------------------


@pytest.mark.parametrize("installed", [True, False])
def test_core_r0_18_needs_megatron_adaptor_which_does_the_basics_for_the_whole_process(installed):
    report = run_child(
        "megatron_adaptor_child.py", compute=True, mindspeed_line="core_r0.18.0", megatron_adaptor=installed
    )
    if not installed:  # as on a real image without MA: verl's guarded import leaves repatch = None
        assert report == {"repatch": "ModuleNotFoundError: No module named 'megatron_adaptor'"}
        return
    assert report == {
        "repatch": "imported",
        "megatron_first": [],  # mindspeed imported it first thing, before anything imported Megatron
        "cuda_lands_on": "npu:0",
        "fused_adam": "mindspeed.core.optimizer.adamw.AdamW",
        "wgrad_fusion": "SIMULATED by simulated_npu's MegatronAdaptor stand-in: not Apex's",
        "compile_after_repatch": True,  # MA's, not a MindSpeed patch that repatch removes and re-applies
    }
