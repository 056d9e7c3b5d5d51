"""A child of tests/kit/test_transformer_engine_npu.py: one of two TP ranks, in compute mode on ``core_r0.18.0``.

No arguments; the environment gives ``RANK``, ``MASTER_ADDR``/``MASTER_PORT`` and ``SEQUENCE_PARALLEL`` (``1`` or
``0``). Megatron's ``TELayerNormColumnParallelLinear`` then ``TERowParallelLinear`` over TransformerEngineNPU's
stand-in, with this rank's rows or columns of whole weights, against one plain layer over the whole weights: prints
one JSON report of the classes, shapes, Megatron's tensor-parallel attributes, and the differences of output and
gradients.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.nn.functional as F
import torch_npu  # noqa: F401 - the simulated device
from child_report import gap, npu

report: dict[str, Any] = {}
rank = int(os.environ["RANK"])
sequence_parallel = os.environ["SEQUENCE_PARALLEL"] == "1"
torch.distributed.init_process_group("cpu:gloo,npu:hccl", rank=rank, world_size=2)
import mindspeed.megatron_adaptor  # noqa: E402, F401 - after the process group, before Megatron's modules

# isort: split
from megatron.core import parallel_state  # noqa: E402
from megatron.core.extensions.transformer_engine import (  # noqa: E402
    TELayerNormColumnParallelLinear,
    TERowParallelLinear,
)
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402


def keep(weight: torch.Tensor) -> None:  # the weights are set below, from the whole ones
    return None


def engine_class(layer: torch.nn.Module) -> str:
    return next(
        f"{c.__module__}.{c.__qualname__}"
        for c in type(layer).__mro__
        if c.__module__.startswith("transformer_engine.")
    )


parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
config = TransformerConfig(
    num_layers=1, hidden_size=8, num_attention_heads=2, tensor_model_parallel_size=2,
    sequence_parallel=sequence_parallel, params_dtype=torch.float32, normalization="RMSNorm",
    layernorm_epsilon=1e-6, add_bias_linear=True,
)  # fmt: skip
fc1 = TELayerNormColumnParallelLinear(
    8, 12, config=config, init_method=keep, gather_output=False, bias=True, skip_bias_add=False, is_expert=False
)
fc2 = TERowParallelLinear(
    12, 8, config=config, init_method=keep, bias=True, input_is_parallel=True, skip_bias_add=False, is_expert=False
)
report["classes"] = [engine_class(fc1), engine_class(fc2)]
report["shapes"] = [list(fc1.weight.shape), list(fc2.weight.shape)]
report["tensor_parallel"] = [
    getattr(fc1.weight, "partition_dim", None), getattr(fc2.weight, "partition_dim", None),
    getattr(fc2.bias, "tensor_model_parallel", False),
]  # fmt: skip

torch.manual_seed(0)
gamma, w1, b1 = torch.rand(8) + 0.5, torch.randn(12, 8), torch.randn(12)
w2, b2 = torch.randn(8, 12), torch.randn(8)
x, dy = torch.randn(4, 1, 8), torch.randn(4, 1, 8)  # [sequence, batch, hidden]
rows, columns = slice(6 * rank, 6 * rank + 6), slice(6 * rank, 6 * rank + 6)
with torch.no_grad():
    fc1.layer_norm_weight.copy_(gamma)
    fc1.weight.copy_(w1[rows])
    fc1.bias.copy_(b1[rows])
    fc2.weight.copy_(w2[:, columns])
    fc2.bias.copy_(b2)
mine = slice(2 * rank, 2 * rank + 2) if sequence_parallel else slice(None)  # this rank's part of the sequence
inputs = npu(x[mine]).requires_grad_()
hidden, _ = fc1(inputs)
out, _ = fc2(hidden)
out.backward(npu(dy[mine]))

leaves = [t.clone().requires_grad_() for t in (x, gamma, w1, b1, w2, b2)]
rx, rgamma, rw1, rb1, rw2, rb2 = leaves
expected = F.linear(F.linear(F.rms_norm(rx, (8,), rgamma, 1e-6), rw1, rb1), rw2, rb2)
expected.backward(dy)
norm_grad = fc1.layer_norm_weight.grad.clone()
if sequence_parallel:  # each rank holds its part of the sequence's sum (Megatron's DDP all-reduces it)
    torch.distributed.all_reduce(norm_grad)
report["out"] = [str(out.device), list(out.shape), gap(out, expected[mine])]
report["grads"] = {
    "input": gap(inputs.grad, rx.grad[mine]),
    "layer_norm_weight": gap(norm_grad, rgamma.grad),
    "fc1.weight": gap(fc1.weight.grad, rw1.grad[rows]),
    "fc1.bias": gap(fc1.bias.grad, rb1.grad[rows]),
    "fc2.weight": gap(fc2.weight.grad, rw2.grad[:, columns]),
    "fc2.bias": gap(fc2.bias.grad, rb2.grad) if not sequence_parallel else None,
}
print(json.dumps(report))
