"""The kit as a test bed for Ascend code on several ranks: kernels, device semantics, ring attention, FusedAdam.

Each group runs in child interpreters in compute mode (``NPU_SHIM_SIM_COMPUTE=1``), which print one JSON report;
the assertions are made here. References are computed in the child without the kit: plain CPU tensors, torch's
``scaled_dot_product_attention`` and autograd, ``torch.optim.AdamW``, never the kit's own kernels.
"""

from __future__ import annotations

import textwrap
from importlib.metadata import version
from typing import Any

import pytest
from helpers import clean_env, run_python, run_ranks
from ring_case import CAUSAL_REFERENCE, VERL_CHUNKS

from npu_shim.testing import free_port, simulated_npu_env

TOLERANCE = 1e-5  # float32 inputs; the kernels under test run in float32 too
MEGATRON_0_12 = version("megatron-core").startswith("0.12.")
# Megatron plays no part in the kernels and the device's rules: they run once, beside megatron-core 0.16
ONCE = pytest.mark.skipif(MEGATRON_0_12, reason="no Megatron: beside 0.16 only")
SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices, npu:0 and cpu!"
RING_NOT_BUILT = "Context parallel ranks for ring intra window not initialized"

PRELUDE = """
import json, sys
import torch
import torch.nn.functional as F
import torch_npu

report = {}
npu = lambda x: x.to("npu")

def gap(result, reference):
    result = result.cpu() if result.device.type != "cpu" else result
    return float((result.double() - reference.double()).abs().max())

def attempt(name, function):
    try:
        report[name] = ["ran", function()]
    except Exception as error:
        report[name] = [type(error).__name__, str(error)]
"""


def run_child(body: str, env_extra: dict[str, str] | None = None, **env_options: Any) -> dict[str, Any]:
    env = simulated_npu_env(clean_env(**(env_extra or {})), compute=True, **env_options)
    code = textwrap.dedent(PRELUDE) + textwrap.dedent(body) + "\nprint(json.dumps(report))\n"
    return run_python(code, env, timeout=300).report


# -- torch_npu's kernels: statistics, windows and sparse modes, the gradient, RMS norm --------------------------

