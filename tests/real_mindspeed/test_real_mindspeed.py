"""Real MindSpeed's source on the simulated NPU, against the kit's MindSpeed stand-in: the same numbers.

Runs in ``nox -s real_mindspeed`` (one session per MindSpeed line and the verl environment users pair it with:
``NPU_SHIM_SIM_MINDSPEED`` names the line, ``NPU_SHIM_TEST_VERL`` the release, ``NPU_SHIM_TEST_MINDSPEED_EXTRAS`` the
folder of third-party packages real MindSpeed imports and the environment lacks). The source is an unmodified
archive (or checkout) at the commit ``tests/mindspeed_source.py`` pins, extracted into ``.cache/mindspeed``; without
it every test here fails with the one line that says how to give it (the session does not start them: noxfile.py).

The training probe (``tests/matrix/train_probe.py``) runs twice under the shim, as in ``tests/matrix/
test_training.py``: with the kit's stand-in, and with real MindSpeed's source ahead of the kit's simulated packages
on PYTHONPATH (torch_npu and torchair stay the kit's). Compared: the shim's verdicts, every output, loss and the
final weights' digest (bit for bit), the gradient norms (``GRAD_NORM_RELATIVE``), on one rank and at CP = 2 on two
ranks (real ring attention into the kit's fusion-attention kernel); a resume from real MindSpeed's checkpoint; what
users meet without the shim; and the one adaptation this layer makes to a real line (``train_probe.
adapt_mindspeed_to_torch``), shown to be needed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import mindspeed_source
import probe
import pytest
import train_probe

LINE = os.environ.get("NPU_SHIM_SIM_MINDSPEED", "")
VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
EXTRAS = os.environ.get("NPU_SHIM_TEST_MINDSPEED_EXTRAS", "")
# the bridge verl builds the model through, as the environment's verl and Megatron pair it (noxfile.py)
ENVIRONMENTS_BRIDGE = os.environ.get("NPU_SHIM_TEST_BRIDGE", train_probe.MBRIDGE)
MEGATRON = ".".join(version("megatron-core").split(".")[:2])
STEPS, SAVED_AFTER = 3, 2
UNKNOWN_DEVICE = "AssertionError: Unknown device: npu for model_type: value_model and backend: megatron"
RING_NOT_BUILT = "AssertionError: Context parallel ranks for ring intra window not initialized"
# torch 2.13's broadcast asks MindSpeed's no-argument get_device_capability for the tensor's device
NO_DEVICE_ARGUMENT = "TypeError: get_device_capability() takes 0 positional arguments but 1 was given"
# Real MindSpeed gives Megatron its own amp_C.multi_tensor_l2norm for the gradient norm (not modelled: the stand-in
# leaves Megatron its torch fallback): the same float32 sum of squares in another order, so the norm can land a
# float32 rounding step or two away. Four float32 steps (4 * 2**-23, relative). Measured: the actor's first norm
# 1.06e-7 relative (4.5e-7 absolute) on core_r0.16.0 and f2b0977e; equal on 2.3.0_core_r0.12.1. The clip
# coefficient (clip_grad 1.0, norms 4 to 13) rounds the same: weights, losses and outputs stay bit for bit, and are
# compared so.
GRAD_NORM_RELATIVE = 4 * 2**-23
# What real MindSpeed master meets without Megatron-LM's source (PyPI's megatron-core 0.12.0 alone), both roles:
# its megatron_adaptor does not import, verl's guarded import leaves MindSpeed out, and Megatron 0.12 builds its
# attention from Transformer Engine's class, which the A5 image has only through MindSpeed (measured 2026-12-07)
WITHOUT_MEGATRON_LM = (
    "initialize",
    "TypeError: TEDotProductAttention.__init__() got an unexpected keyword argument 'num_attention_heads' when "
    "instantiating TEDotProductAttention when instantiating SelfAttention when instantiating TransformerLayer",
)


@dataclass(frozen=True)
class Plan:
    """What one pairing runs besides one rank, real and stand-in (each run about 45 s of CPU: docs/costs.md)."""

    cp2: bool = False  # both roles at CP = 2 on two ranks, real and stand-in
    resume: bool = False  # a fresh process resumes real MindSpeed's checkpoint
    without_shim: bool = False  # verl as it ships: the critic's AssertionError, the actor's ring error at CP = 2
    bridge: str | None = None  # the bridge of every run (None: the environment's)
    # where real MindSpeed does not take the environment's bridge: what the critic meets with it, on one rank
    bridge_error: tuple[str, str] | None = None


# The pairings of docs/mindspeed-lines.md, with what each runs to keep the layer to a few minutes: everything on the
# pairing where the shim changes most (0.7.1 on core_r0.16.0, real ring attention at CP = 2 included), one rank on
# the others (the 0.12.1 lines' own difference, the layer-norm linear's QKV bias, shows there; docs/costs.md).
PLANS = {
    ("core_r0.16.0", "0.7.1"): Plan(cp2=True, resume=True, without_shim=True),
    ("core_r0.16.0", "0.8.0"): Plan(),
    ("2.3.0_core_r0.12.1", "0.7.1"): Plan(),
    ("f2b0977e", "0.7.1"): Plan(),
    ("core_r0.16.0", "0.9.1"): Plan(),  # Python 3.12, torch 2.10: the 9.1.0 image's pairing before verl #7604
    # the images' stack since #7604 (Python 3.12, torch 2.10, Megatron 0.18) over the kit's MA and TENPU stand-ins:
    # at CP = 2 Megatron's TE attention over TENPU's ring (MindSpeed 0.18 swaps no class), real and stand-in alike
    # Real core_r0.18.0 (4213c91313fe) does not take Megatron-Bridge's model providers, the images' bridge there:
    # its TransformerConfig.__post_init__ checks MindSpeed's arguments on the config, which its TransformerConfig
    # .__init__ adds, and Megatron-Bridge's GPTModelProvider (a dataclass subclass, its own __init__) never runs that
    # __init__ (docs/testing.md). Compared on mbridge, the one bridge real MindSpeed builds with here; the
    # Megatron-Bridge run shows where it stops.
    # verl 0.9.1's A5 image: master 0c6c0ce on Megatron 0.12.0, with Megatron-LM core_v0.12.0's source after it
    ("master", "0.9.1"): Plan(),
    ("core_r0.18.0", "0.9.1"): Plan(
        cp2=True,
        bridge=train_probe.MBRIDGE,
        bridge_error=(
            "initialize",
            "AttributeError: 'GPTModelProvider' object has no attribute 'moe_zero_memory_num_layers'",
        ),
    ),
}
PLAN = PLANS.get((LINE, VERL))
BRIDGE = ("--bridge", (PLAN and PLAN.bridge) or ENVIRONMENTS_BRIDGE)
# Lines whose grouped-matmul patch takes no device, which torch 2.13 passes (train_probe.adapt_mindspeed_to_torch)
NO_DEVICE_ARGUMENT_LINES = ("2.3.0_core_r0.12.1", "f2b0977e")
ADAPTED = LINE in NO_DEVICE_ARGUMENT_LINES


@pytest.fixture(scope="module")
def source() -> Path:
    """Real MindSpeed's source for LINE, extracted from its pinned archive; a failure (never a skip) without it."""
    if PLAN is None:
        pytest.fail(f"no plan for MindSpeed {LINE!r} with verl {VERL!r}: run the layer through `nox -s real_mindspeed`")
    if not EXTRAS:
        pytest.fail("NPU_SHIM_TEST_MINDSPEED_EXTRAS is unset: run this layer through `nox -s real_mindspeed`")
    try:
        return mindspeed_source.prepare(LINE)
    except mindspeed_source.SourceMissing as missing:
        pytest.fail(str(missing))


