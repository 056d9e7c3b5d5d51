"""Where users meet the error: verl's own critic worker, in a Ray actor spawned by verl's own RayWorkerGroup.

Each scenario is one fresh driver (driver.py) on a local Ray cluster that offers a
simulated ``NPU`` resource; it builds the critic (``value_model``) and the actor role
(``language_model``) as ``RayPPOTrainer.init_workers`` does, one worker group each, and
reports what every actor built. The MindSpeed stand-in logs each ``repatch`` call with its
process id, so "repatched once in that actor, before the parallel state" is read per actor.

Activations: ``none``; ``sitecustomize`` (the checkout on PYTHONPATH, so every interpreter
starts with the shim); ``import`` (``import npu_shim`` in the driver only: actors get it from
the PYTHONPATH it exports). Each scenario costs 25-70 s here, so context parallelism 2 (two
workers per role) runs in one only, and 0.8.0 (fixed upstream) runs with the shim only.

On 0.7.1 and 0.8.0 one more scenario (about 40 s) computes: the critic alone, with the shim, on the
simulated NPU in compute mode and a tiny Qwen2 with weights (tests/matrix/train_probe.py's), called
through the worker-group methods ``RayPPOTrainer`` calls for the critic (driver.play_trainer_for_critic);
its values are compared with a float32 Hugging Face reference, and two updates with each other.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, clean_env, port_race, run_in_session, run_python_file

from simulated_npu import ray_npu_resources, read_repatch_log, simulated_npu_env, tiny_model_dir

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
AFFECTED = VERL in ("0.6.1", "0.7.1")
# activation -> workers per role (= context-parallel size)
SCENARIOS: dict[str, dict[str, int]] = {
    "0.6.1": {"none": 1, "sitecustomize": 1},  # the driver's own import of the shim: on 0.7.1
    "0.7.1": {"none": 1, "sitecustomize": 2, "import": 1},
    "0.8.0": {"sitecustomize": 1},  # native engines; tests/matrix compares 0.8.0 with and without the shim
}
MODES = list(SCENARIOS.get(VERL, {}))
# The critic (with use_flash_attn_npu_batch_invariant) and the actor role (without) colocated in one process,
# as the trainer runs them; on 0.8.0, where main_ppo builds the critic as a TrainingWorker.
COLOCATED_MODES = {"0.8.0": ["none", "sitecustomize"]}.get(VERL, [])
BATCH_INVARIANT = {"use_flash_attn_npu_batch_invariant": True}
UNKNOWN_DEVICE = "AssertionError: Unknown device: npu for model_type: value_model and backend: megatron"
MINDSPEED = "verl.workers.engine.mindspeed.transformer_impl."
NO_RING = {"intra_window": None, "inter_window_kv": None, "inter_window_dkv": None}
DRIVER_TIMEOUT = 600  # seconds; a scenario takes 40-60 s on this machine kind

pytestmark = pytest.mark.skipif(not MODES, reason=f"the e2e layer runs on verl {', '.join(SCENARIOS)}")


ROLES = ["value_model", "language_model"]  # in the order verl's fused worker builds colocated roles


@dataclass
class Scenario:
    workers: int
    colocated: bool
    report: dict[str, Any]
    repatch_calls: list[dict[str, Any]]

    def role(self, model_type: str) -> dict[str, Any]:
        return self.report["roles"][model_type]

    def calls_in(self, pid: int) -> list[dict[str, Any]]:
        return [call for call in self.repatch_calls if call["pid"] == pid]

    def calls_of(self, model_type: str, pid: int) -> list[dict[str, Any]]:
        """The repatch calls of this role's engine in that process (colocated: one per role, in verl's order)."""
        calls = self.calls_in(pid)
        return calls[ROLES.index(model_type) :][:1] if self.colocated else calls


def drive(
    mode: str, workers: int, directory: Path, colocate: bool = False, key_on_critic: bool = False, train: bool = False
) -> Scenario:
    """Run driver.py under one activation in a fresh interpreter with a clean environment.

    ``train``: the critic alone, on the simulated NPU in compute mode; the driver writes a tiny model with
    weights and plays the trainer's part for the critic (driver.play_trainer_for_critic).
    """
    log = directory / f"{mode}-repatch.jsonl"
    ray_temp_dir = tempfile.mkdtemp(prefix="r", dir="/tmp")  # Ray's socket paths must stay under ~107 characters
    roles = ROLES[:1] if train else ROLES
    # Roles in processes of their own share each worker's bundle (two processes); colocated, one process.
    processes_per_worker = 1 if colocate else len(roles)
    plan = {
        "mode": mode,
        "root": str(ROOT),
        "roles": roles,
        "workers": workers,
        "context_parallel_size": workers,
        "models": {
            # with train the driver writes the critic's directory itself (weights need torch, which this process
            # does not import)
            "value_model": str(directory / "critic")
            if train
            else tiny_model_dir(directory / "critic", "Qwen2ForTokenClassification"),
            "language_model": tiny_model_dir(directory / "actor", "Qwen2ForCausalLM"),
        },
        "ray_init": ray_npu_resources(workers, processes_per_worker),  # as many CPUs as processes: <= 2 cores
        "max_colocate_count": processes_per_worker,
        "ray_temp_dir": ray_temp_dir,
        "timeout": DRIVER_TIMEOUT - 60,
        "colocate": colocate,
        "overrides": {"value_model": BATCH_INVARIANT} if key_on_critic else {},
        "train": train,
    }
    plan_file = directory / f"{mode}-plan.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    base = clean_env([ROOT] if mode == "sitecustomize" else [], RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    try:  # a session of its own, so that a driver that overruns is ended with the Ray processes it started
        driver = run_in_session(
            [sys.executable, str(Path(__file__).with_name("driver.py")), str(plan_file)],
            env=simulated_npu_env(base, repatch_log=log, compute=train),
            cwd=directory,
            timeout=DRIVER_TIMEOUT,
        )
    finally:
        shutil.rmtree(ray_temp_dir, ignore_errors=True)
    assert driver.returncode == 0, f"{mode} driver failed:\n{driver.stderr[-6000:]}"
    report = json.loads(driver.stdout.strip().splitlines()[-1])
    return Scenario(workers, colocate, report, read_repatch_log(log))


def raced(run: Scenario) -> bool:
    """verl picks its master port by binding port 0 and closing the socket (helpers.port_race)."""
    return any(port_race(role.get("error", "")) for role in run.report["roles"].values())


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory):
    """mode -> its Scenario, each driver run once per module however many tests read it (a failure too)."""
    cache: dict[tuple[str, bool], Scenario | AssertionError] = {}

    def get(mode: str, key_on_critic: bool = False) -> Scenario:
        key = (mode, key_on_critic)
        if key not in cache:
            workers = 1 if key_on_critic else SCENARIOS[VERL][mode]
            # two workers: the roles colocated, as the trainer runs them, so Ray is asked for no more CPUs than
            # this machine kind has (2); the batch-invariant scenario is about colocation itself
            colocate = key_on_critic or workers > 1
            try:
                run = drive(mode, workers, tmp_path_factory.mktemp(mode), colocate, key_on_critic)
                if raced(run):  # once more, in a new cluster: not an outcome of the shim or of verl's engines
                    run = drive(mode, workers, tmp_path_factory.mktemp(mode), colocate, key_on_critic)
                cache[key] = run
            except AssertionError as failure:
                cache[key] = failure
        result = cache[key]
        if isinstance(result, AssertionError):
            raise result
        return result

    return get


def ring(rank: int) -> dict[str, list[int]]:
    return {"intra_window": [rank], "inter_window_kv": [0, 1], "inter_window_dkv": [0, 1]}


def assert_built_and_repatched_once(run: Scenario, model_type: str, engine: str, *, after_mesh: bool) -> None:
    """Every rank of the role built ``engine``; MindSpeed was asked once in that actor, before (or after) the mesh."""
    reports = run.role(model_type).get("reports")
    assert reports, f"{model_type} was not built: {run.role(model_type).get('error', '')[-3000:]}"
    assert [report["rank"] for report in reports] == list(range(run.workers))
    expected_config = {"use_flash_attn": True, **({"context_parallel_size": run.workers} if run.workers > 1 else {})}
    # colocated, the first role's engine initialises Megatron's parallel state for the process
    state_before = after_mesh or (run.colocated and model_type != ROLES[0])
    for report in reports:
        assert report["engine"] == engine
        assert report["pid"] != run.report["driver_pid"]  # built in a Ray actor, not in the driver
        calls = run.calls_of(model_type, report["pid"])
        assert [call["parallel_state_initialized"] for call in calls] == [state_before], run.calls_in(report["pid"])
        assert calls[0]["config"] == expected_config
        # MindSpeed builds the CP ring only when its repatch came before Megatron's parallel state
        assert report["ring_state"] == (ring(report["rank"]) if run.workers > 1 and not after_mesh else NO_RING)


@pytest.mark.parametrize("mode", MODES)
def test_the_workers_run_in_ray_actors_on_the_simulated_npu(scenario, mode):
    run = scenario(mode)
    assert run.report["driver_device"] == "npu"
    assert run.report["driver_shim"] == {"none": None, "sitecustomize": "sitecustomize", "import": "import"}[mode]
    for role in run.report["roles"].values():
        for report in role.get("reports", []):
            assert report["device"] == "npu"
            assert report["backend"] == "cpu:gloo,npu:hccl"  # verl's own init_process_group, on the kit's hccl
            # in an actor the shim starts from the bootstrap sitecustomize, whichever way the driver got it
            assert report["shim_activated_via"] == (None if mode == "none" else "sitecustomize")


@pytest.mark.parametrize("mode", MODES)
def test_critic(scenario, mode):
    run = scenario(mode)
    if AFFECTED and mode == "none":
        role = run.role("value_model")
        assert "reports" not in role, "the critic was built without the shim: the test no longer reaches the error"
        error = role["error"]
        assert error.rstrip().splitlines()[-1] == UNKNOWN_DEVICE
        actor_pid = int(re.search(r"\bpid=(\d+)", error).group(1))
        assert actor_pid != run.report["driver_pid"]
        assert not run.calls_in(actor_pid)  # it died before any engine existed
        if VERL == "0.6.1":  # the role worker builds its engine in a method; the call raised
            assert role["error_type"] == "RayTaskError(AssertionError)"
            assert re.search(r'verl/workers/roles/critic\.py", line \d+, in _build_engine', error)
        else:  # TrainingWorker builds it in __init__: the actor died in its creation task
            assert role["error_type"] == "ActorDiedError"
            assert re.search(r'verl/workers/engine_workers\.py", line \d+, in __init__', error)
        return
    assert_built_and_repatched_once(run, "value_model", MINDSPEED + "MindspeedEngineWithValueHead", after_mesh=False)
    assert all(report["engine_added_by_npu_shim"] is AFFECTED for report in run.role("value_model")["reports"])


@pytest.mark.parametrize("mode", MODES)
def test_actor_role(scenario, mode):
    run = scenario(mode)
    # verl 0.6/0.7 repatch at the end of the LM engine's __init__, after the parallel state exists
    after = AFFECTED and mode == "none"
    assert_built_and_repatched_once(run, "language_model", MINDSPEED + "MindspeedEngineWithLMHead", after_mesh=after)
    assert not any(report["engine_added_by_npu_shim"] for report in run.role("language_model")["reports"])


def test_the_stock_trainer_maps_a_megatron_critic(tmp_path):
    """Who meets the error: 0.8.0's trainer (and main before #6135) sends a Megatron critic to TrainingWorker;
    0.6/0.7's sends it to the legacy worker, which never asks the engine registry."""
    run = run_python_file(
        Path(__file__).with_name("stock_critic_child.py"), simulated_npu_env(clean_env()), cwd=tmp_path
    )
    role, worker = run.report
    assert role == "critic"
    legacy = "verl.workers.megatron_workers.CriticWorker"
    assert worker == (legacy if AFFECTED else "verl.workers.engine_workers.TrainingWorker")


