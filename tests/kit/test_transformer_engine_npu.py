"""The kit's TransformerEngineNPU stand-in (``transformer_engine``) under Megatron 0.18's own TE classes.

On MindSpeed ``core_r0.18.0`` Megatron's ``TE*`` wrappers build TENPU's layers, which do their own tensor-parallel
communication and ring context parallelism. Each check runs Megatron's real classes over the stand-in in child
interpreters (compute mode) and compares with plain torch on the CPU: one ``F.linear`` / ``rms_norm`` over the whole
weight, ``scaled_dot_product_attention`` over the whole sequence. Beside Megatron 0.18 only, the line's Megatron.
"""

from __future__ import annotations

import textwrap
from importlib.metadata import version
from typing import Any

import pytest
from helpers import clean_env, run_python, run_ranks
from ring_case import CAUSAL_REFERENCE, VERL_CHUNKS

from npu_shim.testing import simulated_npu_env

pytestmark = pytest.mark.skipif(
    not version("megatron-core").startswith("0.18."), reason="core_r0.18.0's Megatron is 0.18 (the kit beside 0.18)"
)
LINE = "core_r0.18.0"
TOLERANCE = 1e-5  # float32 throughout
VERSION = "2.9.0+npu_shim.simulated"

PRELUDE = """
import json, os, sys
import torch
import torch.nn.functional as F
import torch_npu

report = {}
npu = lambda x: x.to("npu")

def gap(result, reference):
    result = result.detach().cpu() if result.device.type != "cpu" else result.detach()
    return float((result.double() - reference.detach().double()).abs().max())
"""

WHAT_MEGATRON_SEES = """
from importlib.metadata import version
try:
    import mindspeed.megatron_adaptor  # as verl's engine package does, before Megatron
except ImportError as error:
    report["mindspeed"] = str(error)
import megatron.core.extensions.transformer_engine as te_module
import megatron.core.models.gpt.gpt_layer_specs as specs
from megatron.core.utils import get_te_version

report["have_te"] = te_module.HAVE_TE
report["te_version"] = str(get_te_version())
try:
    report["distribution"] = version("transformer-engine")
except Exception as error:
    report["distribution"] = type(error).__name__
report["spec_provider"] = None if specs.TESpecProvider is None else specs.TESpecProvider.__module__
report["norm"] = f"{te_module.TENorm.__module__}.{te_module.TENorm.__qualname__}"
"""


def run_child(body: str, **env_options: Any) -> dict[str, Any]:
    env = simulated_npu_env(clean_env(), compute=True, mindspeed_line=LINE, **env_options)
    code = textwrap.dedent(PRELUDE) + textwrap.dedent(body) + "\nprint(json.dumps(report))\n"
    return run_python(code, env, timeout=300).report


def test_with_tenpu_megatron_has_transformer_engine_and_mindspeed_puts_its_norm_over_it():
    report = run_child(WHAT_MEGATRON_SEES)
    assert report == {
        "have_te": True,
        "te_version": "2.9.0+npu.shim.simulated",  # packaging's normal form of VERSION
        "distribution": VERSION,  # package metadata, as Megatron's fallback reads it
        "spec_provider": "megatron.core.extensions.transformer_engine_spec_provider",  # Megatron's own
        "norm": "mindspeed.compute.PTNorm",  # MindSpeed 0.18's npu-enhancement, force-patched over TENorm
    }


def test_without_tenpu_megatron_has_no_transformer_engine_and_no_te_specs():
    """What a core_r0.18.0 image without TransformerEngineNPU gives verl: MindSpeed imports, Megatron has no TE."""
    report = run_child(WHAT_MEGATRON_SEES, transformer_engine_npu=False)
    assert report["have_te"] is False
    assert (report["distribution"], report["spec_provider"]) == ("PackageNotFoundError", None)


# -- TENPU's linears at TP 2, under Megatron's TE wrappers ------------------------------------------------------

TENSOR_PARALLEL = """
rank = int(os.environ["RANK"])
sequence_parallel = os.environ["SEQUENCE_PARALLEL"] == "1"
torch.distributed.init_process_group("cpu:gloo,npu:hccl", rank=rank, world_size=2)
import mindspeed.megatron_adaptor
from megatron.core import parallel_state
from megatron.core.extensions.transformer_engine import TELayerNormColumnParallelLinear, TERowParallelLinear
from megatron.core.transformer.transformer_config import TransformerConfig

parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, tensor_model_parallel_size=2,
                           sequence_parallel=sequence_parallel, params_dtype=torch.float32, normalization="RMSNorm",
                           layernorm_epsilon=1e-6, add_bias_linear=True)
keep = lambda weight: None  # the weights are set below, from the whole ones
fc1 = TELayerNormColumnParallelLinear(8, 12, config=config, init_method=keep, gather_output=False, bias=True,
                                      skip_bias_add=False, is_expert=False)
fc2 = TERowParallelLinear(12, 8, config=config, init_method=keep, bias=True, input_is_parallel=True,
                          skip_bias_add=False, is_expert=False)
engine_class = lambda layer: next(f"{c.__module__}.{c.__qualname__}" for c in type(layer).__mro__
                                  if c.__module__.startswith("transformer_engine."))
report["classes"] = [engine_class(fc1), engine_class(fc2)]
report["shapes"] = [list(fc1.weight.shape), list(fc2.weight.shape)]
report["tensor_parallel"] = [getattr(fc1.weight, "partition_dim", None), getattr(fc2.weight, "partition_dim", None),
                             getattr(fc2.bias, "tensor_model_parallel", False)]

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
"""


