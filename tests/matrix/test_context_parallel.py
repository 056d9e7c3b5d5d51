"""Context parallelism on two gloo ranks: does MindSpeed's ring state get built for each engine?

MindSpeed builds the ring only if its ``repatch`` (with ``context_parallel_size``)
came before Megatron's parallel state; nothing fails when it comes after, CP
attention just has no ring (upstream #5697). At CP >= 2 MindSpeed puts its own
attention class in place of Megatron's ``DotProductAttention`` and registers no fusion
attention, so batch-invariant attention (``core_r0.16.0``) is the only ``forward``
replacement and nothing is refused, with or without the shim. Each activation runs probe.py as
two rank processes that build both engines with CP=2, MindSpeed put back as a
fresh process has it before each build; real verl, real megatron-core, the
MindSpeed stand-in of simulated_npu.
"""

from __future__ import annotations

import json
import os
from typing import Any

import probe
import pytest

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
AFFECTED = VERL in ("0.6.1", "0.7.1")
MODES = ("none", "sitecustomize")  # the single-rank matrix covers every activation
WORLD_SIZE = 2
UNKNOWN_DEVICE = "AssertionError: Unknown device: npu for model_type: value_model and backend: megatron"
NO_RING = {"intra_window": None, "inter_window_kv": None, "inter_window_dkv": None}
LINE = os.environ.get("NPU_SHIM_SIM_MINDSPEED", "core_r0.16.0")  # as test_matrix
HAS_BATCH_INVARIANT = LINE == "core_r0.16.0"
# core_r0.18.0 leaves context parallelism to Megatron and TransformerEngineNPU: no ring state, no class swap
MINDSPEEDS_RING = LINE != "core_r0.18.0"
MEGATRON_ATTENTION = (
    "megatron.core.transformer.dot_product_attention.DotProductAttention / "
    "megatron.core.transformer.dot_product_attention.DotProductAttention.forward"
)
CP_CLASS = "mindspeed.core.context_parallel.adaptor.MindSpeedCPDotProductAttention"
CP_ATTENTION = f"{CP_CLASS} / mindspeed.core.context_parallel.dot_product_attention.CPDotProductAttentionImpl.forward"
CP_BATCH_INVARIANT = f"{CP_CLASS} / mindspeed.features_manager.dot_product_attention_forward_batch_invariant"
REFUSED = "ValueError: override_transformer_config.use_flash_attn_npu_batch_invariant=True with context_parallel_size=2"


def ring(rank: int) -> dict[str, list[int]]:
    return {"intra_window": [rank], "inter_window_kv": [0, 1], "inter_window_dkv": [0, 1]}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """mode -> the report of each rank; one activation (two processes) at a time."""
    directory = tmp_path_factory.mktemp("context_parallel")
    results: dict[str, list[dict[str, Any]]] = {}
    for mode in MODES:
        processes = probe.start_ranks(mode, directory, WORLD_SIZE)
        finished = probe.finish({str(rank): process for rank, (process, _) in enumerate(processes)})
        failed = {rank: error for rank, (status, error) in finished.items() if status != 0}
        assert not failed, "\n".join(f"{mode} rank {rank} failed:\n{error[-4000:]}" for rank, error in failed.items())
        results[mode] = [json.loads(output.read_text()) for _, output in processes]
    return results


def expected(mode: str, engine: str, rank: int) -> dict[str, Any]:
    """What each engine build gives on this verl, under this activation."""
    model_type, case = engine.split("/")
    shim = mode != "none"
    # 0.6.1 without the shim hands MindSpeed only use_flash_attn and the CP size: never the user's key
    key_reaches_mindspeed = case == "batch_invariant" and (shim or VERL != "0.6.1")
    attention = CP_BATCH_INVARIANT if key_reaches_mindspeed and HAS_BATCH_INVARIANT else CP_ATTENTION
    if AFFECTED and not shim:
        if model_type == "value_model":
            return {"error": UNKNOWN_DEVICE}
        return {"ring_state": NO_RING, "repatched": [True], "attention": attention}
    if shim and attention == CP_BATCH_INVARIANT:
        return {"error": REFUSED}  # before MindSpeed is asked
    if not MINDSPEEDS_RING:
        return {"ring_state": NO_RING, "repatched": [False], "attention": MEGATRON_ATTENTION}
    return {"ring_state": ring(rank), "repatched": [False], "attention": attention}


def observed(build: dict[str, Any]) -> dict[str, Any]:
    repatched = [call["parallel_state_initialized"] for call in build.get("repatch_calls", [])]
    if "error" in build:
        error = build["error"].split(": MindSpeed's batch-invariant")[0]  # the shim's refusal: its first clause
        return {"error": error, **({"repatched": repatched} if repatched else {})}
    return {"ring_state": build["ring_state"], "repatched": repatched, "attention": build["attention"]}


def test_ring_state_per_engine_rank_and_activation(ranks, capsys):
    table = [f"verl {VERL}, CP={WORLD_SIZE}: ring (inter-window KV ranks) and attention forward per engine build"]
    mismatches = []
    for mode, reports in ranks.items():
        for rank, report in enumerate(reports):
            assert report["rank"] == rank and report["device"] == "npu"
            for engine, build in report["engines"].items():
                got = observed(build)
                built = got.get("error") or f"{got['ring_state']['inter_window_kv']}, {got['attention'].split('.')[-1]}"
                table.append(f"  {mode:<14} rank {rank}  {engine:<30} {built}")
                if got != expected(mode, engine, rank):
                    mismatches.append((mode, rank, engine, got, expected(mode, engine, rank)))
    with capsys.disabled():
        print("\n" + "\n".join(table))
    assert not mismatches, "\n".join(map(str, mismatches))


@pytest.mark.parametrize("mode", [mode for mode in MODES if mode != "none"])
def test_the_shim_never_changes_the_users_config(ranks, mode):
    for report in ranks[mode]:
        for engine, build in report["engines"].items():
            if "error" not in build:
                assert build["user_config_unchanged"] is True, engine
