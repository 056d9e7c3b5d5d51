"""The README's main job: verl 0.7.1 on a SIMULATED Ascend NPU, without and with npu_shim.

Run it with ``make demo`` (builds the verl 0.7.1 environment on first use). Fresh
interpreters run tests/matrix/probe.py without the shim and with the checkout on
PYTHONPATH (the container set-up): one gloo rank each, then two ranks each with
context parallelism 2. They build verl's Megatron critic and actor engines for
real, with real megatron-core; the NPU is simulated_npu's stand-in torch_npu,
and MindSpeed its stand-in, which records each ``repatch`` and, as MindSpeed does,
builds the context-parallel ring only if that repatch came before Megatron's
parallel state. Two more train verl's critic and actor with the simulated NPU computing
(tests/matrix/train_probe.py): values, then verl's value loss before and after the steps; and two
pairs of ranks train the actor with context parallelism 2, where MindSpeed's ring attention runs only if
its ring was built, compared with the one-rank actor's log-probs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests" / "matrix"))  # probe.py: runs verl under one activation and reports

import probe  # noqa: E402
import train_probe  # noqa: E402


def ring_line(ranks: list[dict[str, Any]], engine: str) -> str:
    builds = [report["engines"][f"{engine}/defaults"] for report in ranks]
    if "error" in builds[0]:
        return "not built: " + builds[0]["error"].split(":", 1)[0]
    rings = {str(build["ring_state"]["inter_window_kv"]) for build in builds}
    if rings == {"None"}:
        return "built, NO ring: repatch came after the mesh"
    return f"built, ring {' / '.join(sorted(rings))} on both ranks"


def engine_line(engine: dict[str, Any]) -> str:
    if "error" in engine:
        return "not built: " + engine["error"].split(":", 1)[0]
    timing = ["after" if call["parallel_state_initialized"] else "before" for call in engine["repatch_calls"]]
    return f"built; repatch x{len(timing)}, {'/'.join(timing) or '-'} parallel state"


def critic_step_line(report: dict[str, Any]) -> str:
    critic = report["roles"]["critic"]
    if critic["error"]:
        where = "not built" if critic["stage"] == "build" else f"failed at {critic['stage']}"
        return f"{where}: {critic['error'].split(':', 1)[0]}"
    first, *_, last = critic["losses"]
    values = f"values on {critic['output_device']}, {critic['max_abs_diff']:.4f} from the reference"
    return f"{values}; loss {first:.3f} -> {last:.3f}"


def actor_cp_line(ranks: list[dict[str, Any]], one_rank: dict[str, Any]) -> str:
    actor = ranks[0]["layouts"]["cp2"]["actor"]
    if actor["error"]:
        kind, _, message = actor["error"].partition(": ")
        if message.startswith("Context parallel ranks for ring"):  # MindSpeed's, from its CP attention's forward
            return f"fails at its first forward: {kind} (MindSpeed's ring not initialized)"
        return f"failed at {actor['stage']}: {kind}"
    reference = one_rank["roles"]["actor"]["outputs_before"]
    pairs = zip(actor["outputs_before"], reference, strict=True)
    difference = max(abs(a - b) for row, other in pairs for a, b in zip(row, other, strict=True))
    first, *_, last = actor["losses"]
    return f"log-probs {difference:.4f} from one rank's; loss {first:.3f} -> {last:.3f}"


def rows(report: dict[str, Any]) -> list[str]:
    value = report["value_model"]
    resolved = value["error"].split(":", 1)[0] + " (below)" if "error" in value else value["class"].rsplit(".", 1)[1]
    if value.get("added_by_npu_shim"):
        resolved += " (npu_shim)"
    lm = report["engines"]["language_model/defaults"]
    return [
        resolved,
        engine_line(report["engines"]["value_model/defaults"]),
        engine_line(lm),
        "unchanged" if lm.get("user_config_unchanged") else f"written: {lm.get('user_config_after')}",
        "unchanged" if report["verl_digest_before"] == report["verl_digest_after"] else "CHANGED",
    ]


CRITIC_STEPS = 3


def main() -> int:
    print("npu_shim demo: verl 0.7.1 from PyPI, real megatron-core, gloo ranks on this CPU.")
    print("The Ascend NPU is SIMULATED (simulated_npu's stand-ins for torch_npu and MindSpeed).")
    print("Building both engines, then training them, without and with the shim (each run in fresh interpreters) ...\n")
    modes = ("none", "sitecustomize")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        one_rank = {
            mode: [(probe.start(mode, directory / f"{mode}.json"), directory / f"{mode}.json")] for mode in modes
        }
        if not (reports := collect(one_rank)):
            return 1
        cp_ranks = {mode: probe.start_ranks(mode, directory) for mode in modes}
        if not (cp_reports := collect(cp_ranks)):
            return 1
        options = ("--steps", str(CRITIC_STEPS))
        outputs = {mode: directory / f"train-{mode}.json" for mode in modes}
        training = {mode: [(train_probe.start(mode, outputs[mode], *options), outputs[mode])] for mode in modes}
        if not (trained := collect(training)):
            return 1
        actor_cp = {
            mode: train_probe.start_ranks(mode, directory, "cp2", "--roles", "actor", *options) for mode in modes
        }
        if not (actor_cp_reports := collect(actor_cp)):
            return 1
    labels = [
        'get_engine_cls("value_model", "megatron")',
        "critic: EngineRegistry.new(value_model)",
        "actor: EngineRegistry.new(language_model)",
        "actor: user's override_transformer_config",
        "verl's files on disk",
        "critic, CP=2 on 2 ranks: MindSpeed's ring",
        "actor, CP=2 on 2 ranks: MindSpeed's ring",
        f"critic: {CRITIC_STEPS} PPO steps (value loss)",
        f"actor, CP=2 on 2 ranks: {CRITIC_STEPS} PPO steps",
    ]
    before, after = (
        [
            *rows(reports[mode][0]),
            *(ring_line(cp_reports[mode], engine) for engine in ("value_model", "language_model")),
            critic_step_line(trained[mode][0]),
            actor_cp_line(actor_cp_reports[mode], trained[mode][0]),
        ]
        for mode in modes
    )
    reports = {mode: runs[0] for mode, runs in reports.items()}
    width = [max(map(len, column)) for column in (labels, before)]
    corner = f"device verl sees: {reports['none']['device']}"
    print(f"{corner:<{width[0]}}  {'without npu_shim':<{width[1]}}  with npu_shim")
    print(f"{'-' * width[0]}  {'-' * width[1]}  {'-' * max(map(len, after))}")
    for label, old, new in zip(labels, before, after, strict=True):
        print(f"{label:<{width[0]}}  {old:<{width[1]}}  {new}")
    print(f"\nWithout the shim, verl says: {reports['none']['value_model'].get('error')}")
    print("\nWith the shim: activated through sitecustomize on PYTHONPATH; verdicts:")
    for outcome in reports["sitecustomize"]["outcomes"]:
        print(f"  {outcome['fix']:<24} {outcome['verdict']:<15} {outcome['reason']}")
    return 0


def collect(children: dict[str, list[tuple[subprocess.Popen[str], Path]]]) -> dict[str, list[dict[str, Any]]]:
    """mode -> the reports of its processes; empty if one failed (said on stderr)."""
    reports: dict[str, list[dict[str, Any]]] = {}
    flat = {(mode, index): child for mode, runs in children.items() for index, (child, _) in enumerate(runs)}
    finished = probe.finish(flat, timeout=900)
    for mode, runs in children.items():
        for index, (_, output) in enumerate(runs):
            status, stderr = finished[(mode, index)]
            if status != 0:
                print(f"the {mode!r} run failed:\n{stderr}", file=sys.stderr)
                return {}
            reports.setdefault(mode, []).append(json.loads(output.read_text()))
    return reports


if __name__ == "__main__":
    sys.exit(main())