KERNELS = """
torch.manual_seed(0)
N, G, D = 4, 2, 8
scale = D ** -0.5

def sdpa(q, k, v, masked_out=None):  # [B, N, S, D] x [B, G, S, D]; masked_out: True where not attended
    return F.scaled_dot_product_attention(q, k, v, attn_mask=None if masked_out is None else ~masked_out,
                                          scale=scale, enable_gqa=True)

def statistics(q, k, masked_out=None):  # the row max and row sum of exp(score - max), as a float32 softmax has them
    scores = (q @ k.repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-1, -2)) * scale
    if masked_out is not None:
        scores = scores.masked_fill(masked_out, float("-inf"))
    top = scores.amax(-1)
    return top, torch.exp(scores - top[..., None]).sum(-1)

band = lambda sq, skv, pre, after, shift=0: torch.tensor(
    [[not (i + shift - pre <= j <= i + shift + after) for j in range(skv)] for i in range(sq)])
causal = lambda sq, skv, shift=0: torch.tensor([[j > i + shift for j in range(skv)] for i in range(sq)])
compressed = torch.ones(2048, 2048, dtype=torch.bool).triu(1)

# BNSD, a band of one key before each query and none after, through a mask in sparse mode 0
B, S = 2, 6
q, k, v = torch.randn(B, N, S, D), torch.randn(B, G, S, D), torch.randn(B, G, S, D)
out, top, total = torch_npu.npu_fusion_attention(npu(q), npu(k), npu(v), N, "BNSD", scale=scale,
    atten_mask=npu(torch.zeros(S, S, dtype=torch.bool)), pre_tockens=1, next_tockens=0)[:3]
expected_top, expected_total = statistics(q, k, band(S, S, 1, 0))
report["mode0_band"] = gap(out, sdpa(q, k, v, band(S, S, 1, 0)))
report["dense_statistics"] = [list(top.shape), str(top.dtype), gap(top[..., 3], expected_top),
                              gap(total[..., 7], expected_total)]
# sparse mode 0 without a mask: the window is ignored (torch_npu's documentation), every key attended
out = torch_npu.npu_fusion_attention(npu(q), npu(k), npu(v), N, "BNSD", scale=scale, pre_tockens=1, next_tockens=0)[0]
report["mode0_no_mask"] = gap(out, sdpa(q, k, v))
# sparse mode 1: the whole mask as given, the window ignored
mask = torch.rand(S, S) > 0.5
mask[:, 0] = False
out = torch_npu.npu_fusion_attention(npu(q), npu(k), npu(v), N, "BNSD", scale=scale, atten_mask=npu(mask),
                                     sparse_mode=1, pre_tockens=0, next_tockens=0)[0]
report["mode1"] = gap(out, sdpa(q, k, v, mask))
# sparse mode 4, a band aligned bottom right: 3 queries over 6 keys, two keys before each and none after
short_q = q[:, :, :3]
out = torch_npu.npu_fusion_attention(npu(short_q), npu(k), npu(v), N, "BNSD", scale=scale,
                                     atten_mask=npu(compressed), sparse_mode=4, pre_tockens=2, next_tockens=0)[0]
report["mode4"] = gap(out, sdpa(short_q, k, v, band(3, S, 2, 0, shift=3)))
attempt("mode3_wrong_mask", lambda: torch_npu.npu_fusion_attention(
    npu(q), npu(k), npu(v), N, "BNSD", atten_mask=npu(torch.zeros(S, S, dtype=torch.bool)), sparse_mode=3)[0].shape)
attempt("dropout", lambda: torch_npu.npu_fusion_attention(npu(q), npu(k), npu(v), N, "BNSD", keep_prob=0.9)[0].shape)
attempt("prefix_mode", lambda: torch_npu.npu_fusion_attention(npu(q), npu(k), npu(v), N, "BNSD",
                                                              sparse_mode=5)[0].shape)

# TND: sequences of 3 and 5 tokens, causal; the statistics [T, N, 8], head-major within each sequence
lengths, ends = [3, 5], [3, 8]
qs, ks, vs = ([torch.randn(n, heads, D) for n in lengths] for heads in (N, G, G))
packed = [npu(torch.cat(part)) for part in (qs, ks, vs)]
out, top, total = torch_npu.npu_fusion_attention(*packed, N, "TND", scale=scale, atten_mask=npu(compressed),
    sparse_mode=3, actual_seq_qlen=ends, actual_seq_kvlen=ends)[:3]
bnsd = lambda rows: rows.transpose(0, 1)[None]
second_top, second_total = statistics(bnsd(qs[1]), bnsd(ks[1]), causal(5, 5))  # [1, N, 5]
flat_top, flat_total = top.cpu().reshape(-1, 8), total.cpu().reshape(-1, 8)
report["tnd_statistics"] = [list(top.shape),
    gap(flat_top[3 * N:].reshape(N, 5, 8).permute(2, 0, 1), second_top.expand(8, N, 5)),
    gap(flat_total[3 * N:].reshape(N, 5, 8)[..., 0], second_total[0])]
report["tnd_out"] = gap(out, torch.cat([sdpa(bnsd(a), bnsd(b), bnsd(c), causal(n, n))[0].transpose(0, 1)
                                        for a, b, c, n in zip(qs, ks, vs, lengths)]))

# the gradient from the forward's output and statistics, against autograd through a plain reference
def grad_check(layout, query, key, value, mask_kwargs, reference):
    leaves = [x.clone().requires_grad_() for x in (query, key, value)]
    expected = reference(*leaves)
    dy = torch.randn_like(expected)
    expected.backward(dy)
    forward = torch_npu.npu_fusion_attention(npu(query), npu(key), npu(value), N, layout, scale=scale, **mask_kwargs)
    grads = torch_npu.npu_fusion_attention_grad(npu(query), npu(key), npu(value), npu(dy), N, layout,
        softmax_max=forward[1], softmax_sum=forward[2], attention_in=forward[0], scale_value=scale, **mask_kwargs)
    return [str(grads[0].device)] + [gap(ours, leaf.grad) for ours, leaf in zip(grads[:3], leaves)]

bsh = lambda x: x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)
unbsh = lambda x, heads: x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)
report["grad_bsh_causal"] = grad_check("BSH", bsh(q), bsh(k), bsh(v), {"sparse_mode": 2},
    lambda a, b, c: bsh(sdpa(unbsh(a, N), unbsh(b, G), unbsh(c, G), causal(S, S))))
report["grad_tnd_causal"] = grad_check("TND", *[torch.cat(part) for part in (qs, ks, vs)],
    {"sparse_mode": 3, "atten_mask": npu(compressed), "actual_seq_qlen": ends, "actual_seq_kvlen": ends},
    lambda a, b, c: torch.cat([sdpa(bnsd(a[s:e]), bnsd(b[s:e]), bnsd(c[s:e]), causal(e - s, e - s))[0].transpose(0, 1)
                               for s, e in zip([0, 3], ends)]))

x, gamma = torch.randn(3, 5, 16), torch.randn(16)
y, rstd = torch_npu.npu_rms_norm(npu(x), npu(gamma), epsilon=1e-6)
report["rms_norm"] = [str(y.device), list(rstd.shape), gap(y, F.rms_norm(x, (16,), gamma, 1e-6)),
                      gap(rstd, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))]
"""


