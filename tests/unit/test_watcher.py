"""The watcher takes over from npu_shim's bootstrap in sys.meta_path: in its place, and as the one watcher there.

Fresh interpreters from a clean environment; a fake ``megatron`` (no MegatronAdaptor installed) is the first import
the bootstrap hands over at. ``tests/unit/test_megatron_first.py`` checks the rest of that first import.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ROOT, clean_env, run_python

META_PATH = (
    "import json, sys\n"
    "print(json.dumps([getattr(finder, '__name__', type(finder).__name__) for finder in sys.meta_path]))\n"
)
# A finder some library put before npu_shim's bootstrap after start-up (an import hook of its own).
FOREIGN_FIRST = """
import sys

class Foreign:
    @staticmethod
    def find_spec(name, path=None, target=None):
        return None

sys.meta_path.insert(0, Foreign)
"""


def test_the_watcher_takes_the_bootstraps_place_not_the_first_one(tmp_path: Path) -> None:
    """At the first import of Megatron the import system is iterating over sys.meta_path: the watcher replaces the
    bootstrap where it is (same length, same order), behind a finder that came first, and does not move to the front."""
    (tmp_path / "megatron").mkdir()
    (tmp_path / "megatron" / "__init__.py").write_text("")
    before = run_python(FOREIGN_FIRST + META_PATH, clean_env([ROOT, tmp_path]), cwd=tmp_path).report
    after = run_python(FOREIGN_FIRST + "import megatron\n" + META_PATH, clean_env([ROOT, tmp_path]), cwd=tmp_path)
    assert before[:2] == ["Foreign", "sitecustomize"]
    assert after.report == ["Foreign", "npu_shim.watcher", *before[2:]]


def test_a_watcher_already_in_place_removes_any_bootstrap_beside_it(tmp_path: Path) -> None:
    """Be the one watcher in sys.meta_path: a bootstrap found beside it goes (else both would start what they wait
    for), and the watcher stays where it is."""
    code = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import npu_shim.watcher as watcher  # by its full name: activates nothing

class Bootstrap:  # what npu_shim's sitecustomize module looks like to the watcher
    npu_shim_waiting = ("verl", "megatron")
    @staticmethod
    def find_spec(name, path=None, target=None):
        return None

sys.meta_path.insert(0, watcher)
sys.meta_path.append(Bootstrap)
watcher.take_over()
"""
    run = run_python(code + META_PATH, clean_env(), cwd=tmp_path)
    assert run.report[0] == "npu_shim.watcher"
    assert run.report.count("npu_shim.watcher") == 1
    assert "Bootstrap" not in run.report


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("npu_shim", True),
        ("json,npu_shim", True),
        ("npu_shim,", True),
        (" npu_shim", False),  # verl imports " npu_shim", which fails: the shim is not named, the doctor says why
        ("json, npu_shim", False),
        ("NPU_SHIM", False),
        (None, False),
    ],
)
def test_verl_use_external_modules_names_npu_shim_only_as_verl_reads_it(value: str | None, named: bool) -> None:
    """Split on commas and nothing else, as verl imports each name: exactly as written."""
    from npu_shim.watcher import names_npu_shim  # by its full name: activates nothing

    assert names_npu_shim(value) is named
