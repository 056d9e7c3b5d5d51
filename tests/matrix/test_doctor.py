"""``python -m npu_shim doctor --json`` against a real verl on the simulated NPU.

Two doctor subprocesses per verl release (each probes a fresh interpreter that imports
``verl.workers.engine``, about 10 s): with the shim (the checkout on PYTHONPATH, so its ``sitecustomize``
activates it) and without (``NPU_SHIM_DISABLE=1``). ``NPU_SHIM_TEST_VERL`` names
the release of the running environment and chooses which expectations apply.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import doctor, fixes_by_release, matrix_column, rendered

from simulated_npu import SIMULATED_DIR, TRANSFORMER_ENGINE_NPU_DIR, simulated_npu_env

TORCH_RELEASE = importlib.metadata.version("torch").partition("+")[0]  # what the stand-in torch_npu reports, marked

ROOT = Path(__file__).resolve().parents[2]
VALUE_KEY = ("value_model", "megatron", "npu")
UNKNOWN_DEVICE = "Unknown device: npu for model_type: value_model and backend: megatron"


def _verl_release() -> str:
    named = os.environ.get("NPU_SHIM_TEST_VERL")
    if named:
        return named
    try:  # run by hand: read the installed release without importing verl
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return ""


VERL = _verl_release()
VERL_TUPLE = tuple(int(part) for part in VERL.split(".")[:2] if part.isdigit())
AFFECTED = (0, 6) <= VERL_TUPLE < (0, 8)  # released without the MindSpeed value engine
NATIVE = VERL_TUPLE >= (0, 8)  # verl #6135 is in
# What the shim does per fix, as README.md's table says (on 0.6/0.7 its own _mindspeed_repatch has #6674 already,
# and 0.9.x's own is mended per MindSpeed line).
SHIM_WORK = fixes_by_release()[matrix_column()]
FIXES = list(SHIM_WORK)
MEGATRON = ".".join(importlib.metadata.version("megatron-core").split(".")[:2])


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# verl's default bridge per release (McoreEngineConfig.vanilla_mbridge): none to choose on 0.6.x, mbridge on 0.7.x
# and 0.8.0, Megatron-Bridge from 0.9.0; where that is missing, no Megatron engine of the default config builds (#6931)
DEFAULT_BRIDGE = "Megatron-Bridge" if VERL_TUPLE >= (0, 9) else "mbridge" if VERL_TUPLE >= (0, 7) else None
BRIDGE_MISSING = DEFAULT_BRIDGE == "Megatron-Bridge" and not _installed("megatron-bridge")
# with the shim, and without it where verl has the value engine
NATIVE_STATUS = (1, "problem") if BRIDGE_MISSING else (0, "ok")

if not (AFFECTED or NATIVE):
    raise pytest.UsageError(f"tests/matrix needs verl 0.6 or later installed (found {VERL!r}); run `make test`")


# The MindSpeed line the stand-in simulates here, as the environment pairs it with its Megatron (noxfile.py), and what
# the doctor finds it offers: repatch, batch-invariant flash attention, the context-parallel wrapper.
LINE = os.environ.get("NPU_SHIM_SIM_MINDSPEED") or "core_r0.16.0"
OFFERS = {
    "core_r0.16.0": (True, True, True),
    "core_r0.18.0": (True, False, False),
    "master": (True, False, True),  # MindSpeed master 0c6c0ce, verl 0.9.1's A5 image: its own ring, no MegatronAdaptor
}


def _clean_env(**extra: str) -> dict[str, str]:
    env = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
    env["PYTHONPATH"] = str(ROOT)  # npu_shim importable; its sitecustomize activates the shim
    env["NPU_SHIM_SIM_MINDSPEED"] = LINE
    env.update(extra)
    return simulated_npu_env(env)


def _doctor(env: dict[str, str]) -> dict[str, Any]:
    run = doctor(env, ROOT.parent)  # not the checkout: only PYTHONPATH may make npu_shim importable
    report = {**run.report, "_returncode": run.status}
    return report


@pytest.fixture(scope="module")
def with_shim() -> dict[str, Any]:
    return _doctor(_clean_env())


@pytest.fixture(scope="module")
def without_shim() -> dict[str, Any]:
    return _doctor(_clean_env(NPU_SHIM_DISABLE="1"))


def _row(report: dict[str, Any], key: tuple[str, str, str]) -> dict[str, Any] | None:
    rows = [row for row in report["registry"] if (row["model_type"], row["backend"], row["device"]) == key]
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def _verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {fix["fix"]: fix["verdict"] for fix in report["fixes"]}


# -- every release ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["with_shim", "without_shim"])
def test_sees_verl_and_the_simulated_npu(case: str, request: pytest.FixtureRequest) -> None:
    report = request.getfixturevalue(case)
    assert report["verl"]["importable"] is True
    assert report["verl"]["version"] == VERL
    assert Path(report["verl"]["path"], "workers", "engine", "base.py").is_file()
    assert report["verl"]["error"] is None
    assert report["device"] == "npu"
    assert report["engine_device"] == "npu"
    # The kit's stand-ins, told apart by what the doctor reports of any torch_npu and MindSpeed
    assert report["torch_npu"] == {"loaded": True, "importable": True, "version": f"{TORCH_RELEASE}+simulated"}
    mindspeed = report["mindspeed"]
    assert Path(mindspeed["source"]) == Path(SIMULATED_DIR, "mindspeed")
    found = (
        mindspeed["repatch_importable"],
        mindspeed["batch_invariant_attention"],
        mindspeed["context_parallel_wrapper"],
    )
    assert found == OFFERS[LINE], mindspeed
    assert [fix["fix"] for fix in report["fixes"]] == FIXES
    assert report["exit_code"] == report["_returncode"]


def test_with_shim_resolves_and_exits_0_where_verls_default_bridge_imports(with_shim: dict[str, Any]) -> None:
    assert (with_shim["_returncode"], with_shim["status"]) == NATIVE_STATUS
    assert with_shim["shim"]["active"] is True
    assert with_shim["shim"]["activated_via"] == "sitecustomize"
    assert with_shim["probed_in"] == "a fresh interpreter"
    assert with_shim["routes"]["effective"] == "PYTHONPATH"
    assert with_shim["routes"]["PYTHONPATH"]["configured"] == str(ROOT)
    assert with_shim["value_model_megatron_resolves"] is True
    assert with_shim["value_model_megatron_error"] is None
    assert with_shim["value_model_megatron_class"].endswith(".MindspeedEngineWithValueHead")


def test_without_shim_reports_it_inactive(without_shim: dict[str, Any]) -> None:
    shim = without_shim["shim"]
    assert shim["active"] is False
    assert shim["activated_via"] is None
    assert shim["disabled"] is True
    assert "NPU_SHIM_DISABLE" in shim["reason"]
    assert without_shim["routes"]["effective"] is None  # new interpreters inherit NPU_SHIM_DISABLE
    assert "NPU_SHIM_DISABLE" in without_shim["routes"]["PYTHONPATH"]["reason"]
    assert set(_verdicts(without_shim).values()) == {"inactive"}
    assert all("NPU_SHIM_DISABLE" in fix["reason"] for fix in without_shim["fixes"])
    assert all(row["origin"] == "upstream" and not row["patched"] for row in without_shim["registry"])


def test_human_output_renders_the_same_report(with_shim: dict[str, Any]) -> None:

    text = rendered(with_shim)
    assert any(line.split()[:2] == ["verl", VERL] for line in text.splitlines())
    assert "registry:" in text
    header = next(line for line in text.splitlines() if "model_type" in line and "origin" in line)
    assert header.split() == ["model_type", "backend", "device", "class", "origin"]
    assert any(line.split()[:3] == list(VALUE_KEY) for line in text.splitlines())


# -- 0.6.x/0.7.x: the shim adds the engine; 0.8.0 and later: verl has it, the shim stands aside -----


def test_with_shim_verdicts_and_registry_match_the_release(with_shim: dict[str, Any]) -> None:
    row = _row(with_shim, VALUE_KEY)
    assert row is not None
    assert row["class"] == "verl.workers.engine.mindspeed.transformer_impl.MindspeedEngineWithValueHead"
    lm_row = _row(with_shim, ("language_model", "megatron", "npu"))
    assert lm_row is not None
    assert _verdicts(with_shim) == SHIM_WORK
    if AFFECTED:
        assert row["origin"] == "shim"
        assert (lm_row["origin"], lm_row["patched"]) == ("upstream", True)
    else:
        assert not any(row["origin"] == "shim" or row["patched"] for row in with_shim["registry"])


def test_without_shim_the_exit_status_matches_the_release(without_shim: dict[str, Any]) -> None:
    would = {fix["fix"]: fix["would"] for fix in without_shim["fixes"]}
    if AFFECTED:
        assert without_shim["_returncode"] == 1
        assert without_shim["status"] == "problem"
        assert without_shim["value_model_megatron_resolves"] is False
        assert UNKNOWN_DEVICE in without_shim["value_model_megatron_error"]
        assert _row(without_shim, VALUE_KEY) is None
        assert would == {fix: "apply" if verdict == "applied" else verdict for fix, verdict in SHIM_WORK.items()}
    else:
        assert (without_shim["_returncode"], without_shim["status"]) == NATIVE_STATUS
        assert without_shim["value_model_megatron_resolves"] is True
        assert would == {fix: "apply" if verdict == "applied" else verdict for fix, verdict in SHIM_WORK.items()}


@pytest.mark.parametrize("case", ["with_shim", "without_shim"])
def test_names_verls_default_bridge_and_a_missing_megatron_bridge_with_both_ways_out(
    case: str, request: pytest.FixtureRequest
) -> None:
    """verl #6931: on an NPU without Megatron-Bridge, verl 0.9's default config dies at the first engine it builds
    (``No module named 'megatron.bridge'``). The doctor names the import that fails and both ways out."""

    report = request.getfixturevalue(case)
    bridge = report["bridge"]
    assert bridge["default"] == DEFAULT_BRIDGE
    if not BRIDGE_MISSING:
        assert (bridge["import_error"], bridge["meaning"]) == (None, None), bridge
        return
    failure = bridge["import_error"]
    assert (failure["module"], failure["missing"]) == ("verl.models.mcore.bridge", "megatron.bridge"), failure
    assert failure["error"] == "ModuleNotFoundError: No module named 'megatron.bridge'"
    assert "Megatron-Bridge is not installed" in bridge["meaning"]
    if tuple(map(int, MEGATRON.split("."))) >= (0, 18):
        assert "install Megatron-Bridge" in bridge["meaning"]
    else:  # Megatron-Bridge cannot import beside it: only the legacy mbridge is a way out
        assert "install Megatron-Bridge" not in bridge["meaning"]
        assert f"Megatron-Bridge does not import beside megatron-core {MEGATRON} (it needs 0.18" in bridge["meaning"]
    assert "critic.megatron.vanilla_mbridge=True" in bridge["meaning"]
    status = next(line for line in rendered(report).splitlines() if line.split()[:1] == ["status"])
    assert "problem (exit 1): verl's default Megatron-Bridge does not import" in status


# -- where an image is built: no NPU, and `doctor --device npu` --------------------------------------------------

# verl 0.6.x imports its MindSpeed engines unguarded: without MindSpeed there is no npu engine for the shim to add to
# (on the images, MindSpeed is installed where the image is built too).
ENGINES_WITHOUT_MINDSPEED = VERL_TUPLE >= (0, 7)


@pytest.mark.parametrize("shim", ["with the shim", "without the shim"])
def test_device_npu_judges_a_machine_without_an_npu_as_an_npu_host(shim: str) -> None:
    """The kit is not on the path: verl sees no NPU (cpu with this torch, cuda with PyPI's torch 2.10)."""
    env = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
    env["PYTHONPATH"] = str(ROOT)
    if LINE == "core_r0.18.0":  # Megatron-Bridge needs TransformerEngineNPU, which the images install where they build
        env["PYTHONPATH"] += os.pathsep + TRANSFORMER_ENGINE_NPU_DIR
    if shim == "without the shim":
        env["NPU_SHIM_DISABLE"] = "1"
    unjudged = doctor(env, ROOT.parent)
    assert (unjudged.status, unjudged.report["status"]) == (0, "not judged")
    assert unjudged.report["device"] in ("cpu", "cuda")

    judged = doctor(env, ROOT.parent, "--device", "npu")
    report = judged.report
    assert (report["device"], report["assumed_device"], report["engine_device"]) == (
        unjudged.report["device"], "npu", "npu"
    )  # fmt: skip
    # No MindSpeed here (it comes with the kit): a Megatron critic on an NPU has nothing to run on, whatever the
    # lookup says (the unit tests judge an image build with MindSpeed: ok with the shim)
    assert (judged.status, report["status"]) == (1, "problem"), rendered(report)
    assert "MindSpeed is not installed: verl's Megatron engines run on an NPU through MindSpeed" in report["problems"]
    resolves = ENGINES_WITHOUT_MINDSPEED and (NATIVE or (AFFECTED and shim == "with the shim"))
    assert report["value_model_megatron_resolves"] is resolves
    if not resolves:
        assert UNKNOWN_DEVICE in report["value_model_megatron_error"]


def test_a_fix_a_critic_needs_turned_off_is_a_problem_the_doctor_names() -> None:
    """megatron_critic mends 0.7.1's critic forward (verl #5870): turned off there, the lookup resolves and the
    critic's first forward fails. Where the release does not need it, turning it off changes no status."""
    run = doctor(_clean_env(NPU_SHIM_DISABLED_FIXES="megatron_critic"), ROOT.parent)
    report = run.report
    assert {row["fix"]: row["verdict"] for row in report["fixes"]}["megatron_critic"] == "disabled"
    needed = [row for row in report["needed_but_off"] if row["fix"] == "megatron_critic"]
    if SHIM_WORK["megatron_critic"] != "applied":  # verl has the change, or its critic passes no such keyword
        assert (needed, (run.status, report["status"])) == ([], NATIVE_STATUS)
        return
    assert needed == [{"fix": "megatron_critic", "breaks_critic": True}]
    assert (run.status, report["status"]) == (1, "problem"), "the lookup resolves; the critic's forward would not"
    assert report["value_model_megatron_resolves"] is True
    assert "megatron_critic: verl lacks its change here; a Megatron critic on an NPU fails" in rendered(report)


# -- the command line, without verl ------------------------------------------------------------------


def test_bootstrap_dir_prints_only_the_directory_and_imports_nothing_heavy() -> None:
    env = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
    env["PYTHONPATH"] = str(ROOT)
    process = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "npu_shim", "bootstrap-dir"],
        env=env,
        cwd=str(ROOT.parent),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert process.stdout == f"{ROOT}\n"  # a checkout's own sitecustomize.py is its bootstrap
    imported = {line.rsplit("|", 1)[-1].strip() for line in process.stderr.splitlines() if "|" in line}
    assert "npu_shim" in imported
    heavy = {name for name in imported if name.split(".")[0] in {"wrapt", "torch", "verl", "npu_shim"}}
    assert heavy <= {
        "npu_shim",
        "npu_shim.__main__",
        "npu_shim.settings",
        "npu_shim.propagation",
    }