def start_pair(directory: Path, mode: str, *options: str, ahead: tuple[str, ...]) -> list[tuple[Any, Path]]:
    directory.mkdir(parents=True, exist_ok=True)
    return train_probe.start_ranks(mode, directory, "cp2", "--steps", str(STEPS), *BRIDGE, *options, ahead=ahead)


@pytest.fixture(scope="module")
def megatron_lm(source: Path) -> Path | None:
    """Megatron-LM's source for a line that patches its megatron.training (master), extracted; else None."""
    try:
        return mindspeed_source.prepare_megatron_lm(LINE)
    except mindspeed_source.SourceMissing as missing:
        pytest.fail(str(missing))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, source: Path, megatron_lm: Path | None) -> dict[str, Any]:
    """name -> report (a pair of ranks: both reports). Two waves of concurrent processes: one rank, then the rest."""
    directory = tmp_path_factory.mktemp("real_mindspeed")
    # Megatron-LM's source after MindSpeed's, as the image has it from its `pip install -e` of Megatron-LM
    real = (str(source), *([str(megatron_lm)] if megatron_lm else []), EXTRAS)
    checkpoints = directory / "checkpoints"
    steps = ("--steps", str(STEPS), *BRIDGE)
    one_rank = {
        "real": (real, "sitecustomize", *steps, "--save", str(checkpoints), "--save-after", str(SAVED_AFTER)),
        "stand-in": ((), "sitecustomize", *steps),
    }
    if PLAN.without_shim:
        one_rank["real, no shim"] = (real, "none", *steps, "--roles", "critic")
    if PLAN.bridge_error:
        theirs = ("--steps", "1", "--roles", "critic", "--bridge", ENVIRONMENTS_BRIDGE)
        one_rank[f"real, {ENVIRONMENTS_BRIDGE}"] = (real, "sitecustomize", *theirs)
    if megatron_lm:  # what the line needs of the image that PyPI lacks, shown by leaving it out
        one_rank["real, without Megatron-LM"] = ((str(source), EXTRAS), "sitecustomize", "--steps", "1", *BRIDGE)
    if ADAPTED:
        one_rank["real, unadapted"] = (real, "sitecustomize", *steps, "--roles", "critic", "--unadapted")
    children = {}
    for name, (ahead, mode, *options) in one_rank.items():
        output = directory / f"{name}.json"
        children[name] = (train_probe.start(mode, output, *options, ahead=ahead), [output])
    results = collect(children)

    second: dict[str, Any] = {}
    if PLAN.resume:
        output = directory / "resumed.json"
        resume = ("--steps", "1", "--resume", str(checkpoints), *BRIDGE)
        second["real, resumed"] = (train_probe.start("sitecustomize", output, *resume, ahead=real), [output])
    pairs = {}
    if PLAN.cp2:
        pairs = {"real cp2": ("sitecustomize", (), real), "stand-in cp2": ("sitecustomize", (), ())}
        if PLAN.without_shim:
            pairs["real cp2, no shim"] = ("none", ("--roles", "actor"), real)
    for name, (mode, options, ahead) in pairs.items():
        ranks = start_pair(directory / name, mode, *options, ahead=ahead)
        second[name] = ([process for process, _ in ranks], [output for _, output in ranks])
    return results | collect(second)