@pytest.mark.parametrize("mode", COLOCATED_MODES)
def test_colocated_critic_then_actor(scenario, mode):
    """One process, verl's fused worker: the critic asks for batch-invariant attention, the actor role does not.

    MindSpeed keeps the key for the actor's engine: without the shim verl 0.8.0 already dies at the
    critic (#6674 is missing); with it both build, and the actor's repatch keeps fusion attention off."""
    run = scenario(mode, key_on_critic=True)
    if mode == "none":
        for role in run.report["roles"].values():
            assert "reports" not in role
            assert role["error"].rstrip().splitlines()[-1] == "RuntimeError: the patch of forward exist !"
        return
    critic, actor = (run.role(model_type)["reports"] for model_type in ("value_model", "language_model"))
    assert critic[0]["pid"] == actor[0]["pid"], "the roles share one process"
    calls = run.calls_in(critic[0]["pid"])
    assert [(call["config"], call["parallel_state_initialized"]) for call in calls] == [
        ({**BATCH_INVARIANT, "use_flash_attn": False}, False),  # the critic builds Megatron's parallel state
        ({"use_flash_attn": False}, True),  # the actor's engine finds it, and MindSpeed's key still on
    ]
    batch_invariant = "mindspeed.features_manager.dot_product_attention_forward_batch_invariant"
    assert critic[0]["attention_forward"] == actor[0]["attention_forward"] == batch_invariant


