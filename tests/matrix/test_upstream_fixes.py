"""Later upstream fixes outside the engine package, on this release's own code (simulated NPU).

Each child imports the module a fix watches, with the shim (the checkout on PYTHONPATH) or
without, and calls the release's function as verl's caller would:

- verl #7055 (``npu_causal_mask``): the peak memory ``_build_npu_attn_mask`` adds at a long
  sequence (Linux's VmHWM, reset before the call), and a digest of the mask it returns;
- verl #7372 (``vlm_mask_on_npu``): the mask ``build_vlm_attn_mask_thd`` returns for a jagged
  batch, as ``model_forward`` calls it, on the simulated NPU (and, without the shim, on the
  release's own non-NPU path, the reference);
- verl #6322 (``megatron_checkpoint_save``): a distributed checkpoint saved and loaded back with
  megatron-core's own ``dist_checkpointing`` (one gloo rank), after ``import verl``, on the CPU:
  the failure is not the NPU's, and the simulated NPU's privateuse1 backend has no hooks for
  torch's serialization.

The children, beside this file: npu_causal_mask_child.py, vlm_mask_child.py, checkpoint_save_child.py, and for the
hook's order and faults import_order_child.py and fault_in_fix_child.py.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from helpers import ROOT, clean_env, fixes_by_release, matrix_column, run_in_session, run_python_file

from simulated_npu import simulated_npu_env

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
SEQ_LEN = 8192  # S: 0.8.0's transient is 8 * S^2 bytes, 512 MiB here
VERDICTS = fixes_by_release()[matrix_column()]  # README.md's table: what the doctor prints here
HAS_MASK_FUNCTIONS = VERL not in ("0.6.1", "0.7.1")
MEGATRON_0_12 = version("megatron-core").startswith("0.12.")
MODULE_FIXES = ("npu_causal_mask", "vlm_mask_on_npu")  # the fixes VLM_MASK's imports reach
# Where a test's outcome does not depend on the release (the hook's order and fault handling), once: on
# 0.8.0 with megatron-core 0.16.1, where every module fix applies. The masks do not depend on Megatron.
ONCE = VERL == "0.8.0" and not MEGATRON_0_12
HERE = Path(__file__).parent


def child(program: str, shim: bool, tmp_path, *args: str, npu: bool = True, **variables: str) -> dict:
    """``program``, a file beside this one, with ``args``, the checkout on PYTHONPATH or not: its JSON report."""
    env = clean_env([ROOT] if shim else [], **variables)
    env = simulated_npu_env(env) if npu else env
    return run_python_file(HERE / program, env, *args, cwd=tmp_path).report


@pytest.fixture(scope="module")
def vlm(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("vlm")
    return {mode: child("vlm_mask_child.py", mode == "shim", tmp, str(tmp)) for mode in ("shim", "none")}


def test_each_fix_is_applied_exactly_where_the_release_lacks_it(vlm):
    assert vlm["shim"]["npu"] is (True if HAS_MASK_FUNCTIONS else None)
    outcomes = vlm["shim"]["outcomes"]
    assert {fix: outcomes[fix] for fix in MODULE_FIXES} == {fix: VERDICTS[fix] for fix in MODULE_FIXES}
    assert vlm["none"]["outcomes"] == {}


@pytest.mark.skipif(not HAS_MASK_FUNCTIONS or MEGATRON_0_12, reason="no VLM THD mask (0.6/0.7), or tested beside")
def test_the_vlm_mask_on_an_npu_is_the_one_built_everywhere_else(vlm):
    shim, none = vlm["shim"], vlm["none"]
    lacks_7372 = VERDICTS["vlm_mask_on_npu"] == "applied"
    assert none["on_npu"]["mask"] is None if lacks_7372 else none["on_npu"] == none["elsewhere"]
    assert none["elsewhere"]["mask"] == [[True] * 5 + [False] * 2, [True] * 3 + [False] * 4, [True] * 7]
    assert shim["on_npu"] == none["elsewhere"]  # padded ids and mask, as off an NPU
    assert shim["elsewhere"] == none["elsewhere"]  # and nothing changes off an NPU


@pytest.mark.skipif(not HAS_MASK_FUNCTIONS or MEGATRON_0_12, reason="no NPU causal mask (0.6/0.7), or tested beside")
def test_the_npu_causal_mask_costs_no_float32_s_by_s(tmp_path):
    shim = child("npu_causal_mask_child.py", True, tmp_path, str(SEQ_LEN))
    none = child("npu_causal_mask_child.py", False, tmp_path, str(SEQ_LEN))
    assert shim["shape"] == none["shape"] == [1, 1, SEQ_LEN, SEQ_LEN]
    assert shim["dtype"] == none["dtype"] == "torch.bool"
    assert shim["digest"] == none["digest"]  # the same mask, bit for bit
    per_s2 = {mode: report["peak_bytes"] / SEQ_LEN**2 for mode, report in (("shim", shim), ("none", none))}
    # bool S x S tensors: a few bytes per S^2; 0.8.0's float32 ones and tril, alive together: 8
    assert per_s2["shim"] < 4.5, per_s2
    assert (per_s2["none"] > 7) is (VERDICTS["npu_causal_mask"] == "applied"), per_s2


CHECKPOINT_FIXES = ("megatron_checkpoint_save", "megatron_checkpoint_metadata")  # the two a save and a load meet
AT_IMPORT_VERL = ("npu_smi_card",)  # the fix of verl.utils.device, which `import verl` imports


@pytest.mark.parametrize("shim", [True, False], ids=["shim", "none"])
def test_a_distributed_checkpoint_saves_and_loads_back(tmp_path, shim):
    report = child("checkpoint_save_child.py", shim, tmp_path, str(tmp_path), npu=False)
    if shim:
        assert report["outcomes"] == {fix: VERDICTS[fix] for fix in (*CHECKPOINT_FIXES, *AT_IMPORT_VERL)}
        assert report == {"flattened": report["flattened"], "loaded_back": True, "outcomes": report["outcomes"]}
        if MEGATRON_0_12:  # where the metadata fix can apply, the load reads mcore_data: a flattened tensor was saved
            assert report["flattened"] is True
    elif MEGATRON_0_12:  # what the release does on a torch its own patch does not cover
        assert "_write_item() missing 1 required positional argument: 'serialization_format'" in report["error"]
    else:
        assert report["loaded_back"] is True


def test_without_the_metadata_fix_a_flattened_state_loads_back_only_where_the_pairing_keeps_it(tmp_path):
    """megatron-core 0.12 with torch 2.10 (verl 0.9.1's A5 image): the save drops ``mcore_data``, so the load of a
    flattened state (the distributed optimizer's) fails; with every other Megatron and torch it loads back."""
    off = {"NPU_SHIM_DISABLED_FIXES": "megatron_checkpoint_metadata"}
    report = child("checkpoint_save_child.py", True, tmp_path, str(tmp_path), npu=False, **off)
    assert report["outcomes"]["megatron_checkpoint_metadata"] == "disabled"
    if VERDICTS["megatron_checkpoint_metadata"] == "applied":
        assert report["error"] == "AttributeError: 'Metadata' object has no attribute 'mcore_data'"
    else:
        assert report["loaded_back"] is True


def test_the_doctor_prints_the_readme_table(tmp_path):
    """Every fix, in the order the hook applies them, with the verdict README.md's table gives this environment."""
    env = simulated_npu_env(clean_env([ROOT]))
    run = run_in_session([sys.executable, "-m", "npu_shim", "doctor", "--json"], env, tmp_path, 300)
    report = json.loads(run.stdout)
    assert {fix["fix"]: fix["verdict"] for fix in report["fixes"]} == VERDICTS
    assert [fix["fix"] for fix in report["fixes"]] == list(VERDICTS)


ENGINE = "verl.workers.engine"
MODEL_FORWARD = "verl.models.mcore.model_forward"


@pytest.mark.parametrize(
    "order",
    [
        ["npu_shim", MODEL_FORWARD, ENGINE],  # the watched modules before the engine package
        ["npu_shim", ENGINE, MODEL_FORWARD],
        [MODEL_FORWARD, ENGINE, "npu_shim"],  # the shim last: its hooks fire at once
    ],
    ids=["modules-first", "engine-first", "shim-last"],
)
@pytest.mark.skipif(not ONCE, reason="once, on 0.8.0: the order of imports is the hook's, not the release's")
def test_each_fix_applies_whatever_the_order_of_imports(tmp_path, order):
    # activated by `import npu_shim` where the order puts it
    outcomes = child("import_order_child.py", False, tmp_path, str(ROOT), *order)
    for fix in CHECKPOINT_FIXES:  # megatron's checkpoint modules: imported by a save or a load, not by these
        outcomes.pop(fix, None)
    assert outcomes == {fix: verdict for fix, verdict in VERDICTS.items() if fix not in CHECKPOINT_FIXES}


@pytest.mark.skipif(not ONCE, reason="once, on 0.8.0: fault isolation is the hook's, not the release's")
def test_a_fault_in_one_modules_fixes_leaves_that_module_as_shipped_and_the_others_fixed(tmp_path):
    env = simulated_npu_env(clean_env())
    run = run_python_file(HERE / "fault_in_fix_child.py", env, str(ROOT), cwd=tmp_path)
    report = run.report
    assert report["util_function"] == "verl.models.mcore.util"  # the partial edit was undone
    assert "vlm_mask_on_npu" not in report["outcomes"]
    engine_fixes = ("shared_repatch", "value_engine", "lm_engine_repatch", "mindspeed_line_repatch")
    assert {fix: report["outcomes"][fix] for fix in engine_fixes} == {fix: VERDICTS[fix] for fix in engine_fixes}
    assert report["outcomes"]["npu_causal_mask"] == VERDICTS["npu_causal_mask"]  # another module's fix
    assert run.stderr.count("npu_shim failed while patching verl.models.mcore.model_forward") == 1
    assert "Traceback" not in run.stderr
