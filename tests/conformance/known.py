"""The one place the conformance layer's known differences between the kit's torch_npu and the real one live, each
with its reason. test_torch_npu.py fails on a difference not listed here and on one listed here that is gone."""

from __future__ import annotations

OLDEST = "2.8.0"  # the v0.7.1 image's torch_npu; the kit models the 9.1.0 images' 2.10.0.post4 (as 2.9.0.post2)

# Public names the kit defines that torch_npu lacks ("<module>.<name>"), in every wheel.
KIT_ONLY: dict[str, str] = {
    **dict.fromkeys(
        ("torch_npu.SIMULATED", "torch_npu.npu.SIMULATED", "torch_npu.contrib.transfer_to_npu.SIMULATED"),
        "the kit's mark: simulate_npu() refuses to run when a real torch_npu shadows the stand-in",
    ),
    "torch_npu.npu.COMPUTE": "compute mode's mark, set when npu tensors compute on the CPU (torch_npu._compute)",
    **dict.fromkeys(
        ("torch_npu.npu.HOST_NPUS", "torch_npu.npu.VISIBLE_DEVICES_VARIABLE", "torch_npu.npu.visible_device_count"),
        "the simulated host's devices, which set_device checks its index against as CANN does (tests/kit)",
    ),
    **dict.fromkeys(
        ("torch_npu.npu.DEVICE_NAME", "torch_npu.npu.DEVICE_NAME_VARIABLE"),
        "the chip the simulated host names (get_device_name), which decides verl 0.9.1's A5 test (npu_smi_card)",
    ),
    **dict.fromkeys(
        (
            "torch_npu.npu_* (default mode: any name, as an attribute)",
            "torch_npu.npu_* (compute mode: any name, as an attribute)",
        ),
        "a kernel the kit does not model is an attribute that raises when called, naming the kit, not an "
        "AttributeError at the call site; so hasattr(torch_npu, 'npu_<any>') is True on the kit. The npu_* names "
        "MindSpeed probes with hasattr (npu_hans_encode, npu_moe_token_(un)permute_with_routing_map) are ops of "
        "every image's torch_npu, so those probes answer as there",
    ),
}

# (torch_npu version, difference as test_kernel_schemas words it): the kit's kernels against that wheel's schemas.
_NEWER_ONLY = (
    "added to the registered schema after 2.8.0 (2.9.0.post2 and 2.10.0.post4 have it): the kit models the newer "
    "images; no caller in verl 0.6.1-0.9.1 or the five MindSpeed lines passes it (a caller that did would pass on the "
    "kit and fail on 2.8.0)"
)
SCHEMA: dict[tuple[str, str], str] = {
    **{
        (OLDEST, f"npu_fusion_attention: takes {name}, which torch_npu lacks"): _NEWER_ONLY
        for name in ("sink", "dropout_mask", "seed", "offset")
    },
    (OLDEST, "npu_fusion_attention_grad: takes sink, which torch_npu lacks"): _NEWER_ONLY,
    (OLDEST, "npu_fusion_attention_grad: returns 5 values, torch_npu 4"): (
        "dsink, the fifth output, came with sink after 2.8.0; every caller indexes [0] to [2] (MindSpeed's ring and "
        "Ulysses attention), none unpacks four"
    ),
}

# (torch_npu version, difference as test_outputs_as_meta_functions_give words it).
_NO_LAYOUT_BRANCH = (
    "2.8.0's meta function has no branch for this layout (it reads S1 from dim 2, BNSD's place): a bug of its meta "
    "function, fixed in 2.9.0.post2, whose meta function gives the kit's shape, as torch_npu documents it"
)
OUTPUTS: dict[tuple[str, str], str] = {
    **{
        (
            OLDEST,
            f"npu_fusion_attention BSND: output {index} kit [[2, 4, 16, 8], 'torch.float32'], meta "
            "[[2, 4, 4, 8], 'torch.float32']",
        ): _NO_LAYOUT_BRANCH
        for index in (1, 2)
    },
    **{
        (
            OLDEST,
            f"npu_fusion_attention TND: output {index} kit [[16, 4, 8], 'torch.float32'], meta "
            "[[16, 4, 8, 8], 'torch.float32']",
        ): _NO_LAYOUT_BRANCH
        for index in (1, 2)
    },
    **{
        (OLDEST, f"npu_fusion_attention_grad {layout}: returns 5 values, meta 4"): SCHEMA[
            (OLDEST, "npu_fusion_attention_grad: returns 5 values, torch_npu 4")
        ]
        for layout in ("SBH", "BSND", "BNSD", "TND")
    },
}