@ONCE
def test_the_kernels_compute_what_torch_npu_documents_against_plain_torch():
    report = run_child(KERNELS)
    for check in ("mode0_band", "mode0_no_mask", "mode1", "mode4", "tnd_out"):
        assert report[check] <= TOLERANCE, check
    shape, dtype, top, total = report["dense_statistics"]
    assert (shape, dtype) == ([2, 4, 6, 8], "torch.float32")
    assert top <= TOLERANCE and total <= TOLERANCE
    assert report["tnd_statistics"][0] == [8, 4, 8]
    assert max(report["tnd_statistics"][1:]) <= TOLERANCE, "each sequence's rows, head-major, each value 8 times"
    assert report["mode3_wrong_mask"][0] == "ValueError" and "2048 x 2048" in report["mode3_wrong_mask"][1]
    assert report["dropout"] == [
        "NotImplementedError",
        "npu_fusion_attention (simulated): dropout (keep_prob=0.9) is not modelled",
    ]
    assert report["prefix_mode"][0] == "NotImplementedError"
    for check in ("grad_bsh_causal", "grad_tnd_causal"):
        device, *gaps = report[check]
        assert device == "npu:0"
        assert max(gaps) <= TOLERANCE, (check, gaps)
    device, rstd_shape, y_gap, rstd_gap = report["rms_norm"]
    assert (device, rstd_shape) == ("npu:0", [3, 5, 1])
    assert y_gap <= TOLERANCE and rstd_gap <= TOLERANCE


# -- a device where user code goes wrong as on a real one --------------------------------------------------------

