"""``python -m npu_shim``: the command line, without verl."""

from __future__ import annotations

import re
import shlex
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


def npu_shim_cli(*arguments: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_shim", *arguments],
        check=False,
        env=clean_env([ROOT], COLUMNS=str(columns)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_version_is_the_projects():
    # written once, in the package (pyproject.toml reads it there: test_distributions)
    source = (ROOT / "npu_shim" / "settings.py").read_text(encoding="utf-8")
    (version,) = re.findall(r'^VERSION = "(.+)"', source, re.M)
    result = npu_shim_cli("--version")
    assert (result.returncode, result.stdout) == (0, f"npu-shim {version}\n")


@pytest.mark.parametrize(
    ("arguments", "usage"),
    [
        (["doctor", "--bogus"], "usage: npu-shim doctor "),
        (["doctor", "--json", "--bogus", "extra"], "usage: npu-shim doctor "),
        (["runtime-env", "--bogus"], "usage: npu-shim runtime-env "),
        (["--bogus", "doctor"], "usage: npu-shim [-h]"),
    ],
)
def test_a_wrong_option_is_told_with_the_usage_of_the_command_it_was_given_to(arguments, usage):
    result = npu_shim_cli(*arguments)
    assert result.returncode == 2
    assert result.stderr.startswith(usage), result.stderr
    unknown = " ".join(argument for argument in arguments if argument not in ("doctor", "runtime-env", "--json"))
    assert result.stderr.endswith(f"error: unrecognized arguments: {unknown}\n"), result.stderr
    assert "Traceback" not in result.stderr


def test_the_bootstrap_dir_example_is_a_whole_line_to_copy():
    """At any terminal width the example command is one unbroken line of the help."""
    for columns in (40, 80, 200):
        lines = npu_shim_cli("bootstrap-dir", "--help", columns=columns).stdout.splitlines()
        assert '  export PYTHONPATH="$(python -m npu_shim bootstrap-dir)${PYTHONPATH:+:$PYTHONPATH}"' in lines, columns


@pytest.mark.parametrize(("route", "has_override"), [("PYTHONPATH", False), ("VERL_USE_EXTERNAL_MODULES", True)])
def test_runtime_env_offers_a_trainer_override_only_where_no_ray_expansion_is_needed(route, has_override):
    """verl resolves its whole config: a ``${PYTHONPATH}`` in an override fails there (tests/matrix parses them)."""
    result = npu_shim_cli("runtime-env", "--route", route)
    assert result.returncode == 0, result.stderr
    last = result.stdout.splitlines()[-1]
    if has_override:
        assert shlex.split(last)[0].startswith("+ray_kwargs.ray_init.runtime_env={"), last
    else:
        assert last.startswith("# none for this route (it needs Ray's ${PYTHONPATH} expansion)"), last
