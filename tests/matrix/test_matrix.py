"""Real verl from PyPI, real megatron-core and torch.distributed (gloo), on a simulated NPU.

Runs in each environment of ``nox -s matrix``; ``NPU_SHIM_TEST_VERL`` names the
verl release installed there. One subprocess per activation runs probe.py,
which reports what verl resolves and builds; the tests below read its report.
"""

from __future__ import annotations

import json
import os
from typing import Any

import probe
import pytest

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
if VERL not in ("0.6.1", "0.7.1", "0.8.0", "0.9.0", "0.9.1"):
    raise pytest.UsageError("tests/matrix needs NPU_SHIM_TEST_VERL=<verl version installed here>; run `make test`")
AFFECTED = VERL in ("0.6.1", "0.7.1")
LACKS_6674 = VERL == "0.8.0"  # has the value engine, but a _mindspeed_repatch from before upstream #6674
SHIM_MODES = ("sitecustomize", "import-before", "import-after")
UNKNOWN_DEVICE = "AssertionError: Unknown device: npu for model_type: value_model and backend: megatron"
DUPLICATE_PATCH = "RuntimeError: the patch of forward exist !"
MINDSPEED_IMPL = "verl.workers.engine.mindspeed.transformer_impl"
# The MindSpeed line the stand-in simulates in this environment (noxfile): only core_r0.16.0 has
# batch-invariant flash attention; elsewhere use_flash_attn_npu_batch_invariant does nothing.
LINE = os.environ.get("NPU_SHIM_SIM_MINDSPEED", "core_r0.16.0")
HAS_BATCH_INVARIANT = LINE == "core_r0.16.0"
MEGATRON_ATTENTION = "megatron.core.transformer.dot_product_attention.DotProductAttention"
FUSION = f"{MEGATRON_ATTENTION} / mindspeed.features_manager.dot_product_attention_forward"
UNFUSED = f"{MEGATRON_ATTENTION} / {MEGATRON_ATTENTION}.forward"  # Megatron's own: S x S scores in memory
BATCH_INVARIANT = f"{FUSION}_batch_invariant"
IGNORED = "use_flash_attn_npu_batch_invariant=True: this MindSpeed has no batch-invariant flash attention"
SECOND_ENGINE_ON_0_6 = "AssertionError: data parallel group is already initialized"
INHERITED = "MindSpeed's batch-invariant flash attention (use_flash_attn_npu_batch_invariant) was turned on earlier"

