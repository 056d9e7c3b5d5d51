"""Context parallelism on two gloo ranks: does MindSpeed's ring state get built for each engine?

MindSpeed builds the ring only if its ``repatch`` (with ``context_parallel_size``)
came before Megatron's parallel state; nothing fails when it comes after, CP
attention just has no ring (upstream #5697). Each activation runs probe.py as
two rank processes that build both engines with CP=2, MindSpeed put back as a
fresh process has it before each build; real verl, real megatron-core, the
MindSpeed stand-in of npu_shim.testing.
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
DUPLICATE_PATCH = "RuntimeError: the patch of forward exist !"
NO_RING = {"intra_window": None, "inter_window_kv": None, "inter_window_dkv": None}
ATTENTION = "mindspeed.features_manager.dot_product_attention_forward"


def ring(rank: int) -> dict[str, list[int]]:
    return {"intra_window": [rank], "inter_window_kv": [0, 1], "inter_window_dkv": [0, 1]}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """mode -> the report of each rank; one activation (two processes) at a time."""
    directory = tmp_path_factory.mktemp("context_parallel")
    results: dict[str, list[dict[str, Any]]] = {}
    for mode in MODES:
        processes = probe.start_ranks(mode, directory, WORLD_SIZE)
        try:
            for rank, (process, _) in enumerate(processes):
                _, stderr = process.communicate(timeout=600)
                assert process.returncode == 0, f"{mode} rank {rank} failed:\n{stderr[-4000:]}"
        finally:
            for process, _ in processes:
                process.kill()
        results[mode] = [json.loads(output.read_text()) for _, output in processes]
    return results


def expected(mode: str, engine: str, rank: int) -> dict[str, Any]:
    """What each engine build gives on this verl, under this activation."""
    model_type, case = engine.split("/")
    shim = mode != "none"
    if AFFECTED and not shim:
        if model_type == "value_model":
            return {"error": UNKNOWN_DEVICE}
        if case == "batch_invariant" and VERL == "0.7.1":  # 0.7.1 passes the user's config, and use_flash_attn
            return {"error": DUPLICATE_PATCH, "repatched": [True]}
        return {"ring_state": NO_RING, "repatched": [True], "attention": ATTENTION}  # 0.6 drops the user's keys
    if VERL == "0.8.0" and not shim and case == "batch_invariant":  # upstream #6674 is not in 0.8.0
        return {"error": DUPLICATE_PATCH, "repatched": [False]}
    attention = ATTENTION + ("_batch_invariant" if case == "batch_invariant" else "")
    return {"ring_state": ring(rank), "repatched": [False], "attention": attention}


def observed(build: dict[str, Any]) -> dict[str, Any]:
    repatched = [call["parallel_state_initialized"] for call in build.get("repatch_calls", [])]
    if "error" in build:
        return {"error": build["error"], **({"repatched": repatched} if repatched else {})}
    return {"ring_state": build["ring_state"], "repatched": repatched, "attention": build["attention_forward"]}


def test_ring_state_per_engine_rank_and_activation(ranks, capsys):
    table = [f"verl {VERL}, CP={WORLD_SIZE}: ring (inter-window KV ranks) per engine build"]
    mismatches = []
    for mode, reports in ranks.items():
        for rank, report in enumerate(reports):
            assert report["rank"] == rank and report["device"] == "npu"
            for engine, build in report["engines"].items():
                got = observed(build)
                table.append(f"  {mode:<14} rank {rank}  {engine:<30} {got.get('error') or got['ring_state']}")
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
