"""The simulated torch_npu knows which torch it runs on: compute mode refuses a torch it is not tested on (2.10 and
2.13 are), unless told to try, with its own message as the last line even where torch loads it, and the stand-in
reports a version that follows the installed torch, as a real torch_npu's does."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from helpers import clean_env, run_in_session

from simulated_npu import SIMULATED_DIR, simulated_npu_env

CHILD = Path(__file__).with_name("torch_version_child.py")
AUTOLOAD_CHILD = Path(__file__).with_name("autoload_refusal_child.py")
RELEASE = torch.__version__.partition("+")[0]  # the installed torch: 2.13.x on Python 3.11, 2.10.x on 3.12
SUPPORTED = "tested on torch 2.10.x or 2.13.x and builds on torch's private APIs"


def import_on(torch_version: str, **env: str) -> tuple[dict, str]:
    environment = simulated_npu_env(clean_env(TORCH_DEVICE_BACKEND_AUTOLOAD="0", **env), compute=True)
    run = run_in_session([sys.executable, str(CHILD), torch_version], environment, None, 300)
    assert run.returncode == 0, run.stderr
    return run.report, run.stderr


def test_the_installed_torch_is_a_tested_one_and_the_stand_in_follows_it():
    report, stderr = import_on(str(torch.__version__))
    assert report["import"] == ["ran", f"{RELEASE}+simulated"], "torch's release, marked as simulated"
    assert report["computes"] == 6.0
    assert "NPU_SHIM_SIM_ANY_TORCH" not in stderr


@pytest.mark.parametrize("tested", ["2.10.0+cu128", "2.10.1", "2.13.0+cpu", "2.13.2"])
def test_compute_mode_takes_each_tested_torch_and_the_version_follows_it(tested):
    report, stderr = import_on(tested)
    assert report["import"] == ["ran", f"{tested.partition('+')[0]}+simulated"]
    assert "NPU_SHIM_SIM_ANY_TORCH" not in stderr


# 2.9 is the torch of verl's v0.8.0 image: no CPU build of it installs on this machine kind (docs/testing.md)
@pytest.mark.parametrize("other", ["2.14.0+cpu", "2.12.1", "2.11.0", "2.9.0", "3.0.0a0+git1234"])
def test_compute_mode_refuses_a_torch_it_is_not_tested_on(other):
    report, _ = import_on(other)
    kind, message = report["import"]
    assert kind == "RuntimeError"
    assert f"{SUPPORTED}; this is torch {other}" in message
    assert "Install torch 2.10.x or 2.13.x, or set NPU_SHIM_SIM_ANY_TORCH=1" in message


def version_check() -> ModuleType:
    """The stand-in's version check (standard library only), from the kit installed here, torch_npu not imported."""
    spec = importlib.util.spec_from_file_location(
        "torch_version_check", Path(SIMULATED_DIR, "torch_npu", "_torch_version.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A real torch_npu is built for one torch release and refuses the others: the stand-in refuses every patch release of
# a torch it is not tested on, not only the first (the kit's metadata says the same: tests/unit/test_distributions.py).
@pytest.mark.parametrize("other", ["2.11.0", "2.11.3", "2.11.9+cpu", "2.12.0", "2.12.1", "2.12.9+cu128"])
def test_every_patch_release_of_an_untested_torch_is_refused(monkeypatch, other):
    monkeypatch.delenv("NPU_SHIM_SIM_ANY_TORCH", raising=False)
    gate = version_check()
    with pytest.raises(gate.UnsupportedTorch, match=re.escape(f"{SUPPORTED}; this is torch {other}.")):
        gate.check(other)


def test_where_torch_loads_the_kit_the_refusal_is_the_last_line_not_torchs_autoload_error():
    environment = simulated_npu_env(clean_env(), compute=True)  # torch's autoload on, as users have it
    run = run_in_session([sys.executable, str(AUTOLOAD_CHILD)], environment, None, 300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "torch imported" not in run.stdout
    last = run.stderr.strip().splitlines()[-1]
    assert f"tested on torch 0.1.x and builds on torch's private APIs; this is torch {torch.__version__}" in last
    assert last.endswith("Install torch 0.1.x, or set NPU_SHIM_SIM_ANY_TORCH=1 to try it on this torch"), run.stderr
    assert "Failed to load the backend extension" not in run.stderr


def test_a_variable_tries_another_torch_with_a_warning():
    report, stderr = import_on("2.14.0+cpu", NPU_SHIM_SIM_ANY_TORCH="1")
    assert report["import"] == ["ran", "2.14.0+simulated"], "the version follows the torch it runs on"
    assert report["computes"] == 6.0
    assert "this is torch 2.14.0+cpu: trying it anyway (NPU_SHIM_SIM_ANY_TORCH is on)" in stderr
