"""What `make demo` says of npu_shim's fixes: every fix of the catalogue, whatever the process it reports on judged.

demo.py needs verl to run; its list of fixes is read here from made-up outcomes, as its build with the shim reports
them (tests/matrix/probe.py: the hook's outcomes).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import pytest
from helpers import ROOT

from npu_shim.catalogue import fix_names

# What the build with the shim judged on verl 0.7.1 (make demo's): every fix but one, whose module it never imports.
NEVER_IMPORTED = "megatron_checkpoint_metadata"
APPLIED_ON_0_7_1 = ("shared_repatch", "value_engine", "lm_engine_repatch", "megatron_critic", "npu_smi_card")
REASON = "the reason the shim gives"


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    """demo.py, imported (it adds tests/matrix to sys.path for probe.py, taken away again here)."""
    path = list(sys.path)
    spec = importlib.util.spec_from_file_location("npu_shim_demo", ROOT / "demo.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path
    return module


def outcome(fix: str) -> dict[str, str]:
    verdict = "applied" if fix in APPLIED_ON_0_7_1 else "not applicable"
    return {"fix": fix, "verdict": verdict, "reason": REASON}


def named(lines: list[str]) -> list[str]:
    """The fixes the lines name, in their order (a name wrapped over two lines is never split: no blank in it)."""
    return [word for word in re.findall(r"[a-z_0-9]+", " ".join(lines)) if word in fix_names()]


@pytest.mark.parametrize("judged", ["all", "all but one", "none"])
def test_the_demo_lists_every_fix_of_the_catalogue_once(demo, judged):
    names = {"all": fix_names(), "all but one": [f for f in fix_names() if f != NEVER_IMPORTED], "none": []}[judged]
    lines = demo.fix_lines([outcome(fix) for fix in names])
    assert sorted(named(lines)) == sorted(fix_names()), "\n".join(lines)
    for fix in names:
        if fix in APPLIED_ON_0_7_1:
            assert f"  {fix}: {REASON}" in lines, "an applied fix in the shim's own words"
    assert all(len(line) <= demo.WIDTH for line in lines)


def test_a_fix_the_process_never_judged_is_named_with_the_module_it_watches(demo):
    lines = demo.fix_lines([outcome(fix) for fix in fix_names() if fix != NEVER_IMPORTED])
    text = " ".join(line.strip() for line in lines)
    assert text.endswith(
        f"not judged here (nothing in the build imported what it watches): {NEVER_IMPORTED} "
        "(watches megatron.core.dist_checkpointing.strategies.torch)"
    )


def test_the_demo_installs_the_shim_from_what_a_checkout_holds(demo, tmp_path):
    """make demo installs the shim offline from a copy of the checkout: the copy must hold what pyproject.toml builds
    with (its build backend too; a copy without it failed with `No module named 'out_of_tree'`)."""
    site = demo.install_shim(tmp_path)
    assert (site / "npu_shim" / "doctor" / "probe.py").is_file()
    assert (site / "npu_shim_bootstrap" / "sitecustomize.py").is_file()
