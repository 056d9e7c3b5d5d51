"""A child of tests/kit/test_device_rules.py, in compute mode: prints one JSON report.

- ``mixed``: an op between an npu tensor and CPU tensors of each shape, and the same op between a ``meta`` tensor and
  them, which is torch's own rule for two devices;
- ``adam``: Megatron's Adam on this MindSpeed line (the kit's stand-in) over four steps, uninterrupted and resumed
  from its ``state_dict`` after a scheduler changed the group's lr, beside torch's AdamW run the same way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import torch
import torch_npu  # noqa: F401 - the simulated device

report: dict[str, Any] = {"mixed": {}}


def outcome(function: Callable[[], torch.Tensor]) -> list[str]:
    try:
        return ["ran", str(function().device)]
    except RuntimeError as error:
        return ["RuntimeError", str(error)]


cpu_tensors = {"one-element 1-d": torch.tensor([2.0]), "0-dim": torch.tensor(2.0), "1-d": torch.ones(3)}
for name, cpu in cpu_tensors.items():
    report["mixed"][name] = {
        "npu": outcome(lambda cpu=cpu: torch.ones(3, device="npu") * cpu),
        "meta": outcome(lambda cpu=cpu: torch.ones(3, device="meta") * cpu),
    }

with contextlib.suppress(ImportError):  # as verl's engine package imports it; core_r0.18.0 may lack MegatronAdaptor
    import mindspeed.megatron_adaptor  # noqa: F401
from megatron.core import optimizer  # noqa: E402

torch.manual_seed(0)
START = [torch.randn(5, 3), torch.randn(7)]
GRADS = [[torch.randn_like(parameter) for parameter in START] for _ in range(4)]
OPTIONS = {"lr": 1e-2, "weight_decay": 0.1, "betas": (0.9, 0.95), "eps": 1e-8}
SCHEDULED_AT, RESUMED_AT = 1, 2  # a scheduler lowers the lr before the second step; a checkpoint after the second


def train(make: Callable[..., torch.optim.Optimizer], device: str, resume: bool) -> list[torch.Tensor]:
    parameters = [torch.nn.Parameter(start.clone().to(device)) for start in START]
    adam = make(parameters, **OPTIONS)
    for index, grads in enumerate(GRADS):
        if index == SCHEDULED_AT:
            adam.param_groups[0]["lr"] = OPTIONS["lr"] / 2
        if resume and index == RESUMED_AT:  # a fresh process: new parameters and optimizer, the checkpoint loaded
            state = adam.state_dict()
            parameters = [torch.nn.Parameter(parameter.detach().clone()) for parameter in parameters]
            adam = make(parameters, **OPTIONS)
            adam.load_state_dict(state)
        for parameter, grad in zip(parameters, grads, strict=True):
            parameter.grad = grad.clone().to(device)
        adam.step()
    return [parameter.detach().cpu() for parameter in parameters]


def gap(first: list[torch.Tensor], second: list[torch.Tensor]) -> float:
    return max(float((a.double() - b.double()).abs().max()) for a, b in zip(first, second, strict=True))


adam = optimizer.Adam
resumed = train(adam, "npu", resume=True)
report["adam"] = {
    "class": f"{adam.__module__}.{adam.__qualname__}",
    "resumed_vs_uninterrupted": gap(resumed, train(adam, "npu", resume=False)),
    "resumed_vs_torch": gap(resumed, train(torch.optim.AdamW, "cpu", resume=True)),
}
print(json.dumps(report))