DEVICE = """
import io
torch.manual_seed(0)
a, b = torch.randn(4, 3), torch.randn(4, 3)
on = npu(a)
attempt("add_cpu", lambda: str((on + b).device))
attempt("cat_cpu", lambda: str(torch.cat([on, b]).device))
attempt("cpu_linear", lambda: str(torch.nn.Linear(3, 2)(on).device))
attempt("zero_dim_cpu", lambda: [str((on * torch.tensor(2.0)).device), gap(on * torch.tensor(2.0), a * 2)])
attempt("cpu_index", lambda: [str(on[torch.tensor([0, 2])].device), gap(on[torch.tensor([0, 2])], a[[0, 2]])])
attempt("to_cpu", lambda: [str(on.cpu().device), gap(on.cpu(), a)])

# saved npu tensors: torch.load's defaults (weights_only=True), and map_location
buffer = io.BytesIO()
torch.save({"tensor": on, "parameter": torch.nn.Parameter(npu(b)), "view": on[1:3]}, buffer)
def load(**options):
    buffer.seek(0)
    loaded = torch.load(buffer, **options)
    parameter = loaded["parameter"]
    return [str(loaded["tensor"].device), isinstance(parameter, torch.nn.Parameter), str(parameter.device),
            gap(loaded["tensor"], a), gap(parameter, b), gap(loaded["view"], a[1:3])]
attempt("load_defaults", load)
attempt("load_to_cpu", lambda: load(map_location="cpu"))

with torch.autocast("npu", dtype=torch.bfloat16):
    product = on @ npu(b).T
    report["autocast"] = [str(product.dtype), str(torch.softmax(product, -1).dtype), str((on + 1).dtype),
                          gap(product.float(), (a.bfloat16() @ b.bfloat16().T).float())]
report["autocast_off"] = str((on @ npu(b).T).dtype)

# memory figures: the bytes npu tensors hold, a storage counted once, the peak kept
start = torch.npu.memory_allocated()
held = torch.empty(1000, device="npu")
view = held[10:20]
grown = torch.npu.memory_allocated() - start
free_while_held = torch.npu.mem_get_info()[0]
del held
still_viewed = torch.npu.memory_allocated() - start
del view
report["memory"] = [grown, still_viewed, torch.npu.memory_allocated() - start,
                    torch.npu.max_memory_allocated() >= start + 4000, free_while_held < torch.npu.mem_get_info()[1]]
torch.npu.reset_peak_memory_stats()
report["peak_reset"] = torch.npu.max_memory_allocated() == torch.npu.memory_allocated()

# a deep copy owns its memory; dropout draws from the device's generator and moves it on
import copy
original = npu(torch.ones(3))
copied = copy.deepcopy(original)
original.add_(1)
report["deepcopy"] = [str(copied.device), copied.cpu().tolist()]
torch.npu.manual_seed(0)
state, cpu_state = torch.npu.get_rng_state(), torch.random.get_rng_state()
first, second = (F.dropout(npu(torch.ones(64)), 0.5) for _ in range(2))
report["dropout"] = [not torch.equal(torch.npu.get_rng_state(), state), not torch.equal(first.cpu(), second.cpu()),
                     torch.equal(torch.random.get_rng_state(), cpu_state)]
torch.npu.set_rng_state(state)
report["dropout_replayed"] = torch.equal(F.dropout(npu(torch.ones(64)), 0.5).cpu(), first.cpu())
"""


@ONCE
def test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one():
    report = run_child(DEVICE)
    for check in ("add_cpu", "cat_cpu", "cpu_linear"):
        kind, message = report[check]
        assert kind == "RuntimeError" and message.startswith(SAME_DEVICE), (check, report[check])
    assert report["zero_dim_cpu"] == ["ran", ["npu:0", 0.0]], "a 0-dim CPU tensor is a scalar on any device"
    assert report["cpu_index"] == ["ran", ["npu:0", 0.0]], "CPU indices are allowed, as on CUDA"
    assert report["to_cpu"] == ["ran", ["cpu", 0.0]]
    assert report["load_defaults"] == ["ran", ["npu:0", True, "npu:0", 0.0, 0.0, 0.0]]
    assert report["load_to_cpu"] == ["ran", ["cpu", True, "cpu", 0.0, 0.0, 0.0]]
    product, softmax, added, gap = report["autocast"]
    assert (product, softmax, added) == ("torch.bfloat16", "torch.float32", "torch.float32"), "CUDA's autocast lists"
    assert gap == 0.0, "the product of the inputs cast to bf16"
    assert report["autocast_off"] == "torch.float32"
    assert report["memory"] == [4000, 4000, 0, True, True], "a view holds its storage; freed with the last tensor"
    assert report["peak_reset"] is True
    assert report["deepcopy"] == ["npu:0", [1.0, 1.0, 1.0]], "a deep copy shares no memory with the original"
    assert report["dropout"] == [True, True, True], "each mask a new draw from the device's generator, not the CPU's"
    assert report["dropout_replayed"] is True, "the same state, the same mask"


