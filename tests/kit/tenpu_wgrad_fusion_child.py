"""A child of tests/kit/test_transformer_engine_npu.py, in compute mode on ``core_r0.18.0`` (no arguments; one rank).

Gradient-accumulation fusion as Megatron-Bridge asks for it (``gradient_accumulation_fusion=True``): Megatron's
``TELayerNormColumnParallelLinear`` and ``TERowParallelLinear`` over TransformerEngineNPU's stand-in
(``fuse_wgrad_accumulation``) and Megatron's own ``ColumnParallelLinear`` (a GPT's output layer, through the
MegatronAdaptor stand-in's ``fused_weight_gradient_mlp_cuda``), inside Megatron's real ``DistributedDataParallel``,
against plain autograd on the CPU; then one bf16 linear against the float32 product of its bf16 operands, TE's
``overwrite_main_grad``, and the refusals. Prints one JSON report.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.nn.functional as F
import torch_npu  # noqa: F401 - the simulated device
from child_report import attempt, gap, npu

report: dict[str, Any] = {}
torch.distributed.init_process_group("cpu:gloo,npu:hccl", rank=0, world_size=1, init_method="tcp://127.0.0.1:0")
import mindspeed.megatron_adaptor  # noqa: E402, F401 - after the process group, before Megatron's modules

# isort: split
import fused_weight_gradient_mlp_cuda  # noqa: E402 - the MegatronAdaptor stand-in's
from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.extensions.transformer_engine import (  # noqa: E402
    TELayerNormColumnParallelLinear,
    TERowParallelLinear,
)
from megatron.core.tensor_parallel import layers as megatron_layers  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402


def keep(weight: torch.Tensor) -> None:  # the weights are set below
    return None


def config(dtype: torch.dtype) -> TransformerConfig:
    return TransformerConfig(
        num_layers=1, hidden_size=8, num_attention_heads=2, params_dtype=dtype, bf16=dtype == torch.bfloat16,
        normalization="RMSNorm", layernorm_epsilon=1e-6, add_bias_linear=True, gradient_accumulation_fusion=True,
        perform_initialization=False,  # the weights are set below
    )  # fmt: skip


class Stack(torch.nn.Module):
    """A norm and column-parallel linear, a row-parallel linear (an MLP's shape), then an output layer."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        common = {"config": cfg, "init_method": keep, "skip_bias_add": False, "is_expert": False}
        self.fc1 = TELayerNormColumnParallelLinear(8, 12, gather_output=False, bias=True, **common)
        self.fc2 = TERowParallelLinear(12, 8, input_is_parallel=True, bias=True, **common)
        self.head = tensor_parallel.ColumnParallelLinear(8, 16, config=cfg, init_method=keep, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.fc1(x)
        out, _ = self.fc2(hidden)
        logits, _ = self.head(out)
        return logits


parallel_state.initialize_model_parallel()
report["megatron_sees_the_extension"] = megatron_layers._grad_accum_fusion_available
torch.manual_seed(0)
whole = {
    "fc1.layer_norm_weight": torch.rand(8) + 0.5, "fc1.weight": torch.randn(12, 8), "fc1.bias": torch.randn(12),
    "fc2.weight": torch.randn(8, 12), "fc2.bias": torch.randn(8), "head.weight": torch.randn(16, 8),
}  # fmt: skip
x, dy = torch.randn(4, 1, 8), torch.randn(4, 1, 16)  # [sequence, batch, hidden]
stack = Stack(config(torch.float32))
report["fused"] = [
    stack.fc1.fuse_wgrad_accumulation,
    stack.fc2.fuse_wgrad_accumulation,
    stack.head.gradient_accumulation_fusion,
]
parameters = dict(stack.named_parameters())
with torch.no_grad():
    for name, value in whole.items():
        parameters[name].copy_(value)
model = DistributedDataParallel(
    config=stack.fc1.config, ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True), module=stack
)

leaves = {name: value.clone().requires_grad_() for name, value in whole.items()}
hidden = F.linear(F.rms_norm(x, (8,), leaves["fc1.layer_norm_weight"], 1e-6), leaves["fc1.weight"], leaves["fc1.bias"])
expected = F.linear(F.linear(hidden, leaves["fc2.weight"], leaves["fc2.bias"]), leaves["head.weight"])
expected.backward(dy)

for rounds in (1, 2):  # a second backward accumulates into main_grad (micro-batches), as Megatron's DDP expects
    model(npu(x)).backward(npu(dy))
    report[f"main_grad_after_{rounds}"] = {
        name: gap(parameter.main_grad, rounds * leaves[name].grad) for name, parameter in parameters.items()
    }
report["grad_left"] = sorted(name for name, parameter in parameters.items() if parameter.grad is not None)
report["grad_added_to_main_grad"] = sorted(name for name, p in parameters.items() if p.grad_added_to_main_grad)
model.zero_grad_buffer()
report["after_zero_grad_buffer"] = [
    max(float(p.main_grad.abs().max()) for p in parameters.values()),
    any(p.grad_added_to_main_grad for p in parameters.values()),
]

# bf16 parameters, a float32 main_grad (verl's grad_reduce_in_fp32): TE's GEMM accumulates into the buffer unrounded
linear = TERowParallelLinear(
    12, 8, config=config(torch.bfloat16), init_method=keep, bias=False, input_is_parallel=True, skip_bias_add=False,
    is_expert=False,
)  # fmt: skip
with torch.no_grad():
    linear.weight.copy_(whole["fc2.weight"].bfloat16())
h16, g16 = torch.randn(4, 1, 12).bfloat16(), torch.randn(4, 1, 8).bfloat16()
product = g16.reshape(-1, 8).float().t() @ h16.reshape(-1, 12).float()
linear.weight.main_grad = npu(torch.zeros(8, 12))
linear.weight.grad_added_to_main_grad = False
linear(npu(h16))[0].backward(npu(g16))
report["bf16"] = {
    "vs_float32_product": gap(linear.weight.main_grad, product),
    "vs_bf16_rounded": gap(linear.weight.main_grad, product.bfloat16().float()),
    "dummy_grad": [list(linear.weight.grad.shape), float(linear.weight.grad.abs().max())],
}
# overwrite_main_grad (TE's, as Megatron FSDP sets it): the buffer replaced, not added to
linear.weight.grad = None
linear.weight.main_grad.fill_(1.0)
linear.weight.overwrite_main_grad = True
linear(npu(h16))[0].backward(npu(g16))
report["overwrite_main_grad"] = gap(linear.weight.main_grad, product)


def backward_with(main_grad: torch.Tensor | None) -> str:
    linear.weight.grad = None
    linear.weight.overwrite_main_grad = False
    if main_grad is None:
        del linear.weight.main_grad
    else:
        linear.weight.main_grad = main_grad
    linear(npu(h16))[0].backward(npu(g16))
    return "computed"


attempt(report, "bf16_main_grad", lambda: backward_with(npu(torch.zeros(8, 12)).bfloat16()))
attempt(report, "no_main_grad", lambda: backward_with(None))
attempt(
    report,
    "wgrad_gemm_accum_fp16",
    lambda: fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp16(npu(h16[:, 0]), npu(g16[:, 0]), npu(product).half()),
)
print(json.dumps(report))
