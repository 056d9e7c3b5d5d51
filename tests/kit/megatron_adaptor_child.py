"""A child of tests/kit/test_compute_mode.py, in compute mode on MindSpeed ``core_r0.18.0`` with MegatronAdaptor's
stand-in installed or not (no arguments): prints one JSON report of what MegatronAdaptor does for the process."""

from __future__ import annotations

import json
from typing import Any

import torch
import torch_npu  # noqa: F401 - the simulated device

report: dict[str, Any] = {}
try:
    from mindspeed.megatron_adaptor import repatch  # verl's guarded import

    report["repatch"] = "imported"
except ImportError as error:
    report["repatch"] = f"{type(error).__name__}: {error}"
if report["repatch"] == "imported":
    import megatron_adaptor

    def plain(x: Any) -> Any:
        return x + 1

    report["megatron_first"] = list(megatron_adaptor.MEGATRON_FIRST)
    report["cuda_lands_on"] = str(torch.zeros(1, device="cuda").device)
    from apex.optimizers import FusedAdam

    report["fused_adam"] = f"{FusedAdam.__module__}.{FusedAdam.__qualname__}"
    import fused_weight_gradient_mlp_cuda  # Apex's extension, for Megatron's gradient-accumulation fusion

    report["wgrad_fusion"] = fused_weight_gradient_mlp_cuda.__doc__
    repatch({"use_flash_attn": True})
    repatch({"use_flash_attn": True})
    report["compile_after_repatch"] = torch.compile(plain) is plain
print(json.dumps(report))
