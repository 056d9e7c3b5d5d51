"""The kit's torch_npu against the images' own torch_npu wheels, read as data (real_torch_npu.py).

Each check lists the differences it finds and compares them with those ``known.py`` gives reasons for: a new
difference fails, and so does a listed one that is gone (its reason would then mislead).
"""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import callers
import known
import mindspeed_source
import pytest
import torch
from real_torch_npu import Schema, Wheel, opened
from wheels import TORCH_NPU, VERL, wheel

import simulated_npu

simulated_npu.simulate_npu()  # the kit's torch_npu in its default mode: its kernels are plain functions on CPU tensors
from torch_npu import _kernels  # noqa: E402

HERE = Path(__file__).parent
KERNELS: dict[str, Callable[..., Any]] = {name: getattr(_kernels, name) for name in _kernels.__all__}


def kit_child(compute: bool, *dotted: str) -> dict[str, Any]:
    """kit_names_child.py's report, the kit in its default or its compute mode."""
    variables = {**simulated_npu.simulated_npu_env(), simulated_npu.COMPUTE_VARIABLE: "1" if compute else "0"}
    command = [sys.executable, str(HERE / "kit_names_child.py"), *dotted]
    run = subprocess.run(command, capture_output=True, text=True, env=variables, check=False, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


def assert_as_known(found: set[str], listed: dict[str, str], what: str) -> None:
    new, gone = sorted(found - listed.keys()), sorted(listed.keys() - found)
    assert not new, f"{what}: new differences (fix the kit, or give each a reason in known.py): {new}"
    assert not gone, f"{what}: known.py lists differences that are gone (remove them): {gone}"


# --- every public name the kit defines exists in the real torch_npu -------------------------------------------------


@pytest.fixture(scope="module")
def used() -> tuple[callers.Scan, str | None]:
    """What verl and MindSpeed use (callers.py), and what was missing to read it all (None: nothing)."""
    verl = [wheel("verl", version) for version in VERL]
    missing = [line for line in mindspeed_source.PINS if not mindspeed_source.available(line)]
    trees = [mindspeed_source.prepare(line) for line in mindspeed_source.PINS if line not in missing]
    message = missing and mindspeed_source.missing_message(missing[0], "the conformance layer's scan of MindSpeed")
    return callers.used(verl, trees, tuple(KERNELS)), message or None


@pytest.fixture(scope="module")
def kit_modules(used: tuple[callers.Scan, str | None]) -> dict[bool, dict[str, Any]]:
    """Each mode's report; compute mode's also resolves the names callers use (one child fewer)."""
    return {False: kit_child(False), True: kit_child(True, *used[0].names)}


def test_kit_names_exist_in_real(real: Wheel, kit_modules: dict[bool, dict[str, Any]]) -> None:
    found = set()
    for compute, report in kit_modules.items():
        for module, names in report["modules"].items():
            found |= {f"{module}.{name}" for name in set(names) - real.names(module)}
        if report["invented"]:
            found.add(f"torch_npu.npu_* ({'compute' if compute else 'default'} mode: any name, as an attribute)")
    assert_as_known(found, known.KIT_ONLY, f"names the kit has and torch_npu {real.version} lacks")


def test_the_kits_extension_names_are_in_torch_npus(real: Wheel) -> None:
    """``torch_npu._C`` is C++: what the kit models of it (the HCCL options MindSpeed builds) is looked for in the
    extension's library, where pybind keeps the names it registers."""
    from torch_npu import _C

    options = _C._distributed_c10d.ProcessGroupHCCL.Options()
    names = {"_distributed_c10d", "ProcessGroupHCCL", "Options", *vars(options)}
    assert not {name for name in names if not real.in_extension(name)}


# --- every op the kit implements has the real schema ------------------------------------------------------------------


def _default(text: str | None) -> object:
    if text is None:
        return inspect.Parameter.empty
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def schema_differences(name: str, kernel: Callable[..., Any], schema: Schema) -> set[str]:
    """Parameter names, order, defaults and keyword-only marks; a ``*args`` or ``**kwargs`` the schema has not."""
    found = set()
    parameters = list(inspect.signature(kernel).parameters.values())
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            found.add(f"{name}: takes {str(parameter).split(':')[0]}, so a misspelt keyword passes")
    kit = [
        parameter for parameter in parameters if parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]
    real_names, kit_names = [p.name for p in schema.parameters], [p.name for p in kit]
    found |= {f"{name}: lacks {missing}" for missing in real_names if missing not in kit_names}
    found |= {f"{name}: takes {extra}, which torch_npu lacks" for extra in kit_names if extra not in real_names}
    shared = [p for p in kit_names if p in real_names]
    if shared != [p for p in real_names if p in kit_names]:
        found.add(f"{name}: parameters in another order: {shared}")
    for real_parameter in schema.parameters:
        mine = next((p for p in kit if p.name == real_parameter.name), None)
        if mine is None:
            continue
        expected = _default(real_parameter.default)
        if mine.default is not expected and mine.default != expected:
            found.add(f"{name}: {mine.name}={mine.default!r}, torch_npu's {real_parameter.default}")
        if (mine.kind == mine.KEYWORD_ONLY) != real_parameter.keyword_only:
            found.add(f"{name}: {mine.name} keyword-only {mine.kind == mine.KEYWORD_ONLY}, torch_npu's not")
    return found


def test_kernel_schemas(real: Wheel) -> None:
    found = set()
    for name, kernel in KERNELS.items():
        if name not in real.schemas:
            found.add(f"{name}: no such op")
            continue
        found |= schema_differences(name, kernel, real.schemas[name])
        arity = len(run_kit(CASES[name][0]))
        if arity != len(real.schemas[name].returns):
            found.add(f"{name}: returns {arity} values, torch_npu {len(real.schemas[name].returns)}")
    listed = {difference[1]: why for difference, why in known.SCHEMA.items() if difference[0] == real.version}
    assert_as_known(found, listed, f"the kit's kernels against torch_npu {real.version}'s registered schemas")


def test_kernels_are_public_ops(real: Wheel) -> None:
    """Each kernel the kit implements is one torch_npu documents (``_op_plugin_docs.py``), or its gradient."""
    undocumented = {name for name in KERNELS if name not in real.documented and not name.endswith("_grad")}
    assert not undocumented, f"torch_npu {real.version} documents no {sorted(undocumented)}"


# --- the kit's outputs have the real meta functions' shapes and dtypes ---------------------------------------------


@dataclass(frozen=True)
class Case:
    """One call as verl or MindSpeed makes it: where, and the arguments (tensors as shapes, built per device)."""

    op: str
    where: str
    tensors: dict[str, tuple[int, ...]]
    options: dict[str, Any] = field(default_factory=dict)
    dtype: torch.dtype = torch.bfloat16
    masks: dict[str, tuple[int, ...]] = field(default_factory=dict)  # bool, True masks out
    float32: tuple[str, ...] = ()  # tensors given in float32 whatever the case's dtype

    def arguments(self, device: str) -> tuple[list[Any], dict[str, Any]]:
        def tensor(name: str, shape: tuple[int, ...]) -> torch.Tensor:
            dtype = torch.float32 if name in self.float32 else self.dtype
            return torch.rand(shape, dtype=dtype, device=device)

        values = {name: tensor(name, shape) for name, shape in self.tensors.items()}
        values |= {
            name: torch.ones(shape, dtype=torch.bool, device=device).triu(1) for name, shape in self.masks.items()
        }
        positional = [values.pop(name) for name in list(values) if name in POSITIONAL[self.op]]
        positional += [self.options[name] for name in POSITIONAL[self.op] if name in self.options]
        keywords = {**values, **{k: v for k, v in self.options.items() if k not in POSITIONAL[self.op]}}
        return positional, keywords


POSITIONAL = {
    "npu_fusion_attention": ("query", "key", "value", "head_num", "input_layout"),
    "npu_fusion_attention_grad": ("query", "key", "value", "dy", "head_num", "input_layout"),
    "npu_rms_norm": ("input", "gamma"),
}
B, S, N, G, D = 2, 16, 4, 2, 8  # grouped key/value heads (G < N), as Qwen's models have them
COMPRESSED = (2048, 2048)  # the causal mask sparse modes 2 to 4 take
SBH, BSND, BNSD = (S, B, N * D), (B, S, N, D), (B, N, S, D)
SBH_KV, BSND_KV, BNSD_KV = (S, B, G * D), (B, S, G, D), (B, G, S, D)
PACKED, PACKED_KV = (S, N, D), (S, G, D)  # TND: two sequences of 5 and 11 tokens
ENDS = {"actual_seq_qlen": [5, S], "actual_seq_kvlen": [5, S]}


def attention(layout: str, q: tuple[int, ...], kv: tuple[int, ...], mode: int, where: str, **more: Any) -> list[Case]:
    """The forward call and its gradient's, in bfloat16 and float16."""
    mask = more.pop("masks", {"atten_mask": COMPRESSED} if mode in (2, 3) else {})
    options = {"head_num": N, "input_layout": layout, "scale": D**-0.5, "sparse_mode": mode, **more}
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        tensors = {"query": q, "key": kv, "value": kv}
        cases.append(Case("npu_fusion_attention", where, tensors, options, dtype, mask))
        statistics = (S, N, 8) if layout == "TND" else (B, N, S, 8)
        gradient = {**tensors, "dy": q, "attention_in": q, "softmax_max": statistics, "softmax_sum": statistics}
        grad_options = {("scale_value" if k == "scale" else k): v for k, v in options.items()}
        cases.append(
            Case(
                "npu_fusion_attention_grad", where, gradient, grad_options, dtype, mask, ("softmax_max", "softmax_sum")
            )
        )
    return cases


ALL_CASES = [
    # MindSpeed's ring and Ulysses context parallelism (shape_order "SBH", sparse_mode 3 on the compressed mask)
    *attention("SBH", SBH, SBH_KV, 3, "MindSpeed context_parallel, shape_order SBH"),
    # MindSpeed's flash attention without a compressed mask: its own [B, 1, S, S] mask (and verl's B1SS one,
    # verl/models/mcore/util.py, 0.8.0+), sparse_mode 0
    *attention("SBH", SBH, SBH_KV, 0, "verl B1SS mask / MindSpeed sparse_mode 0", masks={"atten_mask": (B, 1, S, S)}),
    *attention("SBH", SBH, SBH_KV, 1, "MindSpeed sparse_mode 1, a whole mask", masks={"atten_mask": (S, S)}),
    *attention("SBH", SBH, SBH_KV, 2, "MindSpeed causal, sparse_mode 2"),
    *attention("BSND", BSND, BSND_KV, 3, "MindSpeed layout BSND (ring attention's causal blocks)"),
    *attention("BNSD", BNSD, BNSD_KV, 0, "MindSpeed input_layout BNSD, no mask"),
    # packed sequences (verl's remove-padding path through MindSpeed's TND attention), sparse_mode 3
    *attention("TND", PACKED, PACKED_KV, 3, "MindSpeed shape_order TND", **ENDS),
    # verl's npu_patch (RMSNorm of Qwen2/3 and friends): the weight in the input's dtype, or in float32 beside it
    Case(
        "npu_rms_norm",
        "verl npu_patch, weight as input",
        {"input": (B, S, N * D), "gamma": (N * D,)},
        {"epsilon": 1e-6},
    ),
    Case(
        "npu_rms_norm",
        "verl npu_patch, weight.float()",
        {"input": (B, S, N * D), "gamma": (N * D,)},
        {},
        float32=("gamma",),
    ),
    Case("npu_rms_norm", "MindSpeed fused_rms_norm [s, b, h]", {"input": SBH, "gamma": (N * D,)}, {}, torch.float16),
]
CASES: dict[str, list[Case]] = {}
for _case in ALL_CASES:
    CASES.setdefault(_case.op, []).append(_case)


def run_kit(case: Case) -> tuple[Any, ...]:
    positional, keywords = case.arguments("cpu")
    return tuple(KERNELS[case.op](*positional, **keywords))


def described(output: Any) -> Any:
    """A tensor's shape and dtype (an empty one's shape alone: the meta functions give ``None`` for some), else the
    value's type."""
    if output is None or (isinstance(output, torch.Tensor) and output.numel() == 0):
        return "empty"
    if isinstance(output, torch.Tensor):
        return [list(output.shape), str(output.dtype)]
    return type(output).__name__


def output_differences(real: Wheel, case: Case) -> set[str]:
    positional, keywords = case.arguments("meta")
    meta = [described(output) for output in real.meta_function(case.op)(*positional, **keywords)]
    kit = [described(output) for output in run_kit(case)]
    layout = case.options.get("input_layout", "")
    found = {f"{case.op} {layout}: returns {len(kit)} values, meta {len(meta)}"} if len(kit) != len(meta) else set()
    return found | {
        f"{case.op} {layout}: output {index} kit {mine}, meta {theirs}"
        for index, (mine, theirs) in enumerate(zip(kit, meta, strict=False))
        if mine != theirs
    }


def test_outputs_as_meta_functions_give(real: Wheel) -> None:
    """Each call of ``ALL_CASES`` on the kit (CPU tensors) and through the wheel's meta function (meta tensors)."""
    found = set().union(*(output_differences(real, case) for case in ALL_CASES))
    listed = {difference[1]: why for difference, why in known.OUTPUTS.items() if difference[0] == real.version}
    assert_as_known(found, listed, f"the kit's outputs against torch_npu {real.version}'s meta functions")


# --- every name verl and MindSpeed use is in the kit or listed as not modelled ---------------------------------------


def read_all(used: tuple[callers.Scan, str | None]) -> callers.Scan:
    scan, missing = used
    if missing:  # as the real-MindSpeed layer: a failure under CI, elsewhere a skip said at the end of the run
        (pytest.fail if mindspeed_source.required() else pytest.skip)(missing)
    return scan


def test_callers_names_are_modelled(
    used: tuple[callers.Scan, str | None], kit_modules: dict[bool, dict[str, Any]]
) -> None:
    names = read_all(used).names
    in_kit = set(kit_modules[True]["resolved"])
    listed_but_modelled = sorted(in_kit & known.NOT_MODELLED.keys())
    assert not listed_but_modelled, f"known.NOT_MODELLED lists what the kit has: {listed_but_modelled}"
    found = set(names) - in_kit
    unlisted = {name: sorted(names[name])[:3] for name in sorted(found - known.NOT_MODELLED.keys())}
    assert not unlisted, f"used by verl or MindSpeed, neither in the kit nor in known.NOT_MODELLED: {unlisted}"
    stale = sorted(known.NOT_MODELLED.keys() - found)
    assert not stale, f"known.NOT_MODELLED lists names no caller uses any more: {stale}"


def test_the_keywords_callers_pass_are_the_kits_and_torch_npus(used: tuple[callers.Scan, str | None]) -> None:
    """A keyword verl or MindSpeed passes to a kernel the kit implements is a parameter of the kit's kernel (no
    ``**kwargs`` takes it in) and of every image's torch_npu."""
    wrong = set()
    for op, keywords in read_all(used).keywords.items():
        kit = set(inspect.signature(KERNELS[op]).parameters)
        wrong |= {f"{op}({keyword}=): not the kit's" for keyword in keywords - kit}
        for version in TORCH_NPU:
            known_there = {parameter.name for parameter in opened(version).schemas[op].parameters}
            wrong |= {f"{op}({keyword}=): not torch_npu {version}'s" for keyword in keywords - known_there}
    assert not wrong, sorted(wrong)


def test_the_layouts_and_sparse_modes_callers_write_are_cases_here(used: tuple[callers.Scan, str | None]) -> None:
    """The layouts and sparse modes verl and MindSpeed write as constants in their calls are among ALL_CASES' (those
    passed through variables, e.g. MindSpeed's ``shape_order``, were read by hand: ALL_CASES' comments)."""
    written, covered = set(), set()
    for op, constants in read_all(used).constants.items():
        layout_position = POSITIONAL[op].index("input_layout") if "input_layout" in POSITIONAL[op] else None
        written |= {(op, "input_layout", v) for where, v in constants if where in (layout_position, "input_layout")}
        written |= {(op, "sparse_mode", value) for where, value in constants if where == "sparse_mode"}
    for case in ALL_CASES:
        covered |= {(case.op, name, case.options.get(name)) for name in ("input_layout", "sparse_mode")}
    assert written <= covered, sorted(written - covered)


def test_not_modelled_names_are_real() -> None:
    """What the kit leaves out exists in some image's torch_npu (a name that exists in none is a caller's bug)."""
    wheels = [opened(version) for version in TORCH_NPU]
    absent = []
    for name in known.NOT_MODELLED:
        owner, _, attribute = name.replace("torch.npu", "torch_npu.npu", 1).rpartition(".")
        if not any(attribute in real.names(owner) for real in wheels):
            absent.append(name)
    assert not absent, f"in no torch_npu of {TORCH_NPU}: {absent}"
