"""tests/conftest.py's guard catches a test module that changes the pytest process by being imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, clean_env

CHANGED = "the pytest process is no longer as pytest started"
# What a careless test module does at its top: `import npu_shim` activates the shim and rewrites PYTHONPATH.
CHANGES = {
    "activates the shim": f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport npu_shim\n",
    "rewrites PYTHONPATH": 'import os\nos.environ["PYTHONPATH"] = "/somewhere"\n',
}


def pytest_on(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(directory)],
        env=clean_env(),
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def suite(tmp_path: Path, change: str, test: str) -> Path:
    directory = tmp_path / "suite"
    directory.mkdir()
    (directory / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (directory / "test_careless.py").write_text(CHANGES[change] + "\nimport pytest\n\n" + test)
    return directory


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_test_module_whose_import_changes_the_process_fails_its_tests(tmp_path, change):
    completed = pytest_on(suite(tmp_path, change, "def test_innocent():\n    pass\n"))
    assert completed.returncode == 1, completed.stdout
    assert "1 error" in completed.stdout
    assert f"{CHANGED} (shim activated via, PYTHONPATH) before this test ran" in completed.stdout


@pytest.mark.parametrize("change", list(CHANGES))
def test_the_change_fails_the_session_even_when_no_test_ran_after_it(tmp_path, change):
    completed = pytest_on(suite(tmp_path, change, "@pytest.mark.skip\ndef test_skipped():\n    pass\n"))
    assert "1 skipped" in completed.stdout
    assert completed.returncode == 1
    assert f"{CHANGED} (shim activated via, PYTHONPATH) at the end of the session" in completed.stderr


def test_a_suite_that_changes_nothing_passes(tmp_path):
    directory = tmp_path / "suite"
    directory.mkdir()
    (directory / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    # importing a module of ours by its full name activates nothing
    importing_a_module = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport npu_shim.settings\n"
    (directory / "test_careful.py").write_text(importing_a_module + "\n\ndef test_reads_a_constant():\n    pass\n")
    completed = pytest_on(directory)
    assert (completed.returncode, completed.stderr) == (0, ""), completed.stdout
