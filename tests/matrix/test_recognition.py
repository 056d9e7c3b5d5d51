"""``npu_shim/known_code.json`` against this release's own files, and a verl with one function patched.

Every Python the shim supports reads the installed files (nothing of verl runs there) and must give
the fingerprints the table holds for this release: a table that forgets the release, or a
fingerprint that depends on the Python, fails. A copy of the installed verl with one function
edited, as images and forks carry local patches, must be named as code the shim does not know.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, clean_env, doctor, pyenv_python

from npu_shim.recognition import known_code
from simulated_npu import simulated_npu_env

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
INSTALLED = Path(next(iter(importlib.util.find_spec("verl").submodule_search_locations)))

FINGERPRINT_FILES = """
import json, sys
sys.path.insert(0, {root!r})
from npu_shim.fingerprint import source_fingerprint
result = {{}}
for source, path in json.load(sys.stdin).items():
    text = open(path, encoding="utf-8").read() if path else None
    result[source] = None if text is None else source_fingerprint(text, source.partition(":")[2])
print(json.dumps(result))
"""


def installed_file(source: str) -> str | None:
    path = INSTALLED.parent / source.partition(":")[0]
    return str(path) if path.is_file() else None


@pytest.mark.parametrize("version", ["3.10.13", "3.11.7", "3.12.1", "3.13.0"])
def test_the_table_holds_this_releases_functions_as_every_python_reads_them(version):
    table = known_code()
    forgotten = [source for source, by_release in table.items() if VERL not in by_release]
    assert not forgotten, f"known_code.json has no verl {VERL} for {forgotten}: run scripts/fingerprints.py"
    completed = subprocess.run(
        [str(pyenv_python(version)), "-c", FINGERPRINT_FILES.format(root=str(ROOT))],
        input=json.dumps({source: installed_file(source) for source in table}),
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(completed.stdout) == {source: by_release[VERL] for source, by_release in table.items()}


# -- a verl 0.7.1 with one function patched ---------------------------------------------------------

FORWARD_FILE = INSTALLED / "workers" / "engine" / "megatron" / "transformer_impl.py"
PATCHED_FUNCTION = "MegatronEngineWithValueHead.forward_step"
REPORT = """
import json, sys
import verl.workers.engine
print(json.dumps({o.fix: [o.verdict, o.reason] for o in sys.modules["npu_shim.hook"].outcomes}))
"""
needs_5870 = pytest.mark.skipif(VERL != "0.7.1", reason="#5870 is missing from verl 0.7.1 only")


def with_a_statement_added(source: str, qualname: str) -> str:
    """``source`` with ``pass`` added at the top of ``qualname``'s body: a one-line local patch."""
    body = ast.parse(source).body
    for name in qualname.split("."):
        node = next(n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name)
        body = node.body
    first = body[0]
    lines = source.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + "pass  # a local patch\n")
    return "".join(lines)


@pytest.fixture(scope="module")
def patched_verl(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a process whose verl is the installed one with ``forward_step`` patched."""
    site = tmp_path_factory.mktemp("patched-verl")
    shutil.copytree(INSTALLED, site / "verl", ignore=shutil.ignore_patterns("__pycache__"))
    patched = site / "verl" / FORWARD_FILE.relative_to(INSTALLED)
    patched.write_text(with_a_statement_added(FORWARD_FILE.read_text(encoding="utf-8"), PATCHED_FUNCTION))
    return simulated_npu_env(clean_env([site, ROOT]))


@needs_5870
def test_a_patched_verl_is_named_and_left_as_it_ships_with_one_warning(patched_verl):
    completed = subprocess.run(
        [sys.executable, "-c", REPORT], env=patched_verl, capture_output=True, text=True, timeout=300, check=True
    )
    outcomes = json.loads(completed.stdout.strip().splitlines()[-1])
    verdict, reason = outcomes["megatron_critic"]
    assert verdict == "unrecognised"
    assert reason.startswith(f"{PATCHED_FUNCTION} is not the code of verl 0.7.1 (a local patch?)")
    assert "unexpected keyword argument 'enable_mtp'" in reason
    warnings = [line for line in completed.stderr.splitlines() if "npu_shim did not apply megatron_critic" in line]
    assert len(warnings) == 1, completed.stderr
    assert outcomes["value_engine"][0] == "applied"  # the rest of the shim works as on 0.7.1


def _doctor(env: dict[str, str]) -> dict[str, Any]:
    run = doctor(env, ROOT.parent)
    return {**run.report, "_returncode": run.status}


@needs_5870
def test_the_doctor_shows_a_patched_verl_as_a_problem_for_the_critic(patched_verl):
    report = _doctor(patched_verl)
    fixes = {row["fix"]: row["verdict"] for row in report["fixes"]}
    assert fixes["megatron_critic"] == "unrecognised"
    assert report["unrecognised"] == [{"fix": "megatron_critic", "breaks_critic": True}]
    # The critic's engine resolves, but its first value forward would raise: a problem all the same.
    assert report["value_model_megatron_resolves"] is True
    assert (report["status"], report["exit_code"], report["_returncode"]) == ("problem", 1, 1)
    unpatched = _doctor(simulated_npu_env(clean_env([ROOT])))
    assert unpatched["unrecognised"] == []
    assert (unpatched["status"], unpatched["_returncode"]) == ("ok", 0)
    others = {fix: verdict for fix, verdict in fixes.items() if fix != "megatron_critic"}
    assert others == {row["fix"]: row["verdict"] for row in unpatched["fixes"] if row["fix"] != "megatron_critic"}
