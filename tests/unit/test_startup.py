"""Start-up: laziness, propagation to child interpreters, the installed bootstrap, sitecustomize chaining."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import BOOTSTRAP_DIR, ROOT, SHIM_VIA, clean_env, run_python

HEAVY = ("wrapt", "torch", "verl", "megatron", "mindspeed", "logging", "npu_shim.hook")
LOADED = f"import sys, json; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
ACTIVE = f"import sys; print({SHIM_VIA})"


def test_an_interpreter_that_never_imports_verl_loads_nothing_heavy(tmp_path):
    env = clean_env([ROOT])
    assert run_python(LOADED, env, cwd=tmp_path).stdout.strip() == "[]"
    assert run_python(ACTIVE, env, cwd=tmp_path).stdout.strip() == "sitecustomize"
    # Other imports pass the watcher by.
    code = "import json, email.parser, sqlite3\n" + LOADED
    assert run_python(code, env, cwd=tmp_path).stdout.strip() == "[]"


def test_import_npu_shim_alone_loads_nothing_heavy(tmp_path):
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import npu_shim\n" + LOADED
    assert run_python(code, clean_env(), cwd=tmp_path).stdout.strip() == "[]"


STATE = f"""
import json, os, sys
print(json.dumps([{SHIM_VIA}, os.environ.get("PYTHONPATH"),
                  any(hasattr(f, "npu_shim_waiting") for f in sys.meta_path)]))
