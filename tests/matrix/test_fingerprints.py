"""The fixes' tables of known verl functions, against this release's own file.

Each supported Python compiles the installed ``transformer_impl.py`` (nothing of verl
runs) through ``scripts/fingerprints.py``. For each table, this release's function must be
known exactly when the table names this release, and unknown otherwise; a release without
the function must be named by no table of it.
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

from npu_shim.fingerprint import KnownCode
from npu_shim.fixes.batch_invariant_repatch import VERL_0_8_0
from npu_shim.fixes.lm_engine_repatch import KNOWN_INITS
from npu_shim.fixes.mindspeed_line_repatch import VERL_0_9

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


def defined(path: Path, qualname: str) -> bool:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    for name in qualname.split("."):
        node = next((n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name), None)
        if node is None:
            return False
        body = node.body
    return True


TABLES: dict[str, tuple[str, KnownCode]] = {
    "KNOWN_INITS": ("MindspeedEngineWithLMHead.__init__", KNOWN_INITS),
    "VERL_0_8_0": ("_mindspeed_repatch", VERL_0_8_0),
    "VERL_0_9": ("_mindspeed_repatch", VERL_0_9),
}
VERSIONS = sorted({version for _, table in TABLES.values() for version in table})


def names(releases: str) -> list[str]:
    return releases.split(", ")


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"py{v[0]}.{v[1]}")
@pytest.mark.parametrize("table_name", list(TABLES))
def test_a_table_knows_this_releases_function_exactly_when_it_names_this_release(table_name, version):
    function, table = TABLES[table_name]
    named = any(VERL in names(releases) for releases in table.get(version, {}).values())
    path = source_file()
    if not defined(path, function):
        assert not named, f"{table_name} names verl {VERL}, which has no {function}"
        return
    script = [str(ROOT / "scripts" / "fingerprints.py"), str(path), "--function", function, "--json"]
    completed = subprocess.run(
        [sys.executable, *script, "--python", interpreter(version)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    ((printed_version, by_file),) = json.loads(completed.stdout).items()
    assert printed_version == f"{version[0]}.{version[1]}"
    known = table.get(version, {}).get(by_file[path.name])
    assert (known is not None and VERL in names(known)) is named, (table_name, known)
    assert named or known is None, f"{table_name} takes verl {VERL}'s {function} for {known}'s"
