"""verl's Megatron critic and actor train PPO steps on a simulated NPU that computes, per release.

Runs in each environment of ``nox -s matrix``. One fresh interpreter per activation runs
``train_probe.py`` (compute mode: npu tensors compute on the CPU): the critic's ``initialize()``,
values (``infer_batch``), three ``train_batch`` steps with verl's ``value_loss`` on one batch, each
followed by an lr step; the actor the same with log-probs and verl's ``ppo_loss``. Values and
log-probs are compared with Hugging Face on the plain CPU in float32 with the same weights (the
critic's value head read out of the engine), within ``train_probe.TOLERANCE`` (four bf16 steps).

Where a release cannot train on this environment's Megatron, on any device, the tests say so exactly
(``cannot_train``) instead of skipping.
"""

from __future__ import annotations

import itertools
import json
import os
from importlib.metadata import version
from typing import Any

import probe
import pytest
import train_probe

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
MEGATRON_0_12 = version("megatron-core").startswith("0.12.")
AFFECTED = VERL in ("0.6.1", "0.7.1")  # no value engine on an NPU without the shim
UNKNOWN_DEVICE = "AssertionError: Unknown device: npu for model_type: value_model and backend: megatron"
ENABLE_MTP = "TypeError: gptmodel_forward_no_padding() got an unexpected keyword argument 'enable_mtp'"
VP_STAGE = "TypeError: get_transformer_layer_offset() got an unexpected keyword argument 'vp_stage'"
NO_WEIGHT_DECAY_COND = "TypeError: get_megatron_optimizer() got an unexpected keyword argument 'no_weight_decay_cond'"
# PyPI verl 0.7.1 with megatron-core 0.12.1 (MindSpeed 2.3.0_core_r0.12.1's): every Megatron forward fails (#5580)
LACKS_5580 = VERL == "0.7.1" and MEGATRON_0_12
# verl 0.6.x asks Megatron for the optimizer the way megatron-core 0.12 takes it: with a later one no engine initialises
OLD_OPTIMIZER_API = VERL == "0.6.1" and not MEGATRON_0_12
# The actor's step to compare bit for bit with the shim's: verl's as it ships, or, where that cannot run,
# the shim's without the fix that changes the LM engine (lm_engine_repatch).
ACTOR_BASELINE = "shim, LM engine as verl ships it" if LACKS_5580 else "none"
STEPS = 3


