"""``python -m npu_shim``: the command line, without verl."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT, clean_env


@pytest.mark.parametrize("command", [["bootstrap-dir"], ["doctor"], ["doctor", "--json"]])
def test_output_survives_a_reader_that_went_away(tmp_path, command):
    """``npu-shim doctor | head -1``: no BrokenPipeError traceback, and the command's own exit status."""
    child = subprocess.Popen(
        [sys.executable, "-m", "npu_shim", *command],
        env=clean_env([ROOT]),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    child.stdout.close()  # before the child writes anything: its first write meets a closed pipe
    stderr = child.stderr.read()
    child.wait(timeout=120)
    child.stderr.close()
    assert "Traceback" not in stderr
    assert "BrokenPipeError" not in stderr
    assert child.returncode == 0, stderr
