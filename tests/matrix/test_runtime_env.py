"""``npu-shim runtime-env``: the JSON for ``ray job submit`` and verl's Hydra override are one dict.

verl parses ``+ray_kwargs.ray_init.runtime_env=...`` with Hydra into an OmegaConf
config (hydra-core and omegaconf come with verl, hence this runs in the matrix).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from helpers import ROOT, clean_env


def runtime_env(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "npu_shim", "runtime-env", *args],
        env=clean_env([ROOT]),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def parse_with_hydra(override: str) -> object:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    parsed = OverridesParser.create().parse_override(override)
    assert parsed.key_or_group == "ray_kwargs.ray_init.runtime_env"
    config = OmegaConf.create({"runtime_env": parsed.value()})
    unresolved = OmegaConf.to_container(config)["runtime_env"]  # what verl passes to ray.init
    assert OmegaConf.to_container(config, resolve=True)["runtime_env"] == unresolved  # verl resolves it later
    return unresolved


@pytest.mark.parametrize("modules", ["", "my_plugin"])
def test_the_verl_override_parses_to_the_json_dict(modules):
    printed = runtime_env("--route", "VERL_USE_EXTERNAL_MODULES").splitlines()
    as_json = json.loads(runtime_env("--json", "--route", "VERL_USE_EXTERNAL_MODULES"))
    assert as_json == {"env_vars": {"VERL_USE_EXTERNAL_MODULES": "npu_shim"}}
    submit = next(line for line in printed if line.startswith("--runtime-env-json="))
    assert json.loads(shlex.split(submit)[0].split("=", 1)[1]) == as_json
    override = shlex.split(printed[-1])[0]
    assert parse_with_hydra(override) == as_json
    # A user's own modules kept: the dict the helper returns spelled as an override parses back to itself.
    from npu_shim.propagation import hydra_override, verl_modules_runtime_env

    given = {"env_vars": {"VERL_USE_EXTERNAL_MODULES": modules}} if modules else None
    merged = verl_modules_runtime_env(given)
    assert merged["env_vars"]["VERL_USE_EXTERNAL_MODULES"] == ",".join(filter(None, [modules, "npu_shim"]))
    assert parse_with_hydra(hydra_override(merged)) == merged


def test_the_pythonpath_route_has_json_and_explains_why_it_has_no_override():
    printed = runtime_env("--route", "PYTHONPATH")
    assert json.loads(runtime_env("--json", "--route", "PYTHONPATH")) == {
        "env_vars": {"PYTHONPATH": f"{ROOT}:${{PYTHONPATH}}"}
    }
    assert "none for this route" in printed.splitlines()[-1]
