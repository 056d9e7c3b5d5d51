"""verl's plugin route: the shim pip-installed, no variable set, on real verl (tests/matrix/plugin_route_child.py).

From verl 0.9.0 ``import verl`` loads the ``verl.plugins`` entry points (``VERL_USE_EXTERNAL_PLUGINS=auto``, its
default), the installed shim's included: it is active in every process that imports verl, a Ray worker's too.
Before 0.9.0 verl never reads the group and the entry point does nothing. The shim is installed with pip into a
directory on PYTHONPATH beside the simulated NPU; the checkout is not on sys.path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import probe
import pytest
from helpers import shim_source

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
LOADS_PLUGINS = VERL.startswith("0.9")
CHILD = Path(__file__).with_name("plugin_route_child.py")
UNKNOWN_DEVICE = "AssertionError: Unknown device: npu for model_type: value_model and backend: megatron"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shim pip-installed (no build isolation: offline, with the environment's setuptools) into a directory."""
    directory = tmp_path_factory.mktemp("plugin")
    target = directory / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(shim_source(directory))],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert (target / "npu_shim" / "verl_plugin.py").is_file()
    return target


def run(site: Path, tmp_path: Path, *args: str, **variables: str) -> dict[str, Any]:
    env = {name: os.environ[name] for name in ("PATH", "HOME", probe.MINDSPEED_LINE_VARIABLE) if name in os.environ}
    env = probe.testing_kit().simulated_npu_env(env)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(site)])
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", **variables)
    completed = subprocess.run(
        [sys.executable, str(CHILD), *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def assert_active_from(site: Path, result: dict[str, Any]) -> None:
    assert result["via"] == "verl.plugins"
    assert Path(result["origin"]).is_relative_to(site), result["origin"]  # the installed shim, not the checkout
    assert result["outcomes"] and "mindspeed_line_repatch" in result["outcomes"], result["outcomes"]
    assert result["engine"] == "MindspeedEngineWithValueHead"


def test_installed_and_no_variable_set(site, tmp_path):
    result = run(site, tmp_path)
    if LOADS_PLUGINS:
        assert_active_from(site, result)
        assert result["outcomes"]["mindspeed_line_repatch"] == "applied"
    else:  # nothing reads the entry point: verl as it ships, the critic's lookup failing as it does without the shim
        assert (result["via"], result["outcomes"], result["engine"]) == (None, None, UNKNOWN_DEVICE)


@pytest.mark.skipif(not LOADS_PLUGINS, reason=f"verl {VERL} loads no plugins: the test above shows it")
@pytest.mark.parametrize("policy", ["none", "some_other_plugin"])
def test_verls_plugin_policy_keeps_it_off(site, tmp_path, policy):
    result = run(site, tmp_path, VERL_USE_EXTERNAL_PLUGINS=policy)
    assert (result["via"], result["outcomes"]) == (None, None)


@pytest.mark.skipif(not LOADS_PLUGINS, reason=f"verl {VERL} loads no plugins: the test above shows it")
def test_verls_plugin_policy_naming_the_shim_loads_it(site, tmp_path):
    assert_active_from(site, run(site, tmp_path, VERL_USE_EXTERNAL_PLUGINS="some_other_plugin,npu_shim"))


@pytest.mark.skipif(not LOADS_PLUGINS, reason=f"verl {VERL} loads no plugins: the test above shows it")
def test_a_ray_worker_that_imports_verl_gets_it(site, tmp_path):
    result = run(site, tmp_path, "ray")
    assert result["driver_imported_npu_shim"] is False  # the driver never imported verl: only the worker has it
    assert_active_from(site, result)