@pytest.mark.skipif(
    (VERL, MEGATRON) != ("0.9.1", "0.16"), reason="once, on a verl that has every upstream change and a guarded import"
)
@pytest.mark.parametrize(
    ("line", "found", "mend"),
    [
        ("2.3.0_core_r0.12.1", (True, False, True), "applied"),
        ("core_r0.18.0", (True, False, False), "applied"),
        ("2.1.0_core_r0.12.1", (False, False, True), "not applicable"),
    ],
)
def test_names_what_each_mindspeed_line_offers(line: str, found: tuple[bool, bool, bool], mend: str) -> None:
    report = _doctor(_clean_env(NPU_SHIM_SIM_MINDSPEED=line))
    mindspeed = report["mindspeed"]
    assert (
        mindspeed["repatch_importable"],
        mindspeed["batch_invariant_attention"] is True,
        mindspeed["context_parallel_wrapper"],
    ) == found
    assert len(mindspeed["meaning"]) == (1 if line.startswith("2.1.0") else 2), mindspeed["meaning"]
    assert _verdicts(report)["mindspeed_line_repatch"] == mend


ON_THE_IMAGES_STACK = pytest.mark.skipif(
    (VERL, MEGATRON) != ("0.9.1", "0.18"), reason="on the stack verl's Ascend images run: 0.9.1, Megatron 0.18"
)