# torch_npu.* and torch.npu.* names verl (0.6.1-0.9.1) or the five MindSpeed lines use that the kit does not have
# (callers.py finds them; MindSpeed's MindSpore backend aside). Each is off the paths the suite trains: verl's
# Megatron engines on dense models in bf16/fp32, MindSpeed with the options verl sets.
_PROFILER = "profiling (verl's npu profiler, MindSpeed's --profile): not switched on in the suite's runs"
_LOW_PRECISION = "FP8 / MX / HiFloat8 low precision and vLLM's quantisation: the suite trains in bf16 and fp32"
_MOE = "mixture-of-experts kernels (grouped matmul, token permutation, fused all-to-all): the suite trains dense models"
_MC2 = "MindSpeed's MC2 matmul-communication fusion of tensor-parallel linears: an option the suite does not set"
_MEMORY = "MindSpeed's swap, compress and adaptive-recompute memory features: options the suite does not set"
_RECOVERY = "MindSpeed's TTP fault recovery (device stop/restart): options the suite does not set"
_SPARSE_ATTENTION = "MindSpeed's DeepSeek sparse attention (DSA): not in the suite's models"
_HF_PATCH = "verl's npu_patch of Hugging Face models (FSDP engines): the suite trains verl's Megatron engines"
NOT_MODELLED: dict[str, str] = {
    **dict.fromkeys(
        (
            "torch_npu.profiler",
            "torch_npu.profiler.AiCMetrics",
            "torch_npu.profiler.ExportType",
            "torch_npu.profiler.ProfilerActivity",
            "torch_npu.profiler.ProfilerLevel",
            "torch_npu.profiler._ExperimentalConfig",
            "torch_npu.profiler.profile",
            "torch_npu.profiler.schedule",
            "torch_npu.profiler.tensorboard_trace_handler",
            "torch_npu.utils.flops_count.FlopsCounter",
        ),
        _PROFILER,
    ),
    **dict.fromkeys(
        (
            "torch_npu.HiFloat8Tensor",
            "torch_npu.float4_e1m2fn_x2",
            "torch_npu.float4_e2m1fn_x2",
            "torch_npu.float8_e4m3fn",
            "torch_npu.float8_e8m0fnu",
            "torch_npu.hifloat8",
            "torch_npu.npu_add_quant_gmm_",
            "torch_npu.npu_add_quant_matmul_",
            "torch_npu.npu_all_gather_quant_mm",
            "torch_npu.npu_dynamic_block_mx_quant",
            "torch_npu.npu_dynamic_block_quant",
            "torch_npu.npu_dynamic_mx_quant",
            "torch_npu.npu_dynamic_mx_quant_with_dual_axis",
            "torch_npu.npu_dynamic_quant",
            "torch_npu.npu_grouped_dynamic_mx_quant",
            "torch_npu.npu_quant_matmul",
            "torch_npu.npu_quant_mm_reduce_scatter",
            "torch_npu.npu_quantize",
        ),
        _LOW_PRECISION,
    ),
    **dict.fromkeys(
        (
            "torch_npu._npu_moe_token_unpermute_with_routing_map",
            "torch_npu.npu_alltoallv_gmm",
            "torch_npu.npu_gmm_alltoallv",
            "torch_npu.npu_grouped_matmul",
            "torch_npu.npu_grouped_matmul_add_",
            "torch_npu.npu_moe_token_permute",
            "torch_npu.npu_moe_token_permute_with_routing_map",
            "torch_npu.npu_moe_token_permute_with_routing_map_grad",
            "torch_npu.npu_moe_token_unpermute",
            "torch_npu.npu_moe_token_unpermute_with_routing_map_grad",
            "torch_npu.utils.collect_env.get_cann_version",  # MindSpeed's legacy MoE all-to-all dispatcher asks it
        ),
        _MOE,
    ),
    **dict.fromkeys(
        (
            "torch_npu.npu_all_gather_base_mm",
            "torch_npu.npu_mm_all_reduce_base",
            "torch_npu.npu_mm_reduce_scatter_base",
        ),
        _MC2,
    ),
    **dict.fromkeys(
        (
            "torch_npu.empty_with_swapped_memory",
            "torch_npu.npu_hans_encode",
            "torch_npu.npu_hans_decode",
            "torch_npu.npu_apply_adam_w",  # MindSpeed's compress optimizer
            "torch_npu.npu.memory",
            "torch_npu.npu.init",
            "torch.npu.set_option",
        ),
        _MEMORY,
    ),
    **dict.fromkeys(("torch.npu.SyncLaunchStream", "torch.npu.restart_device", "torch_npu.npu.stop_device"), _RECOVERY),
    **dict.fromkeys(
        (
            "torch_npu.npu_lightning_indexer",
            "torch_npu.npu_sparse_flash_attention",
            "torch_npu.npu_sparse_lightning_indexer_grad_kl_loss",
        ),
        _SPARSE_ATTENTION,
    ),
    **dict.fromkeys(("torch_npu.npu_rotary_mul", "torch_npu.npu_swiglu", "torch.npu.amp"), _HF_PATCH),
    "torch_npu.npu_cross_entropy_loss": (
        "verl's logprobs_from_logits takes it where hasattr finds it (on the kit too, whose npu_* attributes exist): "
        "the suite's Megatron engines compute log-probs through Megatron's vocab-parallel cross entropy instead"
    ),
    "torch_npu.npu_scaled_masked_softmax": "MindSpeed's fused softmax: the fused flash attention path replaces it",
    "torch_npu.npu_rms_norm_backward": "MindSpeed master's lite Triton mHC kernels: not imported on verl's paths",
    "torch_npu.utils.register_asd_hook": "MindSpeed's silent-data-corruption check (ASD): an option not set",
    "torch_npu.npu.set_compile_mode": "MindSpeed's initialize.py (Megatron-LM's own training entry), not verl's",
    "torch_npu.npu.get_soc_version": "verl 0.8.0's vLLM patch: rollout engines are not in the suite",
    "torch.npu.FloatTensor": "MindSpeed's training.py (Megatron-LM's own training loop), not verl's",
    "torch.npu.memory": "verl's set_allocator_settings (torch.npu.memory._set_allocator_settings), under try/except",
}
