"""A child of tests/kit/test_parallel_kit.py, in compute mode on one gloo rank: prints one JSON report.

No arguments. Per MindSpeed line, MindSpeed's
``TELayerNormColumnParallelLinear`` with a bias of ones against the plain RMS norm and matmul without and with that
bias: ``[difference without, difference with, whether the returned bias is None]``.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.nn.functional as F
import torch_npu  # noqa: F401 - the simulated device
from child_report import gap, npu

report: dict[str, Any] = {}
torch.distributed.init_process_group("cpu:gloo,npu:hccl", rank=0, world_size=1, init_method="tcp://127.0.0.1:0")
# MindSpeed's adaptor after the process group and before Megatron's modules, as the check always imported them
# isort: split
import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: E402, PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)

# isort: split
from megatron.core import parallel_state  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402
from mindspeed.te_layers import TELayerNormColumnParallelLinear  # noqa: E402

# isort: split
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed  # noqa: E402

parallel_state.initialize_model_parallel()
model_parallel_cuda_manual_seed(0)  # Megatron's RNG tracker, which its layers initialise their weights under
torch.manual_seed(0)
config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, normalization="RMSNorm")
x = torch.randn(3, 1, 8)
for line in ("2.3.0_core_r0.12.1", "f2b0977e", "core_r0.16.0"):
    megatron_adaptor.simulate_fresh_process(line)
    layer = TELayerNormColumnParallelLinear(
        8, 6, config=config, init_method=torch.nn.init.normal_, gather_output=False, bias=True, skip_bias_add=False
    )
    with torch.no_grad():
        layer.bias.fill_(1.0)
    output, returned = layer(npu(x))
    normed = F.rms_norm(x, (8,), layer.layer_norm_weight.detach().cpu(), config.layernorm_epsilon)
    without_bias = normed @ layer.weight.detach().cpu().T
    report[line] = [gap(output, without_bias), gap(output, without_bias + 1.0), returned is None]
print(json.dumps(report))
