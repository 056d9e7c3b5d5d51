"""The simulated torch_npu knows which torch it runs on: compute mode refuses an untested torch, unless told to try,
and the stand-in reports a version that follows the installed torch, as a real torch_npu's does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from helpers import clean_env, run_in_session

from npu_shim.testing import simulated_npu_env

CHILD = Path(__file__).with_name("torch_version_child.py")
RELEASE = torch.__version__.partition("+")[0]  # the installed torch, 2.13.x in every environment of the matrix


def import_on(torch_version: str, **env: str) -> tuple[dict, str]:
    environment = simulated_npu_env(clean_env(TORCH_DEVICE_BACKEND_AUTOLOAD="0", **env), compute=True)
    run = run_in_session([sys.executable, str(CHILD), torch_version], environment, None, 300)
    assert run.returncode == 0, run.stderr
    return run.report, run.stderr


def test_the_installed_torch_is_the_tested_one_and_the_stand_in_follows_it():
    report, stderr = import_on(str(torch.__version__))
    assert report["import"] == ["ran", f"{RELEASE}+npu_shim.simulated"], "torch's release, marked as simulated"
    assert report["computes"] == 6.0
    assert "NPU_SHIM_SIM_ANY_TORCH" not in stderr


@pytest.mark.parametrize("other", ["2.14.0+cpu", "2.12.1", "3.0.0a0+git1234"])
def test_compute_mode_refuses_a_torch_it_is_not_tested_on(other):
    report, _ = import_on(other)
    kind, message = report["import"]
    assert kind == "RuntimeError"
    assert f"tested on torch 2.13.x and builds on torch's private APIs; this is torch {other}" in message
    assert "set NPU_SHIM_SIM_ANY_TORCH=1" in message


def test_a_variable_tries_another_torch_with_a_warning():
    report, stderr = import_on("2.14.0+cpu", NPU_SHIM_SIM_ANY_TORCH="1")
    assert report["import"] == ["ran", "2.14.0+npu_shim.simulated"], "the version follows the torch it runs on"
    assert report["computes"] == 6.0
    assert "this is torch 2.14.0+cpu: trying it anyway (NPU_SHIM_SIM_ANY_TORCH is on)" in stderr
