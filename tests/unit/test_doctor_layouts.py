"""The doctor's verdict of every fix on each verl layout users run (synthetic trees)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT, DoctorRun, clean_env, doctor

ALL_FIXES = (
    "shared_repatch",
    "value_engine",
    "lm_engine_repatch",
    "megatron_critic",  # a synthetic tree's forward_step is no release's code: not applicable on every layout
    "mindspeed_line_repatch",
)
# Fixes of modules outside the engine package, and the module each watches: a synthetic tree has no
# verl.models.mcore and no Megatron.
MODULE_FIXES = {
    "npu_causal_mask": "verl.models.mcore.util",
    "vlm_mask_on_npu": "verl.models.mcore.model_forward",
    "megatron_checkpoint_save": "megatron.core.dist_checkpointing.strategies.filesystem_async",
    "megatron_checkpoint_metadata": "megatron.core.dist_checkpointing.strategies.torch",
    "moe_layer_offset": "verl.utils.megatron.router_replay_utils",
    "ray_npu_device_index": "verl.single_controller.base.worker",
}
DEVICE_FIXES = ("npu_smi_card",)  # the trees' verl.utils.device imports, without 0.7.1+'s get_npu_versions
# the shim's own repatch has #6674 and the MindSpeed-line mend; no synthetic tree holds 0.9.x's exact code
BACKPORTED = ("applied", "applied", "applied", "not applicable", "not applicable")


def doctor_json(tree, cwd, *args: str) -> tuple[dict, DoctorRun]:
    """``npu-shim doctor --json`` over a synthetic tree, and the finished run."""
    run = doctor(clean_env([ROOT, tree]), cwd, *args)
    return run.report, run


@pytest.mark.parametrize(
    ("layout", "verdicts"),
    [
        ("0.6", BACKPORTED),
        ("0.7.1", BACKPORTED),
        ("release-0.7.1", ("applied", "applied", "native", *("not applicable",) * 2)),
        ("main-pre-6135", ("applied", "applied", "native", *("not applicable",) * 2)),
        ("0.9", ("native",) * 3 + ("not applicable",) * 2),  # its repatch function is no release's
        ("0.8-edited", ("native", "native", "native", *("not applicable",) * 2)),
    ],
)
def test_the_verdict_of_every_fix_on_each_layout(synthetic, tmp_path, layout, verdicts):
    report, completed = doctor_json(synthetic(layout), tmp_path)
    not_applicable = [*MODULE_FIXES, *DEVICE_FIXES]
    expected = [*zip(ALL_FIXES, verdicts, strict=True), *((fix, "not applicable") for fix in not_applicable)]
    assert [(fix["fix"], fix["verdict"]) for fix in report["fixes"]] == expected
    # each names its own module, not the engine package that did import
    reasons = {fix["fix"]: fix["reason"] for fix in report["fixes"] if fix["fix"] in MODULE_FIXES}
    assert {fix: reason.partition(" (")[0] for fix, reason in reasons.items()} == {
        fix: f"{module} did not import" for fix, module in MODULE_FIXES.items()
    }
    assert report["value_model_megatron_resolves"] is True
    assert completed.status == 0, completed.stderr


def test_a_patched_lm_engine_is_named_in_the_report_and_the_text(synthetic, tmp_path):
    """A verl 0.7.1 whose LM engine __init__ was edited: the change is missing, the code is no release's."""
    env = clean_env([ROOT, synthetic("edited-0.7.1")])
    completed = doctor(env, tmp_path)
    report = completed.report
    verdicts = {fix["fix"]: fix["verdict"] for fix in report["fixes"]}
    assert (verdicts["value_engine"], verdicts["lm_engine_repatch"]) == ("applied", "unrecognised")
    # Only the actor at CP >= 2 fails without it: named, but the critic's engine is not judged a problem.
    assert report["unrecognised"] == [{"fix": "lm_engine_repatch", "breaks_critic": False}]
    assert (report["status"], completed.status) == ("ok", 0)
    text = subprocess.run(
        [sys.executable, "-m", "npu_shim", "doctor"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line.split(None, 1) for line in text.stdout.splitlines() if line.strip().startswith("unrecognised ")]
    assert lines == [
        ["unrecognised", "lm_engine_repatch: verl needs its change, in code npu_shim does not know; see its reason "
         "under fixes"]
    ], text.stdout  # fmt: skip


def test_a_patched_critic_forward_where_the_release_needs_the_change_is_a_problem(synthetic, tmp_path):
    """verl 0.7.1 needs #5870; a forward_step that is no release's code is left alone, and the critic would fail."""
    report, completed = doctor_json(synthetic("patched-critic-0.7.1"), tmp_path)
    assert {fix["fix"]: fix["verdict"] for fix in report["fixes"]}["megatron_critic"] == "unrecognised"
    assert report["unrecognised"] == [{"fix": "megatron_critic", "breaks_critic": True}]
    assert report["value_model_megatron_resolves"] is True  # the engine resolves; its first value forward fails
    assert (report["status"], report["exit_code"], completed.status) == ("problem", 1, 1)
