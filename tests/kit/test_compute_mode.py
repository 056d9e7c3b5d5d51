"""Compute mode of the simulated NPU (``NPU_SHIM_SIM_COMPUTE=1``), held to what the real torch_npu and MindSpeed do.

Compute mode is chosen when ``torch_npu`` is imported, which ``import torch`` does: every check runs
in a child interpreter started in that mode (one child per group of checks, to keep the file fast),
which prints one JSON report; the assertions are made here, on the values the child measured. The
references are computed in the child independently of the kit: plain CPU tensors, and torch's
``scaled_dot_product_attention`` with masks built here, never the kit's own kernels.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from helpers import clean_env, run_python

from npu_shim.testing import simulated_npu_env

TOLERANCE = 1e-5  # float32 inputs; the kernels under test run softmax in float32 too

# Shared by the children: npu results against CPU references, reported as the largest difference.
PRELUDE = """
import json, sys
import torch
import torch_npu

report = {}

def gap(result, reference):
    result = result.cpu() if result.device.type != "cpu" else result
    return float((result.double() - reference.double()).abs().max())
"""


def run_child(body: str, **env_options: Any) -> dict[str, Any]:
    env = simulated_npu_env(clean_env(), **env_options)
    code = textwrap.dedent(PRELUDE) + textwrap.dedent(body) + "\nprint(json.dumps(report))\n"
    return run_python(code, env, timeout=300).report


# -- torch_npu: tensors, RNG, transfer_to_npu ------------------------------------------------------------

TENSORS = """
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
report["rng_round_trip"] = [drawn == torch.rand(4, device="npu").tolist(),
                            dropped == torch.nn.functional.dropout(torch.ones(8, device="npu"), 0.5).tolist()]
torch.npu.manual_seed(5)
report["reseeded"] = first == torch.randn(6, device="npu").tolist()

from torch_npu.contrib import transfer_to_npu  # noqa: F401 - what MindSpeed's adaptor imports first

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
report["cuda_rng_is_the_npus"] = [drawn == torch.randn(3, device="npu").tolist(),
                                  torch.equal(torch.cuda.get_rng_state(), torch.npu.get_rng_state())]
"""


def test_npu_tensors_compute_as_the_cpu_and_cuda_code_lands_on_the_npu():
    report = run_child(TENSORS, compute=True)
    assert report["device_count"] == 1, "Megatron's RNG tracker needs a device"
    assert report["lives_on"] == ["npu:0", "NpuTensor"]
    for check in ("matmul", "in_place", "grad"):
        device, difference = report[check]
        assert device == "npu:0", check
        assert difference <= TOLERANCE, check
    assert report["softmax"] <= TOLERANCE
    assert report["arange"] == ["npu:0", [2, 5, 8]]
    assert report["linspace"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert report["tolist"] is True
    assert report["item"] is True
    assert report["data_assign"] == [[4], [4.0, 4.0, 4.0, 4.0]], "the tensor kept computing on its old values"
    assert isinstance(report["nested"], list), report["nested"]
    assert report["nested"][0] == "npu:0"
    assert report["nested"][1] <= TOLERANCE
    # torch's own name for a PrivateUse1 tensor until transfer_to_npu; then the CUDA names that code
    # written for CUDA compares with (Megatron's distributed optimizer: "torch.cuda.BFloat16Tensor")
    assert report["type_before_transfer"] == ["torch.npu.FloatTensor", "torch.npu.BFloat16Tensor"]
    assert report["type_after_transfer"] == ["torch.cuda.FloatTensor", "torch.cuda.BFloat16Tensor", "torch.FloatTensor"]
    assert report["cpu_generator_untouched"] is True, "npu draws must come from the device's generator"
    assert report["rng_round_trip"] == [True, True]
    assert report["reseeded"] is True
    assert report["cuda_api"] == [True, 1, 0]
    assert report["cuda_devices"] == ["npu:0"] * 5 + [True]
    assert report["cuda_rng_is_the_npus"] == [True, True]


# -- torch_npu.npu_fusion_attention against an independent reference --------------------------------------

FUSION = """
import torch.nn.functional as F

torch.manual_seed(0)

def reference(q, k, v, masked_out=None, scale=None):
    # [B, N, S, D] with G key/value heads; masked_out: True where a position is not attended
    allowed = None if masked_out is None else ~masked_out
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)

def causal(query_length, key_length, bottom_right=False):
    shift = key_length - query_length if bottom_right else 0
    return torch.tensor([[j > i + shift for j in range(key_length)] for i in range(query_length)])

B, N, G, S, D = 2, 4, 2, 6, 8
q, k, v = torch.randn(B, N, S, D), torch.randn(B, G, S, D), torch.randn(B, G, S, D)
scale = D ** -0.5

