"""A child of tests/kit/test_compute_mode.py, in compute mode (no arguments): prints one JSON report.

npu tensors against the same operations on CPU tensors (the largest difference), the device's random generator,
and where code written for CUDA lands after ``transfer_to_npu``.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch_npu  # noqa: F401 - the simulated device
from child_report import gap

report: dict[str, Any] = {}


torch.manual_seed(0)
report["device_count"] = torch.npu.device_count()
a, b = torch.randn(5, 7), torch.randn(7, 3)
npu_a, npu_b = a.to("npu"), b.to("npu")
report["lives_on"] = [str(npu_a.device), type(npu_a).__name__]
product = npu_a @ npu_b
report["matmul"] = [str(product.device), gap(product, a @ b)]
report["softmax"] = gap(torch.softmax(npu_a, dim=-1), torch.softmax(a, dim=-1))
# in place on an npu tensor: the values change where the tensor lives
in_place = npu_a.clone()
in_place.mul_(2).add_(1)
report["in_place"] = [str(in_place.device), gap(in_place, a * 2 + 1)]
# autograd through npu tensors gives the CPU's gradients
leaf, cpu_leaf = npu_a.clone().requires_grad_(), a.clone().requires_grad_()
(leaf @ npu_b).square().sum().backward()
(cpu_leaf @ b).square().sum().backward()
report["grad"] = [str(leaf.grad.device), gap(leaf.grad, cpu_leaf.grad)]
# factories that resize an empty tensor, asked for the device
ranged = torch.arange(2, 11, 3, device="npu")
report["arange"] = [str(ranged.device), ranged.tolist()]
report["linspace"] = torch.linspace(0, 1, 5, device="npu").tolist()
report["tolist"] = npu_b[:2, :2].tolist() == b[:2, :2].tolist()
report["item"] = npu_a[1, 2].item() == a[1, 2].item()
# Megatron's make_viewless_tensor assigns .data: the tensor must compute on the new values afterwards
target = torch.zeros(2, 3, device="npu")
target.data = torch.full((4,), 3.0, device="npu")
report["data_assign"] = [list(target.shape), (target + 1).tolist()]
# nested (jagged) tensors over npu values
parts = [torch.randn(2, 4), torch.randn(5, 4)]
try:
    nested = torch.nested.nested_tensor([p.to("npu") for p in parts], layout=torch.jagged)
    doubled = nested * 2
    report["nested"] = [str(doubled.values().device), gap(doubled.values(), torch.cat(parts) * 2)]
except Exception as error:  # reported, so that the assertion shows what failed
    report["nested"] = f"{type(error).__name__}: {error}"
report["type_before_transfer"] = [npu_a.type(), npu_a.bfloat16().type()]

# The device has a random generator of its own: drawing on it leaves the CPU's alone, and its state
# round-trips through get/set_rng_state as a device's does (Megatron's RNG tracker swaps it in and out).
torch.manual_seed(1)
cpu_state = torch.get_rng_state()
torch.npu.manual_seed(5)
first = torch.randn(6, device="npu").tolist()
state = torch.npu.get_rng_state()
drawn = torch.rand(4, device="npu").tolist()
dropped = torch.nn.functional.dropout(torch.ones(8, device="npu"), 0.5).tolist()  # aten takes no generator there
report["cpu_generator_untouched"] = torch.equal(torch.get_rng_state(), cpu_state)
torch.npu.set_rng_state(state)
report["rng_round_trip"] = [
    drawn == torch.rand(4, device="npu").tolist(),
    dropped == torch.nn.functional.dropout(torch.ones(8, device="npu"), 0.5).tolist(),
]
torch.npu.manual_seed(5)
report["reseeded"] = first == torch.randn(6, device="npu").tolist()

from torch_npu.contrib import transfer_to_npu  # noqa: E402, F401 - what MindSpeed's adaptor imports first

report["type_after_transfer"] = [npu_a.type(), npu_a.bfloat16().type(), a.type()]
report["cuda_api"] = [torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.current_device()]
report["cuda_devices"] = [
    str(torch.zeros(2, device="cuda").device),
    str(torch.ones(2, device=torch.device("cuda", 0)).device),
    str(a.cuda().device),
    str(a.to("cuda").device),
    str(torch.nn.Linear(2, 2).cuda().weight.device),
    a.cuda().is_cuda,
]
state = torch.cuda.get_rng_state()
drawn = torch.randn(3, device="cuda").tolist()
torch.cuda.set_rng_state(state)
report["cuda_rng_is_the_npus"] = [
    drawn == torch.randn(3, device="npu").tolist(),
    torch.equal(torch.cuda.get_rng_state(), torch.npu.get_rng_state()),
]
print(json.dumps(report))
