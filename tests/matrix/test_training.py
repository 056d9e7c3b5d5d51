"""verl's Megatron critic and actor train PPO steps on a simulated NPU that computes, per release.

Runs in each environment of ``nox -s matrix``. One fresh interpreter per activation runs
``train_probe.py`` (compute mode: npu tensors compute on the CPU): the critic's ``initialize()``,
values (``infer_batch``), three ``train_batch`` steps with verl's ``value_loss`` on one batch, each
followed by an lr step; the actor the same with log-probs and verl's ``ppo_loss``. Values and
log-probs are compared with Hugging Face on the plain CPU in float32 with the same weights (the
critic's value head read out of the engine), within ``train_probe.TOLERANCE`` (four bf16 steps).

Where a release cannot train on this environment's Megatron, on any device, the tests say so exactly
(``cannot_train``) instead of skipping.

``NPU_SHIM_TEST_BRIDGE=megatron-bridge`` runs every probe of this file with verl 0.9.x's own default bridge
(``train_probe.py --bridge``) instead of mbridge: the environment beside Megatron 0.18, which has ``megatron.bridge``
installed as verl's Ascend images do (noxfile.py); unset, mbridge.
"""

from __future__ import annotations

import itertools
import json
import os
from importlib.metadata import version
from pathlib import Path
from typing import Any

import probe
import pytest
import train_probe

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
MEGATRON = ".".join(version("megatron-core").split(".")[:2])  # "0.12", "0.16" or "0.18" (noxfile's environments)
MEGATRON_0_12 = MEGATRON == "0.12"
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
BRIDGE = os.environ.get("NPU_SHIM_TEST_BRIDGE", train_probe.MBRIDGE)
BRIDGE_OPTION = ("--bridge", BRIDGE)  # every probe of this file runs with the one bridge


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
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the shim's run saves a checkpoint after two of its steps (for test_a_resumed_run_continues_bit_for_bit)."""
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory, checkpoints: Path) -> dict[str, dict[str, Any]]:
    """Without the shim, with it, and, where the shim carries a fix the run needs, with it minus that fix."""
    directory = tmp_path_factory.mktemp("training")
    saving = ("--save", str(checkpoints), "--save-after", str(SAVED_AFTER)) if RESUMES else ()
    runs = {"none": ("none",), "shim": ("sitecustomize", *saving)}
    if VERL == "0.7.1":
        runs["shim without #5870"] = ("import-before", "--roles", "critic", "--skip-fix", "megatron_critic")
    if LACKS_5580:
        runs["shim without #5580"] = ("import-before", "--skip-fix", "moe_layer_offset")
        runs[ACTOR_BASELINE] = ("import-before", "--roles", "actor", "--skip-fix", "lm_engine_repatch")
    children = {}
    for name, (mode, *options) in runs.items():
        output = directory / f"{name}.json"
        children[name] = (train_probe.start(mode, output, "--steps", str(STEPS), *BRIDGE_OPTION, *options), output)
    results = {}
    finished = probe.finish({name: child for name, (child, _) in children.items()})
    for name, (status, stderr) in finished.items():
        assert status == 0, f"train_probe {name} failed:\n{stderr}"
        results[name] = json.loads(children[name][1].read_text())
    return results


def test_the_gap_to_the_reference_counts_either_side():
    import torch

    mask = torch.tensor([[True, True, False]])
    reference = torch.tensor([[0.5, 0.5, 0.5]])
    for ours in ([[0.5, -0.5, 9.0]], [[0.5, 1.5, -9.0]]):  # a token 1 below, then 1 above; the masked one ignored
        assert train_probe.max_abs_gap(torch.tensor(ours), reference, mask) == 1.0


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


def test_the_engines_run_on_the_simulated_npu(reports):
    for name, report in reports.items():
        assert report["device"] == "npu", name
        assert report["verl_version"].startswith(VERL), name