def bsh(x):  # [B, n, S, D] -> [B, S, n * D]
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)

def unbsh(x, heads):
    return x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)

npu = lambda x: x.to("npu")

# BSH, grouped key/value heads, an explicit mask (True: masked out), every row keeps its first key
mask = torch.rand(B, 1, S, S) > 0.6
mask[..., 0] = False
out = torch_npu.npu_fusion_attention(npu(bsh(q)), npu(bsh(k)), npu(bsh(v)), N, "BSH",
                                     atten_mask=npu(mask), scale=scale)[0]
report["BSH_mask"] = [str(out.device), gap(unbsh(out.cpu(), N), reference(q, k, v, mask, scale))]

# SBH, causal aligned top left (sparse_mode 2)
sbh = lambda x: bsh(x).transpose(0, 1)
out = torch_npu.npu_fusion_attention(npu(sbh(q)), npu(sbh(k)), npu(sbh(v)), N, "SBH",
                                     scale=scale, sparse_mode=2)[0]
report["SBH_causal"] = gap(unbsh(out.cpu().transpose(0, 1), N), reference(q, k, v, causal(S, S), scale))

# BNSD, fewer queries than keys, causal aligned bottom right (sparse_mode 3)
short_q = q[:, :, :3]
out = torch_npu.npu_fusion_attention(npu(short_q), npu(k), npu(v), N, "BNSD", scale=scale, sparse_mode=3)[0]
report["BNSD_bottom_right"] = gap(out, reference(short_q, k, v, causal(3, S, bottom_right=True), scale))

# the default scale is 1.0, as torch_npu's (callers pass 1/sqrt(D) themselves)
out = torch_npu.npu_fusion_attention(npu(bsh(q)), npu(bsh(k)), npu(bsh(v)), N, "BSH")[0]
report["default_scale"] = gap(unbsh(out.cpu(), N), reference(q, k, v, None, 1.0))

# TND: packed sequences of lengths 3 and 5, cumulative ends; each attends causally within itself only
lengths = [3, 5]
qs = [torch.randn(n, N, D) for n in lengths]
ks = [torch.randn(n, G, D) for n in lengths]
vs = [torch.randn(n, G, D) for n in lengths]
ends = [3, 8]
out = torch_npu.npu_fusion_attention(npu(torch.cat(qs)), npu(torch.cat(ks)), npu(torch.cat(vs)), N, "TND",
                                     scale=scale, sparse_mode=3, actual_seq_qlen=ends, actual_seq_kvlen=ends)[0]
expected = torch.cat([
    reference(qi.transpose(0, 1)[None], ki.transpose(0, 1)[None], vi.transpose(0, 1)[None],
              causal(n, n), scale)[0].transpose(0, 1)
    for qi, ki, vi, n in zip(qs, ks, vs, lengths)
])
report["TND_causal"] = gap(out, expected)
"""


def test_npu_fusion_attention_equals_torch_attention_in_each_layout():
    report = run_child(FUSION, compute=True)
    assert report["BSH_mask"][0] == "npu:0"
    for check in ("BSH_mask", "SBH_causal", "BNSD_bottom_right", "default_scale", "TND_causal"):
        difference = report[check][1] if check == "BSH_mask" else report[check]
        assert difference <= TOLERANCE, f"{check}: {difference}"


# -- the MindSpeed stand-in: fusion attention computes, and is the forward verl's model runs -----------------

MINDSPEED = """
import torch.nn.functional as F
from types import SimpleNamespace
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType
import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)

torch.manual_seed(0)
S, B, N, G, D = 5, 2, 4, 2, 8
q, k, v = torch.randn(S, B, N, D), torch.randn(S, B, G, D), torch.randn(S, B, G, D)
# what Megatron's attention gets and gives: [s, b, n, d] in, [s, b, n * d] out
expected = F.scaled_dot_product_attention(
    q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3), is_causal=True, scale=D ** -0.5,
    enable_gqa=True,
).permute(2, 0, 1, 3).reshape(S, B, N * D)
# the attributes of Megatron's attention module the forward reads
layer = SimpleNamespace(attn_mask_type=AttnMaskType.causal, softmax_scale=D ** -0.5,
                        config=SimpleNamespace(use_flash_attn=True))
npu = lambda x: x.to("npu")