# -- the FusedAdam Megatron builds, per line: MindSpeed's, MegatronAdaptor's or TransformerEngineNPU's ---------------

MINDSPEED_ADAM = "mindspeed.core.optimizer.adamw.AdamW"
TENPU_ADAM = "transformer_engine.pytorch.optimizers.fused_adam.FusedAdam"
ADAM = (
    f"MINDSPEED_ADAM, TENPU_ADAM = {MINDSPEED_ADAM!r}, {TENPU_ADAM!r}\n"
    + """
import os
try:  # as verl's engine package imports it, before Megatron (guarded, as verl's)
    import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402
except ImportError:  # core_r0.18.0 without MegatronAdaptor
    pass
import megatron.core.optimizer as optimizer
import megatron.core.optimizer.distrib_optimizer as distributed

report["line"] = os.environ["NPU_SHIM_SIM_MINDSPEED"]
report["adam"] = f"{optimizer.Adam.__module__}.{optimizer.Adam.__qualname__}"
# Megatron's branch without TE or Apex (both megatron-cores): torch's AdamW as Adam, HAVE_APEX_OR_TE False
report["torch_branch"] = [optimizer.Adam is torch.optim.AdamW, not distributed.HAVE_APEX_OR_TE]
if report["adam"] in (MINDSPEED_ADAM, TENPU_ADAM):
    torch.manual_seed(0)
    start = [torch.randn(5, 3), torch.randn(7)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(3)]
    ours = [torch.nn.Parameter(npu(p)) for p in start]
    reference = [torch.nn.Parameter(p.clone()) for p in start]
    options = {"lr": 1e-2, "weight_decay": 0.1, "betas": (0.9, 0.95), "eps": 1e-8}
    mindspeed_adam, torch_adam = optimizer.Adam(ours, **options), torch.optim.AdamW(reference, **options)
    report["state_before_a_step"] = [len(mindspeed_adam.state), "step" in mindspeed_adam.param_groups[0]]
    for step in grads:
        for parameter, reference_parameter, grad in zip(ours, reference, step):
            parameter.grad, reference_parameter.grad = npu(grad), grad.clone()
        mindspeed_adam.step()
        torch_adam.step()
    report["update_gap"] = max(gap(p, r) for p, r in zip(ours, reference))
    group_step = mindspeed_adam.param_groups[0]["step"]
    report["step"] = [isinstance(group_step, torch.Tensor), str(getattr(group_step, "device", "")), int(group_step),
                      sorted(mindspeed_adam.state[ours[0]])]
"""
)


# Each line beside the Megatron it patches: the newest line of each Megatron.
LINE_BESIDE_THIS_MEGATRON = {"0.12": "2.3.0_core_r0.12.1", "0.16": "core_r0.16.0", "0.18": "core_r0.18.0"}[
    ".".join(version("megatron-core").split(".")[:2])
]
# core_r0.18.0's three layers, as installed: (MegatronAdaptor, TransformerEngineNPU)
STACKS = [(True, True), (True, False), (False, True)] if LINE_BESIDE_THIS_MEGATRON == "core_r0.18.0" else [(True, True)]