def ranks(body: str, **variables: str) -> list[dict[str, Any]]:
    code = textwrap.dedent(PRELUDE) + textwrap.dedent(body) + "\nprint(json.dumps(report))\n"
    return run_ranks(
        code,
        lambda rank, port: simulated_npu_env(
            clean_env(RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **variables),
            compute=True,
            mindspeed_line=LINE,
        ),
    )


@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["tp2", "tp2-sp"])
def test_tenpus_linears_at_tp2_compute_the_whole_layer_and_its_gradients(sequence_parallel):
    """A norm, a column-parallel then a row-parallel linear (an MLP's shape), with biases: the same output and
    weight gradients as one plain layer over the whole weights, each rank holding its rows or columns."""
    for rank, report in enumerate(ranks(TENSOR_PARALLEL, SEQUENCE_PARALLEL=str(int(sequence_parallel)))):
        assert report["classes"] == [
            "transformer_engine.pytorch.module.LayerNormLinear",
            "transformer_engine.pytorch.module.Linear",
        ]
        assert report["shapes"] == [[6, 8], [8, 6]], "each rank keeps its half"
        assert report["tensor_parallel"] == [0, 1, False], "Megatron's attributes: rows, columns, a whole bias"
        device, shape, gap = report["out"]
        assert (device, shape) == ("npu:0", [2 if sequence_parallel else 4, 1, 8]), rank
        assert gap <= TOLERANCE, rank
        gaps = {name: value for name, value in report["grads"].items() if value is not None}
        assert max(gaps.values()) <= TOLERANCE, (rank, gaps)


# -- TENPU's attention: ring context parallelism at CP 2, as at CP 1 ---------------------------------------------

CONTEXT_PARALLEL = (
    """
rank = int(os.environ["RANK"])
torch.distributed.init_process_group("cpu:gloo,npu:hccl", rank=rank, world_size=2)
import mindspeed.megatron_adaptor
from megatron.core import parallel_state
from megatron.core.extensions.transformer_engine import TEDotProductAttention
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.transformer_config import TransformerConfig
from transformer_engine.pytorch import DotProductAttention

parallel_state.initialize_model_parallel(context_parallel_size=2)
config = TransformerConfig(num_layers=1, hidden_size=32, num_attention_heads=4, num_query_groups=2,
                           context_parallel_size=2, attention_dropout=0.0, params_dtype=torch.float32)
attention = TEDotProductAttention(config, 1, AttnMaskType.causal, "self")
report["ring"] = attention.cp_global_ranks

"""
    + VERL_CHUNKS
    + """
leaves = [npu(x[mine]).requires_grad_() for x in (q, k, v)]
out = attention(*leaves, None, AttnMaskType.causal, packed_seq_params=packed)
out.backward(npu(dy[mine].reshape(len(mine), -1)))

# CP 1: TENPU's attention over the whole sequence, no CP group
whole = DotProductAttention(N, D, num_gqa_groups=G, attn_mask_type="padding_causal", qkv_format="thd")
whole_leaves = [npu(x).requires_grad_() for x in (q, k, v)]
whole_out = whole(*whole_leaves, None, cu_seqlens_q=cu, cu_seqlens_kv=cu)
whole_out.backward(npu(dy.reshape(T, -1)))

"""
    + CAUSAL_REFERENCE
    + """
expected = expected.reshape(T, -1)
report["cp2"] = [str(out.device), list(out.shape), gap(out, expected[mine])]
report["cp2_grads"] = [gap(leaf.grad, reference.grad[mine]) for leaf, reference in zip(leaves, reference_leaves)]
report["cp2_vs_cp1"] = gap(out, whole_out.detach().cpu()[mine])
report["cp1"] = gap(whole_out, expected)
report["cp1_grads"] = [gap(leaf.grad, reference.grad) for leaf, reference in zip(whole_leaves, reference_leaves)]
"""
)


def test_tenpus_ring_attention_at_cp2_equals_cp1_and_causal_attention_over_the_whole_sequence():
    """Megatron's ``TEDotProductAttention`` hands TENPU's attention the CP group; its ring (TE's ``p2p``) on verl's
    chunk layout, grouped key/value heads, two packed sequences: forward and gradients as at CP 1 and as plain torch."""
    for rank, report in enumerate(ranks(CONTEXT_PARALLEL)):
        assert report["ring"] == [0, 1]
        device, shape, gap = report["cp2"]
        assert (device, shape) == ("npu:0", [10, 32]), rank
        assert gap <= TOLERANCE and report["cp2_vs_cp1"] <= TOLERANCE, rank
        assert max(report["cp2_grads"]) <= TOLERANCE, (rank, report["cp2_grads"])
        assert report["cp1"] <= TOLERANCE and max(report["cp1_grads"]) <= TOLERANCE, rank


WINDOWED = """
from transformer_engine.pytorch import DotProductAttention

attention = DotProductAttention(4, 8, cp_group=None, cp_global_ranks=[0, 1])
attention.cp_window_size = 2  # as MindSpeed 0.18's TEDotProductAttention.__init__ wrapper sets it
try:
    attention(*(npu(torch.randn(4, 4, 8)) for _ in range(3)), qkv_format="thd",
              cu_seqlens_q=torch.tensor([0, 4]), cu_seqlens_kv=torch.tensor([0, 4]))
except NotImplementedError as error:
    report["error"] = str(error)
"""


def test_tenpus_double_ring_is_refused_by_name_not_computed_as_a_single_ring():
    report = run_child(WINDOWED)
    assert report["error"] == (
        "simulated TransformerEngineNPU ring attention: double-ring context parallelism (cp_window_size != 1)"
    )
