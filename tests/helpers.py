"""Shared helpers for the tests: run Python in a fresh interpreter from a clean environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BOOTSTRAP_DIR = ROOT / "npu_shim" / "bootstrap"
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))


def pyenv_python(version: str) -> Path:
    """The interpreter pyenv holds for ``version`` (e.g. "3.12.1"); the calling test is skipped if it is absent."""
    import pytest

    python = PYENV_ROOT / "versions" / version / "bin" / "python"
    if not python.exists():
        pytest.skip(f"pyenv has no Python {version} on this machine")
    return python


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> Any:
        """The JSON object the child printed on its last line of output."""
        lines = self.stdout.strip().splitlines()
        assert lines, f"no output; stderr:\n{self.stderr}"
        return json.loads(lines[-1])


def clean_env(pythonpath: Iterable[os.PathLike[str] | str] = (), **extra: str) -> dict[str, str]:
    """PATH and HOME only, so nothing of the test runner's environment leaks into the child."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
    entries = [os.fspath(entry) for entry in pythonpath]
    if entries:
        env["PYTHONPATH"] = os.pathsep.join(entries)
    env.update(extra)
    return env


def run_python(
    code: str,
    env: Mapping[str, str],
    *,
    args: Iterable[str] = (),
    cwd: os.PathLike[str] | str | None = None,
    timeout: float = 120,
    check: bool = True,
) -> Run:
    completed = subprocess.run(
        [sys.executable, *args, "-c", code],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    run = Run(completed.returncode, completed.stdout, completed.stderr)
    if check and run.returncode != 0:
        raise AssertionError(f"child exited {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}")
    return run