def collect(children: dict[str, Any]) -> dict[str, Any]:
    """Wait for every process; name -> report (a list for a pair)."""
    flat = {}
    for name, (processes, _) in children.items():
        for index, process in enumerate(processes if isinstance(processes, list) else [processes]):
            flat[(name, index)] = process
    finished = probe.finish(flat)
    results: dict[str, Any] = {}
    for name, (processes, outputs) in children.items():
        statuses = [finished[(name, index)] for index in range(len(outputs))]
        failed = [stderr for status, stderr in statuses if status != 0]
        assert not failed, f"train_probe {name} failed:\n" + "\n".join(stderr[-4000:] for stderr in failed)
        reports = [json.loads(output.read_text()) for output in outputs]
        results[name] = reports if isinstance(processes, list) else reports[0]
    return results


def reports_of(runs: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, report) for name, value in runs.items() for report in (value if isinstance(value, list) else [value])
    ]


def done(result: dict[str, Any], name: str) -> dict[str, Any]:
    assert result["stage"] == "done", (name, result["error"], result.get("traceback"))
    return result


def test_real_mindspeed_ran_where_asked_and_the_stand_in_elsewhere(runs, source):
    """The comparison compares two different MindSpeeds: the real source tree, and the kit's stand-in."""
    from simulated_npu import SIMULATED_DIR

    for name, report in reports_of(runs):
        assert report["torch_npu_simulated"] and report["device"] == "npu", name
        assert report["verl_version"].startswith(VERL), name
        if name.startswith("real"):
            assert Path(report["mindspeed_file"]).is_relative_to(source), (name, report["mindspeed_file"])
            assert report["mindspeed_line"] is None, name  # no stand-in's line profile
        else:
            assert Path(report["mindspeed_file"]).is_relative_to(SIMULATED_DIR), (name, report["mindspeed_file"])
            assert report["mindspeed_line"] == LINE, name


