"""The README's main job: verl 0.7.1 on a SIMULATED Ascend NPU, without and with npu_shim.

Run it with ``make demo`` (builds the verl 0.7.1 environment on first use). Two
fresh interpreters run tests/matrix/probe.py: one without the shim, one with the
checkout on PYTHONPATH (the container set-up). Each builds verl's Megatron critic
and actor engines for real, with real megatron-core on one gloo rank; the NPU is
npu_shim.testing's stand-in torch_npu, and MindSpeed is a stand-in whose
``repatch`` records when and with what it was called.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from npu_shim.testing import SIMULATED_DIR  # noqa: E402


def probe(mode: str, directory: Path) -> subprocess.Popen[str]:
    import os

    pythonpath = [str(ROOT), SIMULATED_DIR] if mode == "sitecustomize" else [SIMULATED_DIR]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "PYTHONPATH": os.pathsep.join(pythonpath),
    }
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "matrix" / "probe.py"), mode, str(directory / f"{mode}.json")],
        env=env,
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def engine_line(engine: dict[str, Any]) -> str:
    if "error" in engine:
        return "not built: " + engine["error"].split(":", 1)[0]
    timing = ["after" if call["parallel_state_initialized"] else "before" for call in engine["repatch_calls"]]
    return f"built; repatch x{len(timing)}, {'/'.join(timing) or '-'} parallel state"


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


def main() -> int:
    print("npu_shim demo: verl 0.7.1 from PyPI, real megatron-core, one gloo rank on this CPU.")
    print("The Ascend NPU is SIMULATED (npu_shim.testing's stand-in torch_npu; MindSpeed is a recording stand-in).")
    print("Building both engines without and with the shim (two interpreters, ~20-60 s) ...\n", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        children = {mode: probe(mode, directory) for mode in ("none", "sitecustomize")}
        reports = {}
        for mode, child in children.items():
            _, stderr = child.communicate(timeout=900)
            if child.returncode != 0:
                print(f"the {mode!r} run failed:\n{stderr}", file=sys.stderr)
                return 1
            reports[mode] = json.loads((directory / f"{mode}.json").read_text())
    labels = [
        'get_engine_cls("value_model", "megatron")',
        "critic: EngineRegistry.new(value_model)",
        "actor: EngineRegistry.new(language_model)",
        "actor: user's override_transformer_config",
        "verl's files on disk",
    ]
    before, after = rows(reports["none"]), rows(reports["sitecustomize"])
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


if __name__ == "__main__":
    sys.exit(main())
