"""A child of tests/kit/test_compute_mode.py, in the default mode (no arguments; the test sets
``NPU_SHIM_SIM_COMPUTE`` unset, ``0`` or not a boolean): prints one JSON report of what the device refuses."""

from __future__ import annotations

import json
from typing import Any

import torch
import torch_npu

report: dict[str, Any] = {}
report["device_count"] = torch.npu.device_count()
report["compute"] = getattr(torch.npu, "COMPUTE", False)
for name in ("npu_fusion_attention", "npu_rms_norm"):
    try:
        getattr(torch_npu, name)(torch.ones(1), torch.ones(1), torch.ones(1), 1, "BSH")
        report[name] = "ran"
    except RuntimeError as error:
        report[name] = str(error)
try:
    from torch_npu.contrib import transfer_to_npu  # noqa: F401

    report["transfer_to_npu"] = "imported"
except ImportError as error:
    report["transfer_to_npu"] = str(error)
try:
    torch.randn(2, device="npu")
    report["npu_tensor"] = "made"
except NotImplementedError as error:
    report["npu_tensor"] = str(error)
report["memory"] = [torch.npu.memory_allocated(), torch.npu.max_memory_reserved(), torch.npu.memory_stats()]
print(json.dumps(report))
