"""A child of tests/kit/test_parallel_kit.py, in compute mode on a MindSpeed line: prints one JSON report.

``fused_adam_child.py ADAM...``: the FusedAdam Megatron builds (its ``optimizer.Adam``) and whether Megatron took its
torch branch; where that Adam is one of the classes ``ADAM...`` names (their module and qualified name), three of its
steps against torch's AdamW, and where it counts the step.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

import torch
import torch_npu  # noqa: F401 - the simulated device
from child_report import gap, npu

with contextlib.suppress(ImportError):  # as verl's engine package imports it, before Megatron (guarded, as verl's)
    import mindspeed.megatron_adaptor  # noqa: F401 - core_r0.18.0 without MegatronAdaptor fails here
import megatron.core.optimizer.distrib_optimizer as distributed
from megatron.core import optimizer

report: dict[str, Any] = {}
report["line"] = os.environ["NPU_SHIM_SIM_MINDSPEED"]
report["adam"] = f"{optimizer.Adam.__module__}.{optimizer.Adam.__qualname__}"
# Megatron's branch without TE or Apex (both megatron-cores): torch's AdamW as Adam, HAVE_APEX_OR_TE False
report["torch_branch"] = [optimizer.Adam is torch.optim.AdamW, not distributed.HAVE_APEX_OR_TE]
if report["adam"] in sys.argv[1:]:
    torch.manual_seed(0)
    start = [torch.randn(5, 3), torch.randn(7)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(3)]
    ours = [torch.nn.Parameter(npu(p)) for p in start]
    reference = [torch.nn.Parameter(p.clone()) for p in start]
    options = {"lr": 1e-2, "weight_decay": 0.1, "betas": (0.9, 0.95), "eps": 1e-8}
    mindspeed_adam, torch_adam = optimizer.Adam(ours, **options), torch.optim.AdamW(reference, **options)
    report["state_before_a_step"] = [len(mindspeed_adam.state), "step" in mindspeed_adam.param_groups[0]]
    for step in grads:
        for parameter, reference_parameter, grad in zip(ours, reference, step, strict=True):
            parameter.grad, reference_parameter.grad = npu(grad), grad.clone()
        mindspeed_adam.step()
        torch_adam.step()
    report["update_gap"] = max(gap(p, r) for p, r in zip(ours, reference, strict=True))
    group_step = mindspeed_adam.param_groups[0]["step"]
    report["step"] = [
        isinstance(group_step, torch.Tensor), str(getattr(group_step, "device", "")), int(group_step),
        sorted(mindspeed_adam.state[ours[0]]),
    ]  # fmt: skip
print(json.dumps(report))