def test_the_shims_verdicts_are_the_same_on_real_mindspeed(runs):
    verdicts = {name: [(o["fix"], o["verdict"]) for o in runs[name]["outcomes"]] for name in ("real", "stand-in")}
    assert verdicts["real"] == verdicts["stand-in"]
    applied = {fix for fix, verdict in verdicts["real"] if verdict == "applied"}
    expected = {
        "0.7.1": {"value_engine", "lm_engine_repatch", "megatron_critic"},
        "0.8.0": {"mindspeed_line_repatch"},
        "0.9.1": {"mindspeed_line_repatch"},
    }
    assert expected[VERL] <= applied, verdicts["real"]
    if (VERL, MEGATRON) == ("0.7.1", "0.12"):
        assert "moe_layer_offset" in applied  # PyPI 0.7.1 on megatron-core 0.12.1 lacks #5580 (0.9.1 on 0.12.0 has it)
    if (VERL, MEGATRON) == ("0.9.1", "0.12"):  # the A5 image (master): verl 0.9.x's save on Megatron 0.12
        assert {"megatron_checkpoint_save", "megatron_checkpoint_metadata"} <= applied, verdicts["real"]


def test_the_layer_adapts_real_mindspeed_to_torch_exactly_where_the_line_needs_it(runs):
    """On the *_core_r0.12.1 lines only, and needed there: without it the critic stops at ``initialize()``."""
    adaptation = [train_probe.MINDSPEED_TORCH_ADAPTATION] if ADAPTED else []
    left_out = [f"{train_probe.MINDSPEED_TORCH_ADAPTATION} (due, left out: --unadapted)"]
    for name, report in reports_of(runs):
        ours = [] if not name.startswith("real") else left_out if "unadapted" in name else adaptation
        mbridge = [train_probe.MBRIDGE_ADAPTATION] if MEGATRON == "0.18" and report["bridge"] == ["mbridge"] else []
        assert report["test_adaptations"] == [*mbridge, *ours], name
    if ADAPTED:
        critic = runs["real, unadapted"]["roles"]["critic"]
        assert (critic["stage"], critic["error"]) == ("initialize", NO_DEVICE_ARGUMENT)


@pytest.mark.parametrize("role", train_probe.ROLES)
def test_on_one_rank_real_mindspeed_trains_as_the_stand_in_bit_for_bit(runs, role):
    real, stand_in = (done(runs[name]["roles"][role], name) for name in ("real", "stand-in"))
    assert real["max_abs_diff"] <= train_probe.TOLERANCE, real["tolerance_note"]  # and so near Hugging Face
    for key in ("outputs_before", "outputs_after", "losses", "lr", "weights_sha256", "max_abs_diff", "output_shape"):
        assert real[key] == stand_in[key], key
    assert real["grad_norms"] == pytest.approx(stand_in["grad_norms"], rel=GRAD_NORM_RELATIVE)


def last_stage(reports: list[dict[str, Any]], role: str) -> dict[str, Any]:
    return next(result for report in reversed(reports) if (result := report["layouts"]["cp2"][role])["last_stage"])


@pytest.mark.parametrize("role", train_probe.ROLES)
def test_at_cp2_real_ring_attention_trains_as_the_stand_ins_bit_for_bit(runs, role):
    if not PLAN.cp2:
        pytest.skip(f"CP = 2 runs on core_r0.16.0 with verl 0.7.1, not {LINE} + {VERL}")
    for rank, (real, stand_in) in enumerate(zip(runs["real cp2"], runs["stand-in cp2"], strict=True)):
        real_result, stand_in_result = (report["layouts"]["cp2"][role] for report in (real, stand_in))
        done(real_result, f"real, rank {rank}")
        done(stand_in_result, f"stand-in, rank {rank}")
        assert real_result["weights_sha256"] == stand_in_result["weights_sha256"], rank
    real, stand_in = last_stage(runs["real cp2"], role), last_stage(runs["stand-in cp2"], role)
    assert real["outputs_after"] != real["outputs_before"]
    for key in ("outputs_before", "outputs_after", "losses", "lr"):
        assert real[key] == stand_in[key], key
    real_norms, stand_in_norms = (grad_norms(runs[name], role) for name in ("real cp2", "stand-in cp2"))
    assert real_norms == pytest.approx(stand_in_norms, rel=GRAD_NORM_RELATIVE)


def grad_norms(reports: list[dict[str, Any]], role: str) -> list[float]:
    """The gradient norms of a pair's run, from the rank that reported them."""
    return next(norms for report in reports if (norms := report["layouts"]["cp2"][role]["grad_norms"]))