@pytest.mark.parametrize(("megatron_adaptor", "transformer_engine_npu"), STACKS, ids=str)
def test_the_fused_adam_megatron_builds_is_the_lines_and_computes_adamw(megatron_adaptor, transformer_engine_npu):
    """Megatron imports Transformer Engine's FusedAdam before apex's. ``2.3.0_core_r0.12.1`` and ``core_r0.16.0``:
    MindSpeed makes apex's its AdamW (no TE). ``core_r0.18.0``: TransformerEngineNPU's, as MindSpeed 0.18's own
    swap optimizer notes; without TENPU, MegatronAdaptor's apex one (MindSpeed's AdamW); without MA ``import
    mindspeed`` fails there, and Megatron takes its torch branch."""
    line = LINE_BESIDE_THIS_MEGATRON
    report = run_child(
        ADAM, mindspeed_line=line, megatron_adaptor=megatron_adaptor, transformer_engine_npu=transformer_engine_npu
    )
    assert report["line"] == line
    if not megatron_adaptor:
        assert report["adam"] == TENPU_ADAM, "TENPU alone is still Transformer Engine to Megatron"
    elif line == "core_r0.18.0" and transformer_engine_npu:
        assert report["adam"] == TENPU_ADAM
    else:
        assert report["adam"] == MINDSPEED_ADAM
    assert report["torch_branch"] == [False, False], "Megatron takes its TE/Apex branch (the distributed optimizer too)"
    assert report["state_before_a_step"] == [0, False], "no step anywhere before the first"
    assert report["update_gap"] <= TOLERANCE, "the same update as torch's AdamW"
    tensor, device, count, state = report["step"]
    assert count == 3 and state == ["exp_avg", "exp_avg_sq"], "the step is counted per group, not per parameter"
    assert (tensor, device) == ((True, "npu:0") if line == "2.3.0_core_r0.12.1" else (False, ""))


def test_without_megatron_adaptor_or_tenpu_megatron_takes_its_torch_branch():
    """Neither MindSpeed's apex (MA's on core_r0.18.0) nor TE: torch's AdamW, as Megatron does on a CPU."""
    if LINE_BESIDE_THIS_MEGATRON != "core_r0.18.0":
        pytest.skip("MegatronAdaptor and TransformerEngineNPU are packages of their own only beside Megatron 0.18")
    report = run_child(ADAM, mindspeed_line="core_r0.18.0", megatron_adaptor=False, transformer_engine_npu=False)
    assert report["adam"] == "torch.optim.adamw.AdamW" and report["torch_branch"] == [True, True]


# -- ring attention on two ranks ----------------------------------------------------------------------------------

RING = (
    """
import os
rank = int(os.environ["RANK"])
torch.distributed.init_process_group("cpu:gloo,npu:hccl", rank=rank, world_size=2)
import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)
from megatron.core import parallel_state
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.transformer_config import TransformerConfig

ORDER = os.environ["ORDER"]  # "repatch first": MindSpeed builds its ring; "mesh first": it never does
if ORDER == "mesh first":
    parallel_state.initialize_model_parallel(context_parallel_size=2)
megatron_adaptor.repatch({"context_parallel_size": 2})
if ORDER == "repatch first":
    parallel_state.initialize_model_parallel(context_parallel_size=2)
config = TransformerConfig(num_layers=1, hidden_size=32, num_attention_heads=4, num_query_groups=2,
                           context_parallel_size=2, attention_dropout=0.0)
attention = DotProductAttention(config, 1, AttnMaskType.causal, "self")  # what MindSpeed put in its place
report["class"] = f"{type(attention).__module__}.{type(attention).__qualname__}"

"""
    + VERL_CHUNKS
    + CAUSAL_REFERENCE
    + """
leaves = [npu(x[mine]).requires_grad_() for x in (q, k, v)]
try:
    out = attention(*leaves, None, packed_seq_params=packed)
    out.backward(npu(dy[mine]))
except AssertionError as error:
    report["error"] = str(error)
else:
    report["out"] = [str(out.device), list(out.shape), gap(out, expected[mine])]
    report["grads"] = [gap(leaf.grad, reference.grad[mine]) for leaf, reference in zip(leaves, reference_leaves)]
"""
)


