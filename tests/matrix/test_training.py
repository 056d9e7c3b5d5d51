"""verl's Megatron critic and actor train one PPO step on a simulated NPU that computes, per release.

Runs in each environment of ``nox -s matrix``. One fresh interpreter per activation runs
``train_probe.py`` (compute mode: npu tensors compute on the CPU): the critic's ``initialize()``,
values (``infer_batch``), three ``train_batch`` steps with verl's ``value_loss`` on one batch, each
followed by an lr step; the actor the same with log-probs and verl's ``ppo_loss``. Values and
log-probs are compared with Hugging Face on the plain CPU in float32 with the same weights (the
critic's value head read out of the engine), within ``train_probe.TOLERANCE`` (four bf16 steps).
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
AFFECTED = VERL in ("0.6.1", "0.7.1")  # no value engine on an NPU without the shim
UNKNOWN_DEVICE = "AssertionError: Unknown device: npu for model_type: value_model and backend: megatron"
ENABLE_MTP = "TypeError: gptmodel_forward_no_padding() got an unexpected keyword argument 'enable_mtp'"
# PyPI verl 0.7.1 with megatron-core 0.12.1 (MindSpeed 2.3.0_core_r0.12.1's): every Megatron forward fails (#5580)
LACKS_5580 = VERL == "0.7.1" and version("megatron-core").startswith("0.12.")
VP_STAGE = "TypeError: get_transformer_layer_offset() got an unexpected keyword argument 'vp_stage'"
# The actor's step to compare bit for bit with the shim's: verl's as it ships, or, where that cannot run,
# the shim's without the fix that changes the LM engine (lm_engine_repatch).
ACTOR_BASELINE = "shim, LM engine as verl ships it" if LACKS_5580 else "none"
STEPS = 3


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Without the shim, with it, and (0.7.1) with it but without its #5870 carry: two at a time."""
    directory = tmp_path_factory.mktemp("training")
    runs = {"none": ("none",), "shim": ("sitecustomize",)}
    if VERL == "0.7.1":
        runs["shim without #5870"] = ("import-before", "--roles", "critic", "--skip-fix", "critic_forward_step")
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


def trained(role: dict[str, Any]) -> None:
    """One role went through build, initialize, infer and ``STEPS`` train steps, as the reference says."""
    assert role["stage"] == "done", (role["error"], role.get("traceback"))
    assert role["output_device"].startswith("npu"), role["output_device"]  # the engine's own output, on the NPU
    assert role["max_abs_diff"] <= train_probe.TOLERANCE, role["tolerance_note"]
    assert role["weights_changed"]
    assert len(role["losses"]) == STEPS
    assert all(later < earlier for earlier, later in itertools.pairwise(role["losses"])), role["losses"]
    assert role["lr"][1] != role["lr"][0]  # the lr scheduler stepped


def test_the_engines_run_on_the_simulated_npu_in_compute_mode(reports):
    for name, report in reports.items():
        assert report["device"] == "npu", name
        assert report["compute_mode"] is True, name
        assert report["verl_version"].startswith(VERL), name


def test_with_the_shim_the_critic_trains_and_its_values_match_a_reference_without_verl(reports):
    critic = reports["shim"]["roles"]["critic"]
    trained(critic)
    # one value per token of the two sequences, padding removed (verl's nested no-padding layout)
    assert critic["output_shape"] == [train_probe.PROMPT_LENGTH * 2 + train_probe.RESPONSE_LENGTH * 2 - 4]


def test_the_actor_trains_and_its_log_probs_match_a_reference_without_verl(reports):
    trained(reports["shim"]["roles"]["actor"])
    actor = reports["none"]["roles"]["actor"]
    if LACKS_5580:
        assert (actor["stage"], actor["error"]) == ("infer", VP_STAGE)
    else:
        trained(actor)


def test_the_shim_leaves_the_actors_ppo_step_bit_for_bit_as_verl_takes_it(reports):
    """Where the shim moves the LM engine's repatch (0.6/0.7) or rebinds _mindspeed_repatch (0.8 on), at CP = 1."""
    without, with_shim = (reports[name]["roles"]["actor"] for name in (ACTOR_BASELINE, "shim"))
    trained(without)
    for key in ("losses", "grad_norms", "weights_sha256", "max_abs_diff", "lr"):
        assert with_shim[key] == without[key], key


def test_without_the_shim_the_critic_is_built_only_where_verl_has_the_value_engine(reports):
    critic = reports["none"]["roles"]["critic"]
    if AFFECTED:
        assert (critic["stage"], critic["error"]) == ("build", UNKNOWN_DEVICE)
        return
    with_shim = reports["shim"]["roles"]["critic"]
    for key in ("stage", "error", "losses", "grad_norms", "weights_sha256", "max_abs_diff"):
        assert critic[key] == with_shim[key], key  # the shim changes nothing the critic computes


@pytest.mark.skipif(VERL != "0.7.1", reason="verl 0.7.1 is the release whose critic forward lacks #5870")
def test_without_the_5870_carry_the_critic_dies_at_its_first_value_forward(reports):
    report = reports["shim without #5870"]
    outcomes = {outcome["fix"]: outcome["verdict"] for outcome in report["outcomes"]}
    assert outcomes["value_engine"] == "applied"
    assert outcomes["critic_forward_step"] == "not applicable"  # made to stand aside
    critic = report["roles"]["critic"]
    assert (critic["stage"], critic["error"]) == ("infer", ENABLE_MTP)
    with_carry = {outcome["fix"]: outcome["verdict"] for outcome in reports["shim"]["outcomes"]}
    assert with_carry["critic_forward_step"] == "applied"


@pytest.mark.skipif(not LACKS_5580, reason="PyPI verl 0.7.1 with megatron-core 0.12.1 is what lacks #5580")
def test_without_the_5580_carry_every_megatron_forward_dies(reports):
    report = reports["shim without #5580"]
    outcomes = {outcome["fix"]: outcome["verdict"] for outcome in report["outcomes"]}
    assert outcomes["moe_layer_offset"] == "not applicable"  # made to stand aside
    for role in ("critic", "actor"):
        assert (report["roles"][role]["stage"], report["roles"][role]["error"]) == ("infer", VP_STAGE), role
    with_carry = {outcome["fix"]: outcome["verdict"] for outcome in reports["shim"]["outcomes"]}
    assert with_carry["moe_layer_offset"] == "applied"