for line in ("core_r0.16.0", "2.3.0_core_r0.12.1"):
    megatron_adaptor.simulate_fresh_process(line)
    megatron_adaptor.repatch({"use_flash_attn": True})
    forward = DotProductAttention.forward
    out = forward(layer, npu(q), npu(k), npu(v), None, attn_mask_type=AttnMaskType.causal)
    report[line] = {
        "forward": f"{forward.__module__}.{forward.__qualname__}",
        "device": str(out.device),
        "gap": gap(out, expected),
    }
    # packed sequences (thd) of 3 and 2 tokens, each padded to 4 as verl pads them: the padded starts delimit them
    t_q, t_k, t_v = torch.randn(8, N, D), torch.randn(8, G, D), torch.randn(8, G, D)
    starts, padded_starts = torch.tensor([0, 3, 5]), torch.tensor([0, 4, 8])
    packed = SimpleNamespace(qkv_format="thd", cu_seqlens_q=starts, cu_seqlens_kv=starts,
                             cu_seqlens_q_padded=padded_starts, cu_seqlens_kv_padded=padded_starts)
    within = lambda x, a, b: x[a:b].transpose(0, 1)  # [n, s, d] of one sequence
    expected_packed = torch.cat([
        F.scaled_dot_product_attention(within(t_q, a, b), within(t_k, a, b), within(t_v, a, b), is_causal=True,
                                       scale=D ** -0.5, enable_gqa=True).transpose(0, 1)
        for a, b in ((0, 4), (4, 8))
    ]).reshape(8, N * D)
    out = forward(layer, npu(t_q), npu(t_k), npu(t_v), None, attn_mask_type=AttnMaskType.causal,
                  packed_seq_params=packed)
    report[line]["packed_gap"] = gap(out, expected_packed)
    megatron_adaptor.repatch({"use_flash_attn": False})
    report[line]["without_fusion"] = DotProductAttention.forward.__qualname__

# Without fusion attention, Megatron's forward under the generate-mask wrapper: with no mask given on a
# causal layer, MindSpeed's get_attention_mask wants the config's micro_batch_size (nothing under verl sets it)
megatron_adaptor.simulate_fresh_process("2.3.0_core_r0.12.1")
megatron_adaptor.repatch({"use_flash_attn": False})
try:
    DotProductAttention.forward(SimpleNamespace(attn_mask_type=AttnMaskType.causal, config=SimpleNamespace()),
                                npu(q), npu(k), npu(v), None)
    report["unfused_without_mask"] = "ran"
except RuntimeError as error:
    report["unfused_without_mask"] = str(error)

# Which attention a Transformer-Engine-spec model (verl's) gets, per line and CP size, where MindSpeed stands in for
# Transformer Engine (core_r0.17.0 and core_r0.18.0 have TransformerEngineNPU: tests/kit/test_transformer_engine_npu.py)
import megatron.core.extensions.transformer_engine as te

report["te_attention"] = {}
for line in ("core_r0.16.0", "2.3.0_core_r0.12.1", "master"):
    megatron_adaptor.simulate_fresh_process(line)
    for size in (1, 2):
        megatron_adaptor.repatch({"use_flash_attn": True, "context_parallel_size": size})
        cls = te.TEDotProductAttention
        report["te_attention"][f"{line} CP {size}"] = f"{cls.__module__}.{cls.__qualname__}"
"""


def test_mindspeed_fusion_attention_is_the_forward_after_repatch_and_computes():
    report = run_child(MINDSPEED, compute=True)
    for line in ("core_r0.16.0", "2.3.0_core_r0.12.1"):
        assert report[line]["forward"] == "mindspeed.features_manager.dot_product_attention_forward", line
        assert report[line]["device"] == "npu:0", line
        assert report[line]["gap"] <= TOLERANCE, line
        assert report[line]["packed_gap"] <= TOLERANCE, (line, "packed sequences delimited by the padded starts")
        assert report[line]["without_fusion"] == "DotProductAttention.forward", "Megatron's own again"
    assert report["unfused_without_mask"] == "Please set micro_batch_size or set use_flash_attn=True in config."
    megatron_class = "megatron.core.transformer.dot_product_attention.DotProductAttention"
    mindspeed_te = "mindspeed.te_layers.TEDotProductAttention"  # MindSpeed's own TE attention (its stand-in)
    cp_class = "mindspeed.core.context_parallel.adaptor.MindSpeedCPDotProductAttention"
    assert report["te_attention"] == {
        "core_r0.16.0 CP 1": mindspeed_te,
        "core_r0.16.0 CP 2": cp_class,
        "2.3.0_core_r0.12.1 CP 1": megatron_class,
        "2.3.0_core_r0.12.1 CP 2": cp_class,
        "master CP 1": mindspeed_te,
        "master CP 2": cp_class,
    }


# -- default mode: unchanged ----------------------------------------------------------------------------------

DEFAULT = """
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
"""


@pytest.mark.parametrize("variable", [None, "0", "banana"])
def test_default_mode_is_unchanged(variable):
    extra = {} if variable is None else {"NPU_SHIM_SIM_COMPUTE": variable}
    env = simulated_npu_env(clean_env(**extra))
    run = run_python(textwrap.dedent(PRELUDE) + textwrap.dedent(DEFAULT) + "\nprint(json.dumps(report))\n", env)
    report = run.report
    # a value that is not a boolean is named, as NPU_SHIM_DISABLE's is, not silently off
    assert ("NPU_SHIM_SIM_COMPUTE='banana' is not a boolean" in run.stderr) == (variable == "banana"), run.stderr
    # an npu tensor says why there is none, and what to set; an empty device's memory figures
    assert report["npu_tensor"].startswith("aten.empty.memory_format on npu: the simulated NPU"), report["npu_tensor"]
    assert "set NPU_SHIM_SIM_COMPUTE=1 before torch_npu is imported" in report["npu_tensor"]
    assert report["memory"] == [0, 0, {}]
    assert report["device_count"] == 0, "verl's set_random_seed would reach Megatron's CUDA RNG tracker"
    assert report["compute"] is False
    for name in ("npu_fusion_attention", "npu_rms_norm"):
        assert report[name] == f"torch_npu.{name}: simulated NPU (npu_shim.testing), no kernel to run"
    assert "needs compute mode" in report["transfer_to_npu"]


# -- Megatron's TE spec provider survives repatch ----------------------------------------------------------------

SPEC_PROVIDER = """
import importlib.metadata
import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)
from megatron.core.models.gpt import gpt_layer_specs