def cannot_train(run: str, role: str) -> tuple[str, str] | None:
    """(stage, error) where this environment's ``run`` cannot train ``role``, on any device; None where it trains."""
    if run == "none" and role == "critic" and AFFECTED:
        return "build", UNKNOWN_DEVICE
    if OLD_OPTIMIZER_API:
        return "initialize", NO_WEIGHT_DECAY_COND
    if run == "none" and LACKS_5580:
        return "infer", VP_STAGE
    return None


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Without the shim, with it, and, where the shim carries a fix the run needs, with it minus that fix."""
    directory = tmp_path_factory.mktemp("training")
    runs = {"none": ("none",), "shim": ("sitecustomize",)}
    if VERL == "0.7.1":
        runs["shim without #5870"] = ("import-before", "--roles", "critic", "--skip-fix", "megatron_critic")
    if LACKS_5580:
        runs["shim without #5580"] = ("import-before", "--skip-fix", "moe_layer_offset")
        runs[ACTOR_BASELINE] = ("import-before", "--roles", "actor", "--skip-fix", "lm_engine_repatch")
    children = {}
    for name, (mode, *options) in runs.items():
        output = directory / f"{name}.json"
        children[name] = (train_probe.start(mode, output, "--steps", str(STEPS), *options), output)
    results = {}
    finished = probe.finish({name: child for name, (child, _) in children.items()})
    for name, (status, stderr) in finished.items():
        assert status == 0, f"train_probe {name} failed:\n{stderr}"
        results[name] = json.loads(children[name][1].read_text())
    return results


def check(report: dict[str, Any], run: str, role: str) -> dict[str, Any]:
    """The role trained as the reference says, or failed exactly where this environment cannot train it."""
    result = report["roles"][role]
    failure = cannot_train(run, role)
    if failure is not None:
        assert (result["stage"], result["error"]) == failure, (run, role)
        return result
    assert result["stage"] == "done", (run, role, result["error"], result.get("traceback"))
    assert result["output_device"].startswith("npu"), result["output_device"]  # the engine's own output
    assert result["max_abs_diff"] <= train_probe.TOLERANCE, result["tolerance_note"]
    assert result["weights_changed"]
    assert len(result["losses"]) == STEPS
    assert all(later < earlier for earlier, later in itertools.pairwise(result["losses"])), result["losses"]
    assert result["lr"][1] != result["lr"][0]  # the lr scheduler stepped
    return result


def test_the_engines_run_on_the_simulated_npu_in_compute_mode(reports):
    for name, report in reports.items():
        assert report["device"] == "npu", name
        assert report["compute_mode"] is True, name
        assert report["verl_version"].startswith(VERL), name


def test_with_the_shim_the_critic_trains_and_its_values_match_a_reference_without_verl(reports):
    critic = check(reports["shim"], "shim", "critic")
    if critic["stage"] == "done":  # one value per token of the two sequences, padding removed (nested layout)
        assert critic["output_shape"] == [2 * (train_probe.PROMPT_LENGTH + train_probe.RESPONSE_LENGTH) - 4]


def test_the_actor_trains_and_its_log_probs_match_a_reference_without_verl(reports):
    for run in ("none", "shim"):
        check(reports[run], run, "actor")


def test_the_shim_leaves_the_actors_ppo_step_bit_for_bit_as_verl_takes_it(reports):
    """Where the shim moves the LM engine's repatch (0.6/0.7) or rebinds _mindspeed_repatch (0.8 on), at CP = 1."""
    without = check(reports[ACTOR_BASELINE], ACTOR_BASELINE, "actor")
    with_shim = reports["shim"]["roles"]["actor"]
    for key in ("stage", "error", "losses", "grad_norms", "weights_sha256", "max_abs_diff", "lr"):
        assert with_shim[key] == without[key], key


def test_without_the_shim_the_critic_trains_only_where_verl_has_the_value_engine(reports):
    critic = check(reports["none"], "none", "critic")
    if not AFFECTED:
        with_shim = reports["shim"]["roles"]["critic"]
        for key in ("stage", "error", "losses", "grad_norms", "weights_sha256", "max_abs_diff"):
            assert critic[key] == with_shim[key], key  # the shim changes nothing the critic computes


@pytest.mark.skipif(VERL != "0.7.1", reason="verl 0.7.1 is the release whose critic forward lacks #5870")
def test_without_the_5870_carry_the_critic_dies_at_its_first_value_forward(reports):
    report = reports["shim without #5870"]
    outcomes = {outcome["fix"]: outcome["verdict"] for outcome in report["outcomes"]}
    assert outcomes["value_engine"] == "applied"
    assert outcomes["megatron_critic"] == "not applicable"  # made to stand aside
    critic = report["roles"]["critic"]
    assert (critic["stage"], critic["error"]) == ("infer", ENABLE_MTP)
    with_carry = {outcome["fix"]: outcome["verdict"] for outcome in reports["shim"]["outcomes"]}
    assert with_carry["megatron_critic"] == "applied"


@pytest.mark.skipif(not LACKS_5580, reason="PyPI verl 0.7.1 with megatron-core 0.12.1 is what lacks #5580")
def test_without_the_5580_carry_every_megatron_forward_dies(reports):
    report = reports["shim without #5580"]
    outcomes = {outcome["fix"]: outcome["verdict"] for outcome in report["outcomes"]}
    assert outcomes["moe_layer_offset"] == "not applicable"  # made to stand aside
    for role in ("critic", "actor"):
        assert (report["roles"][role]["stage"], report["roles"][role]["error"]) == ("infer", VP_STAGE), role
    with_carry = {outcome["fix"]: outcome["verdict"] for outcome in reports["shim"]["outcomes"]}
    assert with_carry["moe_layer_offset"] == "applied"