"""


@pytest.mark.parametrize(
    "imports",
    [
        "from npu_shim.doctor.command import main",
        "import npu_shim.settings",
        "from npu_shim.fixes.shared_repatch import mindspeed_repatch",
        "import importlib; importlib.import_module('npu_shim.settings')",
    ],
)
def test_importing_a_module_of_npu_shim_by_its_name_activates_nothing(tmp_path, imports):
    """The doctor, or the fixes' constants: a test process (or a user's CI) keeps its baseline without the shim."""
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{imports}\n" + STATE
    assert json.loads(run_python(code, clean_env(["/mine"]), cwd=tmp_path).stdout) == [None, "/mine", False]


@pytest.mark.parametrize(
    ("imports", "via"),
    [
        ("import npu_shim", "import"),
        ("from npu_shim import settings", "import"),  # imports the package first: the route
        ("import npu_shim.settings\nimport npu_shim", None),  # the package was already loaded, inactive
        ("import npu_shim.settings\nimport npu_shim\nnpu_shim.activate()", "import"),
    ],
)
def test_importing_the_package_is_the_route(tmp_path, imports, via):
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{imports}\n" + STATE
    assert json.loads(run_python(code, clean_env(), cwd=tmp_path).stdout)[::2] == [via, via is not None]


def test_import_puts_the_bootstrap_dir_first_on_pythonpath_once(tmp_path):
    code = f"""
    import importlib, os, sys; sys.path.insert(0, {str(ROOT)!r})
    import npu_shim
    importlib.reload(npu_shim)
    from npu_shim.propagation import propagate; propagate()
    print(os.environ["PYTHONPATH"])
    """
    env = clean_env(["/first", str(BOOTSTRAP_DIR), "/second", str(ROOT)])
    out = run_python(textwrap.dedent(code), env, cwd=tmp_path).stdout.strip()
    # From a checkout the directory to propagate is the checkout (its sitecustomize.py); the checkout's
    # npu_shim_bootstrap would activate nothing there (npu_shim is not installed), so it goes.
    assert out.split(os.pathsep) == [str(ROOT), "/first", "/second"]


def test_propagation_can_be_turned_off(tmp_path):
    code = f"import os, sys; sys.path.insert(0, {str(ROOT)!r}); import npu_shim; print(os.environ.get('PYTHONPATH'))"
    env = clean_env(["/first"], NPU_SHIM_PROPAGATE="0")
    assert run_python(code, env, cwd=tmp_path).stdout.strip() == "/first"


CHILD_RESOLVES = """
from verl.workers.engine import EngineRegistry
import npu_shim
print(EngineRegistry.get_engine_cls("value_model", "megatron").__name__, npu_shim.activated_via())
"""


@pytest.mark.parametrize("how", ["subprocess", "multiprocessing-spawn"])
def test_children_started_after_import_npu_shim_are_covered(synthetic, tmp_path, how):
    tree = synthetic("0.7.1")
    if how == "subprocess":
        start = (
            f"print(subprocess.run([sys.executable, '-c', {CHILD_RESOLVES!r}], capture_output=True, text=True).stdout)"
        )
    else:
        start = "ctx = multiprocessing.get_context('spawn'); p = ctx.Process(target=child.run); p.start(); p.join()"
    (tmp_path / "child.py").write_text(f"def run():\n    exec({CHILD_RESOLVES!r}, {{}})\n")
    code = f"""
    import multiprocessing, subprocess, sys
    sys.path.insert(0, {str(ROOT)!r})
    import npu_shim
    import child
    if __name__ == "__main__":
        {start}
    """
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(code))
    out = subprocess.run(
        [sys.executable, str(script)], env=clean_env([tree]), cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["MindspeedEngineWithValueHead", "sitecustomize"]


def test_installed_package_ships_a_bootstrap_dir(installed_shim, synthetic, tmp_path):
    _, site = installed_shim
    out = subprocess.run(
        [sys.executable, "-m", "npu_shim", "bootstrap-dir"],
        env=clean_env([site]),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == str(site / "npu_shim_bootstrap")
    run = run_python(CHILD_RESOLVES, clean_env([out, site, synthetic("0.7.1")]), cwd=tmp_path)
    assert run.stdout.split() == ["MindspeedEngineWithValueHead", "sitecustomize"]


@pytest.mark.parametrize("cwd", ["checkout", "elsewhere"])
def test_bootstrap_dir_names_the_installed_shim_from_any_directory(installed_shim, tmp_path, cwd):
    """`python -m` puts the current directory first on sys.path; workers started elsewhere do not see it."""
    _, site = installed_shim
    out = subprocess.run(
        [sys.executable, "-m", "npu_shim", "bootstrap-dir"],
        env=clean_env([site]),
        cwd=ROOT if cwd == "checkout" else tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == f"{site / 'npu_shim_bootstrap'}\n"


def test_a_checkout_that_is_not_installed_propagates_the_checkout(synthetic, tmp_path):
    code = "from npu_shim.propagation import bootstrap_dir; print(bootstrap_dir())"
    out = run_python(code, clean_env([ROOT]), cwd=tmp_path).stdout
    assert out.strip() == str(ROOT)
    run = run_python(CHILD_RESOLVES, clean_env([out.strip(), synthetic("0.7.1")]), cwd=tmp_path)
    assert run.stdout.split() == ["MindspeedEngineWithValueHead", "sitecustomize"]
    # Its npu_shim_bootstrap is an installed shim's entry point: without npu_shim on sys.path it does nothing.
    assert run_python(ACTIVE, clean_env([BOOTSTRAP_DIR]), cwd=tmp_path).stdout.strip() == "None"


@pytest.fixture
def user_sitecustomize(tmp_path):
    """A container's own sitecustomize.py: appends a marker line to a file each time it runs."""
    directory = tmp_path / "user-site"
    directory.mkdir()
    marker = tmp_path / "marker.txt"
    (directory / "sitecustomize.py").write_text(
        "import sys\n"
        f"open({str(marker)!r}, 'a').write('ran shim_active=%s\\n' % ({SHIM_VIA} is not None))\n"
        "USER_SITECUSTOMIZE = True\n"
    )
    return directory, marker