def test_every_run_took_the_environments_bridge_and_the_test_layer_adapted_nothing(reports):
    """mbridge beside Megatron 0.12 and 0.16, Megatron-Bridge beside 0.18 (``NPU_SHIM_TEST_BRIDGE``, as verl's images
    pair them): verl, Megatron and the bridge run as they ship, nothing of theirs adapted by the probe."""
    for name, report in reports.items():
        assert report["bridge"] == [BRIDGE], name
        assert report["test_adaptations"] == [], name


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


# --- parallel sizes above one, and a run that resumes ---------------------------------------------------------
#
# Two gloo ranks, one process each (train_probe.py --rank R --layouts ...), the same model, batch and steps as the
# one-rank run above, compared with it. Which environment runs what, to stay within make test's budget (one pair
# of ranks runs a release's layouts in turn, 30-60 s on two cores): CP = 2 wherever the shim changes the outcome
# or MindSpeed's line differs (0.6.1 and 0.7.1 with both Megatrons; 0.8.0, fixed upstream, as the control;
# 0.9.1 on Megatron 0.18, TransformerEngineNPU's ring, and on 0.12.0, MindSpeed master's ring: the A5 image),
# TP = 2 and PP = 2 on 0.7.1, 0.8.0 and 0.9.1 on Megatron 0.18
# (the shim does not touch them; they hold the kit and the comparison to account).
PARALLEL_LAYOUTS = {
    ("0.6.1", "0.12"): ("cp2",),
    ("0.7.1", "0.16"): ("tp2", "pp2", "cp2"),
    ("0.7.1", "0.12"): ("cp2",),
    ("0.8.0", "0.16"): ("tp2", "pp2", "cp2"),
    # the images' stack (Megatron 0.18, MindSpeed core_r0.18.0: context parallelism is TransformerEngineNPU's)
    ("0.9.1", "0.18"): ("tp2", "pp2", "cp2"),
    # verl 0.9.1's A5 image: Megatron 0.12.0 with MindSpeed master (its ring attention, no TransformerEngineNPU)
    ("0.9.1", "0.12"): ("cp2",),
}.get((VERL, MEGATRON), ())
RESUMES = (VERL, MEGATRON) in {
    ("0.7.1", "0.16"),
    ("0.7.1", "0.12"),
    ("0.8.0", "0.16"),
    ("0.9.1", "0.18"),
    ("0.9.1", "0.12"),  # the A5 image's pairing (megatron-core 0.12.0, torch 2.10)
}
SAVED_AFTER = 2  # the shim's run saves a checkpoint after two of its three steps, and trains on
RING_NOT_BUILT = "AssertionError: Context parallel ranks for ring intra window not initialized"
# Where a TP or CP split changes the order of partial sums (the row-parallel all-reduce; ring attention's block
# merges), an engine's bf16 activations can each land on a neighbouring bf16 value: as for the reference, four
# bf16 steps at these outputs (< 1) and losses, 2**-6, and four relative bf16 steps (4 * 2**-8) for a gradient
# norm. Measured (0.7.1/0.8.0): TP 0.0068/0.0098 critic values before/after three steps, 0.00097/0.0039 actor
# log-probs; CP 0.0029/0.0078 and 0.00096/0.0019; losses within 0.0009, gradient norms within 0.7 %. PP splits
# no sum: outputs and losses bit for bit, the gradient norm's squares summed per stage first (within 1e-6).
GRAD_NORM_RELATIVE = 4 * 2**-8
# verl 0.6.x's own context-parallel bugs, on any device (verl #4250 fixed them in 0.7.0; not NPU changes, so not
# carried): its Megatron engine divides the loss by the CP size, which Megatron does not undo (the gradient is
# halved at CP = 2; Adam, clipped, hardly notices), and shifts the actor's labels within each rank's packed chunks
# (a log-prob at the end of a chunk scores the wrong token).
CP_BUGS_OF_0_6 = VERL == "0.6.1"


# verl as it ships, whose LM engine repatches after the parallel state (0.6.x/0.7.x). Not beside PyPI 0.7.1 with
# megatron-core 0.12.1, where verl's Megatron forward dies earlier (#5580, above); 0.6.1 shows the 2.3.0 line.
RING_ERROR = AFFECTED and "cp2" in PARALLEL_LAYOUTS and not LACKS_5580