@ON_THE_IMAGES_STACK
@pytest.mark.parametrize(
    ("megatron_adaptor", "transformer_engine_npu"),
    [(True, True), (False, True), (True, False)],
    ids=["all", "no-ma", "no-tenpu"],
)
def test_on_core_r0_18_a_missing_megatron_adaptor_or_tenpu_is_a_problem_the_doctor_names(
    megatron_adaptor: bool, transformer_engine_npu: bool, request: pytest.FixtureRequest
) -> None:
    """Without MegatronAdaptor ``import mindspeed`` fails there; verl's guarded import leaves ``repatch = None`` and
    every MindSpeed patch is off, silently. Without TransformerEngineNPU Megatron's guarded import leaves it without
    Transformer Engine, and no verl Megatron model builds. The doctor must say which, never ``ok`` nor "absent"."""
    env = simulated_npu_env(
        _clean_env(NPU_SHIM_SIM_MINDSPEED="core_r0.18.0"),
        megatron_adaptor=megatron_adaptor,
        transformer_engine_npu=transformer_engine_npu,
    )
    # the whole stack is this environment's own: the module's report, probed once
    report = request.getfixturevalue("with_shim") if env == _clean_env() else _doctor(env)
    assert report["transformer_engine_installed"] is transformer_engine_npu
    if megatron_adaptor and transformer_engine_npu:
        assert (report["_returncode"], report["status"]) == NATIVE_STATUS, report
        assert report["mindspeed_import_error"] is report["transformer_engine_import_error"] is None
        assert report["mindspeed"]["repatch_importable"] is True
        return
    assert (report["_returncode"], report["status"]) == (1, "problem"), report
    if not megatron_adaptor:
        assert report["mindspeed_import_error"]["missing"] == "megatron_adaptor"
        assert report["mindspeed"]["repatch_importable"] is False
        assert report["megatron_adaptor"]["installed"] is False
    else:
        assert report["mindspeed_import_error"] is None
        assert report["transformer_engine_import_error"]["missing"] == "transformer_engine"
        assert report["mindspeed"]["repatch_importable"] is True
    assert not any("absent" in meaning for meaning in report["mindspeed"]["meaning"])