@pytest.mark.parametrize("role", train_probe.ROLES)
def test_a_run_resumed_on_real_mindspeed_continues_bit_for_bit(runs, role):
    """verl's distributed optimizer resumes on real MindSpeed's AdamW (apex's FusedAdam there), as on the stand-in's."""
    if not PLAN.resume:
        pytest.skip(f"the resume runs on core_r0.16.0 with verl 0.7.1, not {LINE} + {VERL}")
    uninterrupted = done(runs["real"]["roles"][role], "real")
    assert uninterrupted["saved_after"] == SAVED_AFTER
    resumed = done(runs["real, resumed"]["roles"][role], "real, resumed")
    assert resumed["losses"] == uninterrupted["losses"][SAVED_AFTER:]
    assert resumed["grad_norms"] == uninterrupted["grad_norms"][SAVED_AFTER:]
    for key in ("weights_sha256", "outputs_after"):
        assert resumed[key] == uninterrupted[key], key
    assert resumed["lr"][1] == uninterrupted["lr"][1]


def test_where_real_mindspeed_does_not_take_the_environments_bridge_the_critic_stops_as_it_does(runs):
    """What a user of this pairing meets with the bridge verl defaults to: pinned, so that a new archive of the line
    that takes it shows here (and the comparisons can move to it)."""
    if not PLAN.bridge_error:
        pytest.skip(f"real MindSpeed {LINE} takes the environment's bridge ({ENVIRONMENTS_BRIDGE})")
    name = f"real, {ENVIRONMENTS_BRIDGE}"
    assert runs[name]["bridge"] == [ENVIRONMENTS_BRIDGE]
    critic = runs[name]["roles"]["critic"]
    assert (critic["stage"], critic["error"]) == PLAN.bridge_error, critic.get("traceback")


def test_what_real_mindspeed_needs_of_the_image_that_pypi_lacks(runs, megatron_lm):
    """Master imports and patches Megatron-LM's megatron.training, which the A5 image has from Megatron-LM's source and
    PyPI's megatron-core does not ship: without it, verl's guarded import of MindSpeed's adaptor leaves it out, and
    both roles stop as pinned here. The next line's needs are found the same way: run it on PyPI's packages alone."""
    if megatron_lm is None:
        pytest.skip(f"MindSpeed {LINE} needs no more than PyPI's packages and the extras")
    with_it, without = runs["real"], runs["real, without Megatron-LM"]
    # with it, as in the image (pip install -e): megatron.training and megatron.core both from Megatron-LM's source
    for path in (*with_it["megatron_training_files"], with_it["megatron_core_file"]):
        assert Path(path).is_relative_to(megatron_lm), with_it
    assert with_it["megatron_training_files"] and with_it["mindspeed_adaptor_imported"]
    # without it: PyPI's megatron-core, no megatron.training, so no MindSpeed adaptor; the shim says there is no
    # repatch to mend (with it, applied: the comparison with the stand-in above)
    assert without["megatron_training_files"] == [] and not without["mindspeed_adaptor_imported"], without
    assert not Path(without["megatron_core_file"]).is_relative_to(megatron_lm)
    verdicts = {name: dict((o["fix"], o["verdict"]) for o in runs[name]["outcomes"]) for name in runs if "real" in name}
    assert verdicts["real"]["mindspeed_line_repatch"] == "applied"
    assert verdicts["real, without Megatron-LM"]["mindspeed_line_repatch"] == "not applicable"
    for role in train_probe.ROLES:
        result = without["roles"][role]
        assert (result["stage"], result["error"]) == WITHOUT_MEGATRON_LM, result.get("traceback")


def test_without_the_shim_users_meet_verls_assertion_and_real_mindspeeds_ring_error(runs):
    if not PLAN.without_shim:
        pytest.skip(f"verl as it ships runs on core_r0.16.0 with verl 0.7.1, not {LINE} + {VERL}")
    critic = runs["real, no shim"]["roles"]["critic"]
    assert (critic["stage"], critic["error"]) == ("build", UNKNOWN_DEVICE)
    for rank, report in enumerate(runs["real cp2, no shim"]):
        actor = report["layouts"]["cp2"]["actor"]
        assert (actor["stage"], actor["error"]) == ("infer", RING_NOT_BUILT), rank