def run_pair(directory: Path, name: str, mode: str, layouts: str) -> list[dict[str, Any]]:
    """Both ranks' reports of one activation, the layouts in turn."""
    ranks = train_probe.start_ranks(mode, directory / name, layouts, "--steps", str(STEPS), *BRIDGE_OPTION)
    finished = probe.finish({str(rank): process for rank, (process, _) in enumerate(ranks)})
    failed = {rank: stderr for rank, (status, stderr) in finished.items() if status != 0}
    assert not failed, "\n".join(f"{name} rank {rank} failed:\n{stderr[-4000:]}" for rank, stderr in failed.items())
    return [json.loads(output.read_text()) for _, output in ranks]


@pytest.fixture(scope="module")
def parallel(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """activation -> each rank's report; one pair of ranks at a time, running every layout in turn."""
    directory = tmp_path_factory.mktemp("parallel")
    runs = {"shim": ("sitecustomize", ",".join(PARALLEL_LAYOUTS))}
    if RING_ERROR:
        runs["none"] = ("none", "cp2")
    results = {}
    for name, (mode, layouts) in runs.items():
        (directory / name).mkdir()
        results[name] = run_pair(directory, name, mode, layouts)
    return results


def last_stage(reports: list[dict[str, Any]], layout: str, role: str) -> dict[str, Any]:
    """The role's result on the last pipeline stage's last rank: where its outputs, losses and metrics are."""
    results = [report["layouts"][layout][role] for report in reports]
    return next(result for result in reversed(results) if result["last_stage"])


def within(ours: list[list[float]], theirs: list[list[float]]) -> float:
    return max(abs(a - b) for row, other in zip(ours, theirs, strict=True) for a, b in zip(row, other, strict=True))


@pytest.mark.parametrize("layout", PARALLEL_LAYOUTS)
@pytest.mark.parametrize("role", train_probe.ROLES)
def test_at_a_parallel_size_of_two_each_role_trains_as_on_one_rank(parallel, reports, layout, role):
    ranks = parallel["shim"]
    one_rank = check(reports["shim"], "shim", role)
    for rank, report in enumerate(ranks):
        assert (report["rank"], report["device"]) == (rank, "npu")
        result = report["layouts"][layout][role]
        assert result["stage"] == "done", (rank, result["error"], result.get("traceback"))
        assert result["weights_changed"], f"rank {rank}'s part of the {role} did not change"
    ours = last_stage(ranks, layout, role)
    # every rank works on the values (log-probs) the last pipeline stage computed
    assert all(report["layouts"][layout][role]["outputs_before"] == ours["outputs_before"] for report in ranks)
    assert ours["output_device"].startswith("npu")
    assert len(ours["losses"]) == STEPS
    grad_norms = next(norms for report in ranks if (norms := report["layouts"][layout][role]["grad_norms"]))
    if layout == "pp2":
        for key in ("outputs_before", "outputs_after", "losses"):
            assert ours[key] == one_rank[key], key
        assert grad_norms == pytest.approx(one_rank["grad_norms"], rel=1e-6)
        return
    assert ours["outputs_after"] != ours["outputs_before"]
    expected_norms = one_rank["grad_norms"]
    if layout == "cp2" and CP_BUGS_OF_0_6:
        if role == "actor":
            assert within(ours["outputs_before"], one_rank["outputs_before"]) > train_probe.TOLERANCE, "#4250 mended?"
            return
        expected_norms = [norm / 2 for norm in expected_norms]  # the halved gradient
    for key in ("outputs_before", "outputs_after"):
        assert within(ours[key], one_rank[key]) <= train_probe.TOLERANCE, key
    assert ours["losses"] == pytest.approx(one_rank["losses"], abs=train_probe.TOLERANCE)
    assert grad_norms == pytest.approx(expected_norms, rel=GRAD_NORM_RELATIVE)


MEGATRONS_TE_ATTENTION = (
    "megatron.core.extensions.transformer_engine.TEDotProductAttention / "
    "megatron.core.extensions.transformer_engine.TEDotProductAttention.forward "
    "over transformer_engine.pytorch.attention.DotProductAttention"
)


@pytest.mark.skipif(MEGATRON != "0.18", reason="the three-layer line (MindSpeed core_r0.18.0) pairs with Megatron 0.18")
def test_on_core_r0_18_every_layout_runs_megatrons_te_attention_over_transformer_engine_npu(parallel, reports):
    """No MindSpeed class stands between: Megatron's own TE classes wrap TransformerEngineNPU's (the kit's stand-in),
    whose ring does context parallelism at CP 2."""
    for role in train_probe.ROLES:
        assert reports["shim"]["layouts"]["one rank"][role]["core_attention"] == MEGATRONS_TE_ATTENTION, role
        for report in parallel["shim"]:
            for layout in PARALLEL_LAYOUTS:
                assert report["layouts"][layout][role]["core_attention"] == MEGATRONS_TE_ATTENTION, (layout, role)


@pytest.mark.skipif(not RING_ERROR, reason="where verl as it ships repatches after the mesh and runs a forward")
def test_at_cp2_without_the_shim_the_actor_dies_at_its_first_forward(parallel):
    """verl 0.6.x/0.7.x's LM engine repatches at the end of __init__: MindSpeed's ring is never built, and its
    context-parallel attention stops at the first forward. The shim's placement (lm_engine_repatch) mends it:
    with the shim both roles train (the test above)."""
    for rank, report in enumerate(parallel["none"]):
        actor, critic = (report["layouts"]["cp2"][role] for role in ("actor", "critic"))
        assert (actor["stage"], actor["error"]) == ("infer", RING_NOT_BUILT), rank
        assert (critic["stage"], critic["error"]) == ("build", UNKNOWN_DEVICE), rank


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory, reports: dict[str, Any], checkpoints: Path) -> dict[str, Any]:
    """In a fresh process, build, load_checkpoint the shim's run saved after two steps, and train one more."""
    output = tmp_path_factory.mktemp("resume") / "resumed.json"
    child = train_probe.start("sitecustomize", output, "--steps", "1", "--resume", str(checkpoints), *BRIDGE_OPTION)
    ((status, stderr),) = probe.finish({"resumed": child}).values()
    assert status == 0, f"train_probe resumed failed:\n{stderr}"
    return json.loads(output.read_text())