@ON_THE_IMAGES_STACK
def test_on_core_r0_18_megatron_adaptor_comes_before_megatron_where_verl_imports_megatron_first() -> None:
    """verl made to import Megatron first thing (``VERL_USE_EXTERNAL_MODULES=megatron.core``, before its MindSpeed
    engine imports MindSpeed and so MegatronAdaptor): npu_shim's watcher, started by its sitecustomize with the
    checkout on PYTHONPATH, still imports MegatronAdaptor first (issue 34), and the doctor says so."""
    report = _doctor(_clean_env(NPU_SHIM_SIM_MINDSPEED="core_r0.18.0", VERL_USE_EXTERNAL_MODULES="megatron.core"))
    adaptor = report["megatron_adaptor"]
    assert (adaptor["installed"], adaptor["before_megatron"], adaptor["megatron_first"]) == (True, True, []), adaptor


def test_rays_physical_npu_ids_are_named_and_a_problem_where_their_fix_is_off(with_shim: dict[str, Any]) -> None:
    """verl #7507: with Ray's NPU ids physical (NOSET) and ASCEND_RT_VISIBLE_DEVICES restricting the devices, every
    verl Ray worker dies in set_device; the doctor names the combination, and the fix turned off is a problem."""
    combination = {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1", "ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}
    plain = {row["fix"]: row for row in with_shim["fixes"]}["ray_npu_device_index"]
    assert plain["verdict"] == "not applicable"
    assert "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES is not set" in plain["reason"]
    named = {row["fix"]: row for row in doctor(_clean_env(**combination), ROOT.parent).report["fixes"]}
    assert named["ray_npu_device_index"]["verdict"] == "applied"
    assert "place of Ray's id in ASCEND_RT_VISIBLE_DEVICES" in named["ray_npu_device_index"]["reason"]
    run = doctor(_clean_env(**combination, NPU_SHIM_DISABLED_FIXES="ray_npu_device_index"), ROOT.parent)
    assert {"fix": "ray_npu_device_index", "breaks_critic": True} in run.report["needed_but_off"]
    assert (run.status, run.report["status"]) == (1, "problem")
    assert "ray_npu_device_index: verl lacks its change here" in rendered(run.report)
