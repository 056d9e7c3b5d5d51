"""The table of known functions in npu_shim.fixes.batch_invariant_repatch, against this release's own file.

Each supported Python compiles the installed ``transformer_impl.py`` (nothing of verl
runs) through ``scripts/fingerprints.py``: 0.8.0's ``_mindspeed_repatch`` must be in the
table for every version, and no other release's may be.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from npu_shim.fixes.batch_invariant_repatch import VERL_0_8_0

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))


def interpreter(version: tuple[int, int]) -> str:
    if sys.version_info[:2] == version:
        return sys.executable
    found = sorted(PYENV_ROOT.glob(f"versions/{version[0]}.{version[1]}.*/bin/python"))
    if not found:
        pytest.skip(f"no Python {version[0]}.{version[1]} on this machine (looked in {PYENV_ROOT}/versions)")
    return str(found[-1])


def source_file() -> Path:
    spec = importlib.util.find_spec("verl")
    return Path(next(iter(spec.submodule_search_locations))) / "workers/engine/mindspeed/transformer_impl.py"


def defines_mindspeed_repatch(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef) and node.name == "_mindspeed_repatch" for node in tree.body)


@pytest.mark.parametrize("version", sorted(VERL_0_8_0), ids=lambda v: f"py{v[0]}.{v[1]}")
def test_only_verl_0_8_0s_mindspeed_repatch_is_known(version):
    path = source_file()
    if not defines_mindspeed_repatch(path):
        assert VERL in ("0.6.1", "0.7.1")
        return
    script = [str(ROOT / "scripts" / "fingerprints.py"), str(path), "--function", "_mindspeed_repatch", "--json"]
    completed = subprocess.run(
        [sys.executable, *script, "--python", interpreter(version)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    ((printed_version, by_file),) = json.loads(completed.stdout).items()
    assert printed_version == f"{version[0]}.{version[1]}"
    assert (by_file[path.name] in VERL_0_8_0[version]) is (VERL == "0.8.0")