@pytest.mark.parametrize(
    "ours",
    [[ROOT], [BOOTSTRAP_DIR, ROOT], [ROOT, ROOT], [ROOT, BOOTSTRAP_DIR], [BOOTSTRAP_DIR, ROOT, BOOTSTRAP_DIR]],
    ids=["checkout", "bootstrap-dir", "checkout-twice", "checkout-and-bootstrap", "bootstrap-twice"],
)
def test_a_later_sitecustomize_runs_once_after_the_shim(user_sitecustomize, tmp_path, ours):
    directory, marker = user_sitecustomize
    code = "import sitecustomize; print(getattr(sitecustomize, 'USER_SITECUSTOMIZE', False)); " + ACTIVE
    out = run_python(code, clean_env([*ours, directory]), cwd=tmp_path).stdout.split()
    assert out == ["True", "sitecustomize"]
    assert marker.read_text() == "ran shim_active=True\n"


def test_an_error_in_the_later_sitecustomize_is_reported_as_python_would(user_sitecustomize, tmp_path):
    directory, _ = user_sitecustomize
    (directory / "sitecustomize.py").write_text("raise ValueError('broken container customisation')\n")
    run = run_python(ACTIVE, clean_env([ROOT, directory]), cwd=tmp_path)
    assert run.stdout.strip() == "sitecustomize"
    assert run.stderr == (
        "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nValueError: broken container customisation\n"
    )


@pytest.mark.parametrize("flag", ["-E", "-I", "-S"])
def test_python_flags_that_skip_pythonpath_or_site_leave_the_shim_off(tmp_path, flag):
    assert run_python(ACTIVE, clean_env([ROOT]), args=(flag,), cwd=tmp_path).stdout.strip() == "None"


def test_ray_runtime_env_puts_the_bootstrap_dir_first_and_keeps_the_rest(tmp_path):
    code = f"""
    import json, sys; sys.path.insert(0, {str(ROOT)!r})
    from npu_shim.propagation import ray_runtime_env
    given = {{"pip": ["x"], "env_vars": {{"A": "1", "PYTHONPATH": "/n"}}}}
    print(json.dumps([ray_runtime_env(), ray_runtime_env(given), given]))
    """
    plain, merged, given = json.loads(run_python(textwrap.dedent(code), clean_env(), cwd=tmp_path).stdout)
    assert plain == {"env_vars": {"PYTHONPATH": os.pathsep.join([str(ROOT), "${PYTHONPATH}"])}}
    assert merged == {"pip": ["x"], "env_vars": {"A": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), "/n"])}}
    assert given == {"pip": ["x"], "env_vars": {"A": "1", "PYTHONPATH": "/n"}}, "the caller's dict was changed"


def test_a_bad_switch_value_is_reported_at_verls_first_import_and_not_by_every_interpreter(tmp_path):
    """Start-up reads NPU_SHIM_DISABLE alone (the others are read where they act): an interpreter that never
    imports verl hears nothing of a typo in another switch, verl's first import reports it once."""
    env = clean_env([ROOT], NPU_SHIM_STRICT="banana")
    assert run_python("pass", env, cwd=tmp_path, check=False).stderr == ""
    (tmp_path / "verl").mkdir()
    (tmp_path / "verl" / "__init__.py").write_text("")
    env = clean_env([ROOT, tmp_path], NPU_SHIM_STRICT="banana")
    completed = run_python("import verl", env, cwd=tmp_path, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.count("NPU_SHIM_STRICT='banana' is not a boolean") == 1, completed.stderr


def test_a_bad_disable_value_is_reported_at_start_up(tmp_path):
    """NPU_SHIM_DISABLE set (to anything) sends start-up to npu_shim.activate, which reads every switch."""
    completed = run_python("pass", clean_env([ROOT], NPU_SHIM_DISABLE="banana"), cwd=tmp_path, check=False)
    assert completed.returncode == 0
    assert "NPU_SHIM_DISABLE='banana' is not a boolean" in completed.stderr
    assert run_python("pass", clean_env([ROOT]), cwd=tmp_path, check=False).stderr == ""