try:
    import megatron.core.extensions.transformer_engine_spec_provider as provider
except ModuleNotFoundError:  # megatron-core 0.12: no provider; its specs bind the TE layers themselves
    provider = None
megatron_class = getattr(provider, "TESpecProvider", None)
report["megatron"] = importlib.metadata.version("megatron-core")
report["specs_bound_at_import"] = None if getattr(gpt_layer_specs, "TESpecProvider", None) is None else "a class"
for step in range(2):  # verl's engines: one repatch each, in one process
    megatron_adaptor.repatch({"use_flash_attn": True})
report["home_keeps_megatrons_class"] = getattr(provider, "TESpecProvider", None) is megatron_class
try:
    spec = gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    report["te_spec"] = type(spec).__name__
except TypeError as error:
    report["te_spec"] = f"TypeError: {error}"
"""


def test_megatrons_te_spec_provider_survives_repatch_on_every_megatron():
    """megatron-core 0.18 binds ``TESpecProvider = None`` in its GPT specs when Transformer Engine does not import;
    the stand-in gives the specs a provider, and a patch's removal rebinds every module holding the replacement
    back to the original (as MindSpeed's does). With Megatron's own class as the replacement, the first repatch
    made even its home module's ``TESpecProvider`` ``None``, and verl's model build died in
    ``get_gpt_layer_with_transformer_engine_spec`` (``'NoneType' object is not callable``)."""
    report = run_child(SPEC_PROVIDER, compute=True)
    assert report["home_keeps_megatrons_class"], report
    assert report["te_spec"] == "ModuleSpec", report


# -- MegatronAdaptor, the first of core_r0.18.0's three layers ---------------------------------------------------

MEGATRON_ADAPTOR = """
try:
    from mindspeed.megatron_adaptor import repatch  # verl's guarded import
    report["repatch"] = "imported"
except ImportError as error:
    report["repatch"] = f"{type(error).__name__}: {error}"
if report["repatch"] == "imported":
    import megatron_adaptor

    def plain(x):
        return x + 1

    report["megatron_first"] = list(megatron_adaptor.MEGATRON_FIRST)
    report["cuda_lands_on"] = str(torch.zeros(1, device="cuda").device)
    from apex.optimizers import FusedAdam
    report["fused_adam"] = f"{FusedAdam.__module__}.{FusedAdam.__qualname__}"
    repatch({"use_flash_attn": True})
    repatch({"use_flash_attn": True})
    report["compile_after_repatch"] = torch.compile(plain) is plain
"""


@pytest.mark.parametrize("installed", [True, False])
def test_core_r0_18_needs_megatron_adaptor_which_does_the_basics_for_the_whole_process(installed):
    report = run_child(MEGATRON_ADAPTOR, compute=True, mindspeed_line="core_r0.18.0", megatron_adaptor=installed)
    if not installed:  # as on a real image without MA: verl's guarded import leaves repatch = None
        assert report == {"repatch": "ModuleNotFoundError: No module named 'megatron_adaptor'"}
        return
    assert report == {
        "repatch": "imported",
        "megatron_first": [],  # mindspeed imported it first thing, before anything imported Megatron
        "cuda_lands_on": "npu:0",
        "fused_adam": "mindspeed.core.optimizer.adamw.AdamW",
        "compile_after_repatch": True,  # MA's, not a MindSpeed patch that repatch removes and re-applies
    }