def ring_ranks(order: str) -> list[dict[str, Any]]:
    code = textwrap.dedent(PRELUDE) + textwrap.dedent(RING) + "\nprint(json.dumps(report))\n"
    return run_ranks(
        code,
        lambda rank, port: simulated_npu_env(
            clean_env(RANK=str(rank), ORDER=order, MASTER_ADDR="127.0.0.1", MASTER_PORT=port), compute=True
        ),
    )


def test_mindspeeds_ring_attention_on_two_ranks_equals_causal_attention_over_the_whole_sequence():
    """verl's CP chunk layout, grouped key/value heads, two packed sequences: forward and gradients."""
    for rank, report in enumerate(ring_ranks("repatch first")):
        assert report["class"] == "mindspeed.core.context_parallel.adaptor.MindSpeedCPDotProductAttention"
        device, shape, gap = report["out"]
        assert (device, shape) == ("npu:0", [10, 4, 8]), rank
        assert gap <= TOLERANCE, rank
        assert max(report["grads"]) <= TOLERANCE, (rank, report["grads"])


def test_without_mindspeeds_ring_the_first_forward_fails_as_mindspeeds_does():
    """A repatch after Megatron's parallel state: the class is swapped, the ring never built."""
    for report in ring_ranks("mesh first"):
        assert report["class"] == "mindspeed.core.context_parallel.adaptor.MindSpeedCPDotProductAttention"
        assert report["error"] == RING_NOT_BUILT


# -- MindSpeed's TE layer-norm linear, per line: the bias of Qwen2's QKV projection ---------------------------------

TE_LINEAR = """
import os
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
torch.distributed.init_process_group("cpu:gloo,npu:hccl", rank=0, world_size=1)
import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)
from megatron.core import parallel_state
from megatron.core.transformer.transformer_config import TransformerConfig
from mindspeed.te_layers import TELayerNormColumnParallelLinear

from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

parallel_state.initialize_model_parallel()
model_parallel_cuda_manual_seed(0)  # Megatron's RNG tracker, which its layers initialise their weights under
torch.manual_seed(0)
config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, normalization="RMSNorm")
x = torch.randn(3, 1, 8)
for line in ("2.3.0_core_r0.12.1", "f2b0977e", "core_r0.16.0"):
    megatron_adaptor.simulate_fresh_process(line)
    layer = TELayerNormColumnParallelLinear(8, 6, config=config, init_method=torch.nn.init.normal_,
                                            gather_output=False, bias=True, skip_bias_add=False)
    with torch.no_grad():
        layer.bias.fill_(1.0)
    output, returned = layer(npu(x))
    normed = F.rms_norm(x, (8,), layer.layer_norm_weight.detach().cpu(), config.layernorm_epsilon)
    without_bias = normed @ layer.weight.detach().cpu().T
    report[line] = [gap(output, without_bias), gap(output, without_bias + 1.0), returned is None]
"""


def test_mindspeeds_te_layer_norm_linear_drops_its_bias_on_2_3_0_only():
    """MindSpeed 2.3.0_core_r0.12.1's TELayerNormColumnParallelLinear adds no bias unless Megatron asked for it back
    (skip_bias_add): Qwen2's QKV bias is ignored and never trained there; f2b0977e and core_r0.16.0 add it."""
    report = run_child(TE_LINEAR, env_extra={"PORT": str(free_port())})
    without, with_bias, returned_none = report["2.3.0_core_r0.12.1"]
    assert without <= TOLERANCE and with_bias > 0.5 and returned_none
    for line in ("f2b0977e", "core_r0.16.0"):
        without, with_bias, returned_none = report[line]
        assert with_bias <= TOLERANCE and without > 0.5 and returned_none, line
