"""A child of tests/kit/test_transformer_engine_npu.py, in compute mode on ``core_r0.18.0`` (no arguments): TENPU's
attention with a CP window of 2 (a double ring); prints one JSON report with the error it raises."""

from __future__ import annotations

import json
from typing import Any

import torch
import torch_npu  # noqa: F401 - the simulated device
from child_report import npu
from transformer_engine.pytorch import DotProductAttention

report: dict[str, Any] = {}
attention = DotProductAttention(4, 8, cp_group=None, cp_global_ranks=[0, 1])
attention.cp_window_size = 2  # as MindSpeed 0.18's TEDotProductAttention.__init__ wrapper sets it
try:
    attention(
        *(npu(torch.randn(4, 4, 8)) for _ in range(3)),
        qkv_format="thd", cu_seqlens_q=torch.tensor([0, 4]), cu_seqlens_kv=torch.tensor([0, 4]),
    )  # fmt: skip
except NotImplementedError as error:
    report["error"] = str(error)
print(json.dumps(report))