# The trainer's calls on the critic, computed: on the releases where the critic engine runs a value forward
# with mbridge (0.6.1 converts Qwen2 with its legacy converter, which has no Qwen2 value model).
CRITIC_STEPS_VERL = ("0.7.1", "0.8.0")


def drive_training(directory_factory: pytest.TempPathFactory, workers: int) -> Scenario:
    """One driver, the shim on, the critic alone in compute mode on ``workers`` workers (context parallel over
    them): the trainer's calls, played once."""
    run = drive("sitecustomize", workers, directory_factory.mktemp("train"), train=True)
    if raced(run):  # once more, in a new cluster: not an outcome of the shim or of verl's engines
        run = drive("sitecustomize", workers, directory_factory.mktemp("train"), train=True)
    return run


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return drive_training(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def trained_on_two_workers(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return drive_training(tmp_path_factory, 2)


def finite(numbers: list[float]) -> bool:
    return all(math.isfinite(number) for number in numbers)


# Not skipped without mbridge or einops (verl's Megatron path needs them, verl does not require them): the
# environments pin both (noxfile.py), and a missing one should fail here rather than hide the test.
@pytest.mark.skipif(VERL not in CRITIC_STEPS_VERL, reason=f"runs on verl {', '.join(CRITIC_STEPS_VERL)}")
def test_the_trainer_computes_values_and_updates_the_critic(trained):
    assert_the_trainers_calls_trained_the_critic(trained)


@pytest.mark.skipif(VERL != "0.7.1", reason="two workers (about 1.5 min) on the release the shim changes most")
def test_on_two_workers_with_context_parallelism_the_critic_trains_as_on_one(trained_on_two_workers, trained):
    """verl's worker group over two Ray workers, context parallel size 2 (MindSpeed's ring attention across the two
    actors, the ring built because the shim repatches before the mesh): the trainer's calls, as on one worker."""
    steps = assert_the_trainers_calls_trained_the_critic(trained_on_two_workers)
    reports = trained_on_two_workers.role("value_model")["reports"]
    assert [report["ring_state"] for report in reports] == [ring(0), ring(1)]
    assert len({report["pid"] for report in reports}) == 2, "two actors"
    one = trained.report["critic_steps"]
    for key in ("values", "values_after_update"):
        pairs = zip(steps[key], one[key], strict=True)
        difference = max(abs(a - b) for row, other in pairs for a, b in zip(row, other, strict=True))
        assert difference <= steps["tolerance"], f"{key}: {difference} from one worker's"
    for ours, theirs in zip(steps["updates"], one["updates"], strict=True):
        assert ours["loss"] == pytest.approx(theirs["loss"], abs=steps["tolerance"])


def assert_the_trainers_calls_trained_the_critic(trained: Scenario) -> dict[str, Any]:
    """verl's TrainingWorker in a Ray actor, through the worker-group methods RayPPOTrainer calls for the critic.

    init_workers: ``reset()``, ``set_loss_fn(partial(value_loss, ...))``; each step: ``infer_batch`` for the
    values (``_compute_values``), ``train_mini_batch`` for the update (``_update_critic``). On 0.7.1 this needs
    the shim twice: the engine (the AssertionError, test_critic) and #5870's value forward (``enable_mtp``).
    """
    critic = trained.role("value_model")
    assert "reports" in critic, f"the critic was not built: {critic.get('error', '')[-3000:]}"
    assert [report["rank"] for report in critic["reports"]] == list(range(trained.workers))
    for report in critic["reports"]:
        assert report["engine"] == MINDSPEED + "MindspeedEngineWithValueHead"
        assert report["engine_added_by_npu_shim"] is AFFECTED
        assert report["pid"] != trained.report["driver_pid"]
    steps = trained.report["critic_steps"]
    assert "error" not in steps, f"the trainer's calls failed in the actor:\n{steps.get('error', '')[-6000:]}"

    mask = steps["response_mask"]
    valid = [(row, column) for row, columns in enumerate(mask) for column, kept in enumerate(columns) if kept]
    # per response token, padded as the trainer pads them (no_padding_2_padding): [batch, response length]
    assert steps["values_shape"] == [len(mask), len(mask[0])]
    values, reference, after = (steps[key] for key in ("values", "reference", "values_after_update"))
    assert finite([values[row][column] for row, column in valid])
    # bf16 on the simulated NPU against float32 Hugging Face Qwen2 with the engine's value head
    difference = max(abs(values[row][column] - reference[row][column]) for row, column in valid)
    assert difference <= steps["tolerance"], f"values differ from the reference by {difference}"

    first, second = steps["updates"]
    assert [len(update["loss"]) for update in (first, second)] == [1, 1]  # one mini-batch, one optimizer step each
    losses = [update["loss"][0] for update in (first, second)]
    assert finite(losses) and all(finite(update["grad_norm"]) for update in (first, second))
    # the update reached the critic: it computes other values, and the same batch's loss came down
    assert max(abs(after[row][column] - values[row][column]) for row, column in valid) > 0
    assert losses[1] < losses[0], f"the second update's loss did not come down: {losses}"
    return steps