@pytest.mark.skipif(not RESUMES, reason="resume runs on 0.7.1 (both Megatrons), 0.8.0, 0.9.1 (Megatron 0.12, 0.18)")
@pytest.mark.parametrize("role", train_probe.ROLES)
def test_a_resumed_run_continues_bit_for_bit(resumed, reports, role):
    """With the distributed optimizer (verl's default), which resumes only with MindSpeed's FusedAdam adaptation:
    without it Megatron takes its branch for torch's Adam, whose state_dict asserts an optimizer that never
    stepped (``distrib_optimizer.py``, ``assert len(steps) == 1``), at load_checkpoint."""
    uninterrupted = check(reports["shim"], "shim", role)  # saved a checkpoint after two steps, and trained on
    assert uninterrupted["saved_after"] == SAVED_AFTER
    resumed_run = resumed["roles"][role]
    assert resumed_run["stage"] == "done", (resumed_run["error"], resumed_run.get("traceback"))
    assert resumed_run["losses"] == uninterrupted["losses"][SAVED_AFTER:]
    assert resumed_run["grad_norms"] == uninterrupted["grad_norms"][SAVED_AFTER:]
    assert resumed_run["weights_sha256"] == uninterrupted["weights_sha256"]
    assert resumed_run["outputs_after"] == uninterrupted["outputs_after"]
    # use_checkpoint_opt_param_scheduler: the lr goes on from the saved step's (a fresh one would restart at 1e-4)
    assert resumed_run["lr"][1] == uninterrupted["lr"][1]
    assert resumed_run["lr"][0] < uninterrupted["lr"][0]