# What MindSpeed's repatch must receive, per engine-construction case, with upstream's newest semantics.
NEWEST_SEMANTICS = {
    "defaults": {"use_flash_attn": True},
    "attention_backend": {"attention_backend": "AttnBackend.flash", "use_flash_attn": True},
    # fusion attention off only where MindSpeed has batch-invariant attention (npu_shim's mend)
    "batch_invariant": {"use_flash_attn_npu_batch_invariant": True, "use_flash_attn": not HAS_BATCH_INVARIANT},
}
# verl 0.8.0's own _mindspeed_repatch predates #6674: no enum mapping, no batch-invariant rule.
VERL_0_8_0_SEMANTICS = {
    "defaults": {"use_flash_attn": True},
    "attention_backend": {"attention_backend": "flash", "use_flash_attn": True},
    "batch_invariant": {"use_flash_attn_npu_batch_invariant": True, "use_flash_attn": True},
}
VERDICTS = {  # per fix, with the shim active
    "0.6.1": {"shared_repatch": "applied", "value_engine": "applied", "lm_engine_repatch": "applied",
              "mindspeed_line_repatch": "not applicable"},
    "0.8.0": {"shared_repatch": "native", "value_engine": "native", "lm_engine_repatch": "native",
              "mindspeed_line_repatch": "applied"},
    "0.9.1": {"shared_repatch": "native", "value_engine": "native", "lm_engine_repatch": "native",
              "mindspeed_line_repatch": "applied"},
}  # fmt: skip
VERDICTS["0.7.1"] = VERDICTS["0.6.1"]
VERDICTS["0.9.0"] = VERDICTS["0.9.1"]  # the same engine module; 0.9.1 differs elsewhere


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Run probe.py under every activation, two at a time (this machine kind has two cores)."""
    directory = tmp_path_factory.mktemp("probes")
    results: dict[str, dict[str, Any]] = {}
    modes = ["none", *SHIM_MODES]
    for pair in (modes[:2], modes[2:]):
        children = {}
        for mode in pair:
            children[mode] = probe.start(mode, directory / f"{mode}.json")
        for mode, (status, stderr) in probe.finish(children).items():
            assert status == 0, f"probe {mode} failed:\n{stderr}"
            results[mode] = json.loads((directory / f"{mode}.json").read_text())
    return results


def test_the_simulated_npu_is_what_verl_sees(reports):
    for mode, report in reports.items():
        assert report["verl_version"] == VERL, mode
        assert report["torch_npu_simulated"] is True, mode
        assert report["device"] == "npu", mode


def test_without_the_shim(reports):
    report = reports["none"]
    assert report["shim_loaded"] is False
    if AFFECTED:
        assert report["value_model"] == {"error": UNKNOWN_DEVICE}
        assert report["engines"]["value_model/defaults"]["error"] == UNKNOWN_DEVICE
    else:
        assert report["value_model"]["class"] == f"{MINDSPEED_IMPL}.MindspeedEngineWithValueHead"
        assert report["value_model"]["added_by_npu_shim"] is False
    if VERL == "0.7.1":  # the two LM-engine bugs the shim also fixes: repatch after the mesh, user config written
        lm = report["engines"]["language_model/defaults"]
        assert [call["parallel_state_initialized"] for call in lm["repatch_calls"]] == [True]
        assert lm["user_config_unchanged"] is False
        assert lm["user_config_after"] == {"use_flash_attn": True}
    if LACKS_6674:  # fusion plus batch-invariant attention: MindSpeed core_r0.16.0 refuses, others ignore the key
        for model_type in ("value_model", "language_model"):
            engines = {case.split("/")[1]: e for case, e in report["engines"].items() if case.startswith(model_type)}
            built = engines["batch_invariant"].get("error") or engines["batch_invariant"]["attention"]
            assert built == (DUPLICATE_PATCH if HAS_BATCH_INVARIANT else FUSION), model_type
            calls = engines["batch_invariant"]["repatch_calls"]
            assert [call["config"] for call in calls] == [VERL_0_8_0_SEMANTICS["batch_invariant"]], model_type
            assert engines["attention_backend"]["repatch_calls"][0]["config"]["attention_backend"] == "flash"


@pytest.mark.parametrize("mode", SHIM_MODES)
def test_value_model_resolves_to_the_mindspeed_value_engine(reports, mode):
    report = reports[mode]
    assert report["activated_via"] == ("sitecustomize" if mode == "sitecustomize" else "import")
    assert report["value_model"]["class"] == f"{MINDSPEED_IMPL}.MindspeedEngineWithValueHead"
    assert report["value_model"]["subclass_of_verl_base"] is True
    assert report["value_model"]["added_by_npu_shim"] is AFFECTED
    assert report["language_model"]["class"] == f"{MINDSPEED_IMPL}.MindspeedEngineWithLMHead"
    # 0.6/0.7's repatching __init__ is gone; 0.8+ keeps its own, which only calls super().__init__.
    assert report["language_model"]["own_init"] is (not AFFECTED)


@pytest.mark.parametrize("mode", SHIM_MODES)
def test_every_upstream_export_is_in_place(reports, mode):
    for name, export in reports[mode]["exports"].items():
        assert export["present"], name
        assert export["in_all"] in (True, None), name
    shared = reports[mode]["exports"][f"{MINDSPEED_IMPL}._mindspeed_repatch"]["defined_in"]
    # the shim's own on every release: 0.6/0.7 lack it, 0.8.0 lacks #6674, 0.9.x the MindSpeed-line mend
    assert shared == "npu_shim.fixes.shared_repatch"


@pytest.mark.parametrize("mode", SHIM_MODES)
def test_both_engines_build_with_one_repatch_before_the_parallel_state(reports, mode):
    for case, engine in reports[mode]["engines"].items():
        assert "error" not in engine, f"{case}: {engine.get('error')}"
        assert engine["engine"].startswith(MINDSPEED_IMPL), case
        assert [call["parallel_state_initialized"] for call in engine["repatch_calls"]] == [False], case
        assert engine["parallel_state_initialized_after"] is True, case
        # upstream's newest semantics on 0.8.0 too: the shim carries #6674 there
        assert engine["repatch_calls"][0]["config"] == NEWEST_SEMANTICS[case.split("/")[1]], case
        assert engine["user_config_unchanged"] is True, case


@pytest.mark.parametrize("mode", SHIM_MODES)
def test_context_parallel_size_reaches_repatch(reports, mode):
    calls = reports[mode]["context_parallel"]["repatch_calls"]
    assert [call["config"] for call in calls] == [{"use_flash_attn": True, "context_parallel_size": 2}]


@pytest.mark.parametrize("mode", SHIM_MODES)
def test_fixes_apply_on_affected_releases_and_stand_aside_on_native_ones(reports, mode):
    report = reports[mode]
    verdicts = {o["fix"]: o["verdict"] for o in report["outcomes"] if o["fix"] in VERDICTS[VERL]}  # the engine's
    assert verdicts == VERDICTS[VERL]
    if AFFECTED:
        assert report["language_model"]["own_init_device_mesh"] == (
            "npu_shim.fixes.shared_repatch.MindspeedEngineWithLMHead._init_device_mesh"
        )
    else:
        for model_type in ("value_model", "language_model"):
            # The very classes and methods verl resolves without the shim: nothing wrapped or replaced.
            assert report[model_type] == reports["none"][model_type], model_type
            assert report[model_type]["own_init_device_mesh"].startswith(MINDSPEED_IMPL), model_type


def test_verl_files_on_disk_are_unchanged(reports):
    for mode, report in reports.items():
        assert report["verl_digest_before"] == report["verl_digest_after"], mode


@pytest.mark.parametrize("mode", SHIM_MODES)
def test_each_engine_gets_the_attention_its_mindspeed_line_has(reports, mode):
    """Fusion attention by default; batch-invariant attention where MindSpeed has it, fusion attention where not."""
    for case, engine in reports[mode]["engines"].items():
        batch_invariant = case.endswith("/batch_invariant") and HAS_BATCH_INVARIANT
        assert engine["attention"] == (BATCH_INVARIANT if batch_invariant else FUSION), case
    warned = [w for w in reports[mode]["warnings"] if w.startswith("override_transformer_config." + IGNORED)]
    assert len(warned) == (0 if HAS_BATCH_INVARIANT else 1), reports[mode]["warnings"]


@pytest.mark.skipif(VERL != "0.8.0", reason="the flash-attention loss is measured against verl 0.8.0's own engines")
def test_the_shim_never_takes_fusion_attention_away(reports):
    """verl 0.8.0 without npu_shim keeps fusion attention wherever MindSpeed does not refuse it: so does the shim."""
    baseline = reports["none"]["engines"]
    for mode in SHIM_MODES:
        for case, engine in reports[mode]["engines"].items():
            if "error" not in baseline[case]:
                assert engine["attention"] == baseline[case]["attention"], (mode, case)


def colocated(report: dict[str, Any], scenario: str) -> dict[str, str]:
    builds = report["colocated"][scenario]["builds"]
    return {role: build.get("error") or build["attention"] for role, build in builds.items()}


@pytest.mark.parametrize("mode", SHIM_MODES)
def test_colocated_roles_build_with_the_shim(reports, mode):
    """verl's order in one worker process (critic, ref, actor), MindSpeed's arguments carried between them."""
    report = reports[mode]
    on = BATCH_INVARIANT if HAS_BATCH_INVARIANT else FUSION
    # verl 0.6's Megatron engine initialises the parallel state whatever is there: a second engine in one
    # process fails in verl itself, after its repatch (0.7 added the is_initialized() check; 0.6's stock
    # trainer never colocates engine workers)
    later = SECOND_ENGINE_ON_0_6 if VERL == "0.6.1" else on
    assert colocated(report, "stock") == {"critic": FUSION, "ref": later, "actor": later}
    assert colocated(report, "key_on_critic_only") == {"critic": on, "ref": later, "actor": later}
    warnings = report["colocated"]["key_on_critic_only"]["warnings"]
    assert [w.startswith(INHERITED) for w in warnings] == ([True] if HAS_BATCH_INVARIANT else []), warnings


@pytest.mark.skipif(VERL not in ("0.8.0", "0.9.0", "0.9.1"), reason="0.6/0.7 fail earlier, at the critic")
def test_colocated_roles_without_the_shim(reports):
    """Upstream: 0.8.0 dies on the stock config (no #6674), 0.9.x when only the critic sets the key; on a line
    without batch-invariant attention 0.9.x turns fusion attention off for the key (#6674): Megatron's unfused."""
    report = reports["none"]
    refused = DUPLICATE_PATCH if HAS_BATCH_INVARIANT else FUSION
    stock = colocated(report, "stock")
    assert stock["ref"] == (refused if LACKS_6674 else BATCH_INVARIANT if HAS_BATCH_INVARIANT else UNFUSED)
    assert colocated(report, "key_on_critic_only")["ref"] == (DUPLICATE_PATCH if HAS_BATCH_INVARIANT else FUSION)


@pytest.fixture(scope="module")
def on_2_3_0(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """verl 0.9.x with the stand-in as MindSpeed 2.3.0_core_r0.12.1 (the line of verl's generic Ascend images)."""
    directory = tmp_path_factory.mktemp("line-2.3.0")
    children = {
        mode: probe.start(mode, directory / f"{mode}.json", NPU_SHIM_SIM_MINDSPEED="2.3.0_core_r0.12.1")
        for mode in ("none", "sitecustomize")
    }
    for mode, (status, stderr) in probe.finish(children).items():
        assert status == 0, f"probe {mode} failed:\n{stderr}"
    return {mode: json.loads((directory / f"{mode}.json").read_text()) for mode in children}


@pytest.mark.skipif(not VERL.startswith("0.9."), reason="upstream's newest repatch, on a line without the feature")
def test_verl_0_9_takes_fusion_attention_away_on_2_3_0_and_the_shim_gives_it_back(on_2_3_0):
    for mode, report in on_2_3_0.items():
        assert report["mindspeed_line"] == "2.3.0_core_r0.12.1", mode
        for model_type in ("value_model", "language_model"):
            engine = report["engines"][f"{model_type}/batch_invariant"]
            config = engine["repatch_calls"][0]["config"]
            if mode == "none":  # upstream: fusion attention off for a key this MindSpeed ignores
                assert (config["use_flash_attn"], engine["attention"]) == (False, UNFUSED)
            else:
                assert (config["use_flash_attn"], engine["attention"]) == (True, FUSION)
    assert [w for w in on_2_3_0["sitecustomize"]["warnings"] if w.startswith("override_transformer_config.")] != []
