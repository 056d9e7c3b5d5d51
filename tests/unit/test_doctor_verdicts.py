"""The doctor names the real cause (issue 22): one verdict per cause, none that blames something else.

Each test runs ``python -m npu_shim doctor`` over a synthetic 0.7.1 tree (device ``npu``), with the
shim pip-installed in ``site`` as in ``test_doctor.py``, and reads its JSON and its text.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types

from helpers import ROOT, clean_env, run_doctor, run_in_session

from npu_shim.doctor.render import render


def test_a_verl_that_does_not_import_is_named_as_the_cause(site, synthetic, tmp_path):
    """Not a hint about how VERL_USE_EXTERNAL_MODULES is spelled, no `device None`, no fixes table."""
    tree = synthetic("0.7.1")
    init = tree / "verl" / "__init__.py"
    init.write_text(init.read_text() + '\nraise ImportError("synthetic: a dependency of verl is broken")\n')
    report, status = run_doctor([site, tree], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert (status, report["status"]) == (1, "problem")
    reason = report["routes"]["VERL_USE_EXTERNAL_MODULES"]["reason"]
    assert "exactly as written" not in reason
    assert "verl itself is broken here" in reason
    text = render(report)
    assert "verl itself does not import here, so every worker that imports verl dies the same way" in text
    assert "exactly as written" not in text and "as written" not in text
    assert "  device " not in text and "fixes:" not in text


def test_a_verl_that_is_not_installed_is_not_called_broken(site, tmp_path):
    """No verl at all: verl's route has nothing to patch, and nothing of verl is broken."""
    report, status = run_doctor([site], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert (status, report["status"], report["verl"]["installed"]) == (0, "not applicable", False)
    assert report["routes"]["VERL_USE_EXTERNAL_MODULES"]["reason"] == (
        "set, but verl is not installed here: nothing to patch (ModuleNotFoundError: No module named 'verl')"
    )
    assert "broken" not in render(report)


def test_a_misspelt_verl_use_external_modules_keeps_its_hint(site, synthetic, tmp_path):
    report, _ = run_doctor([site, synthetic("0.7.1")], tmp_path, VERL_USE_EXTERNAL_MODULES="json, npu_shim")
    assert "exactly as written" in report["routes"]["VERL_USE_EXTERNAL_MODULES"]["reason"]
    assert "VERL_USE_EXTERNAL_MODULES='json, npu_shim' as written" in report["value_model_megatron_error"]


def test_a_repatch_verl_did_not_bind_is_not_called_unimportable(site, synthetic, tmp_path):
    """MindSpeed imports, but verl's module holds `repatch = None`: the field is about verl's binding."""
    tree = synthetic("0.7.1")
    impl = tree / "verl" / "workers" / "engine" / "mindspeed" / "transformer_impl.py"
    impl.write_text(
        impl.read_text().replace("    from mindspeed.megatron_adaptor import repatch\n", "    raise ImportError\n")
    )
    report, _ = run_doctor([site, tree], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert (report["mindspeed"]["repatch_importable"], report["mindspeed_installed"]) == (False, True)
    text = render(report)
    assert "not importable" not in text
    assert "not bound by verl: its MindSpeed engine module holds no repatch" in text
    assert "though MindSpeed is installed" in text


def test_without_wrapt_no_route_says_yes(site, synthetic, tmp_path):
    """wrapt broken: the route imported npu_shim, but its hook cannot load; the route and the shim agree."""
    broken_wrapt = tmp_path / "broken_wrapt"
    (broken_wrapt / "wrapt").mkdir(parents=True)
    (broken_wrapt / "wrapt" / "__init__.py").write_text('raise ImportError("synthetic: a broken wrapt")\n')
    report, status = run_doctor(
        [broken_wrapt, site, synthetic("0.7.1")], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim"
    )
    assert (status, report["status"]) == (1, "problem")
    assert report["shim"]["hook_loaded"] is False
    assert report["shim"]["reason"] == (
        "the shim's import hook did not load (npu_shim.hook failed to import: ImportError: synthetic: a broken "
        "wrapt); verl runs unpatched"
    )
    route = report["routes"]["VERL_USE_EXTERNAL_MODULES"]
    assert route["works"] is False
    assert route["reason"].startswith("it activated npu_shim, but the shim's import hook did not load")
    assert report["routes"]["effective"] is None
    text = render(report)
    assert "route  yes" not in text and "yes: " not in text


def test_a_missing_wrapt_is_named_not_guessed(installed_shim, synthetic, tmp_path):
    """The installed shim's venv has no wrapt (installed --no-deps): the reason says so, as a fact."""
    python, _ = installed_shim
    env = clean_env([synthetic("0.7.1")], VERL_USE_EXTERNAL_MODULES="npu_shim")
    completed = run_in_session([str(python), "-m", "npu_shim", "doctor", "--json"], env, tmp_path, 300)
    report = json.loads(completed.stdout)
    assert (completed.returncode, report["shim"]["hook_loaded"]) == (1, False), completed.stderr
    assert report["shim"]["reason"] == (
        "the shim's import hook did not load (wrapt is not installed here); verl runs unpatched"
    )
    assert "is wrapt installed?" not in render(report)


def test_a_relative_pythonpath_entry_is_named_with_what_it_depends_on(site, synthetic, tmp_path):
    """`PYTHONPATH=.` from the bootstrap directory: processes started there get the shim, workers elsewhere not."""
    bootstrap = site / "npu_shim" / "bootstrap"
    report, status = run_doctor([".", site, synthetic("0.7.1")], bootstrap)
    reason = report["routes"]["PYTHONPATH"]["reason"]
    assert status == 1
    assert "PYTHONPATH entry '.' is relative" in reason
    assert f"from {bootstrap} it holds npu_shim's bootstrap" in reason
    assert f"export PYTHONPATH={bootstrap}:$PYTHONPATH" in reason
    assert "PYTHONPATH has no npu_shim bootstrap" not in reason


def test_a_relative_entry_without_the_bootstrap_is_named_too(site, synthetic, tmp_path):
    report, _ = run_doctor(["somewhere", site, synthetic("0.7.1")], tmp_path)
    assert (
        "'somewhere' relative, read against each process's working directory"
        in (report["routes"]["PYTHONPATH"]["reason"])
    )


def test_the_doctor_suggests_one_bootstrap_however_it_is_started(site, synthetic, tmp_path):
    """In a checkout, `python -m npu_shim` runs the checkout's shim and `npu-shim` the installed one: both name
    the bootstrap of the npu_shim the probed interpreter (as a worker) imports, the installed one."""
    script = tmp_path / "npu-shim"  # what pip writes for the console script: its directory first on sys.path
    script.write_text("import sys\nfrom npu_shim.__main__ import main\nsys.exit(main())\n")
    env = clean_env([site, synthetic("0.7.1")])
    reasons = []
    for command in (["-m", "npu_shim"], [str(script)]):
        completed = run_in_session([sys.executable, *command, "doctor", "--json"], env, ROOT, 300)
        reasons.append(json.loads(completed.stdout)["routes"]["PYTHONPATH"]["reason"])
    installed = site / "npu_shim" / "bootstrap"
    assert reasons == [f"PYTHONPATH has no npu_shim bootstrap (export PYTHONPATH={installed}:$PYTHONPATH)"] * 2


def test_runtime_env_and_bootstrap_dir_answer_for_the_same_shim(site):
    """`python -m npu_shim` in a checkout with the shim also installed: both name the installed shim."""

    def run(*command: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "npu_shim", *command],
            env=clean_env([site]),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()

    installed = str(site / "npu_shim" / "bootstrap")
    assert run("bootstrap-dir") == installed
    assert json.loads(run("runtime-env", "--json")) == {"env_vars": {"VERL_USE_EXTERNAL_MODULES": "npu_shim"}}
    pythonpath = json.loads(run("runtime-env", "--json", "--route", "PYTHONPATH"))["env_vars"]["PYTHONPATH"]
    assert pythonpath == f"{installed}:${{PYTHONPATH}}"


def test_runtime_env_keeps_only_npu_shim_for_verl(tmp_path):
    """With VERL_USE_EXTERNAL_MODULES=json set, the command prints npu_shim alone (only the helper merges)."""
    completed = subprocess.run(
        [sys.executable, "-m", "npu_shim", "runtime-env", "--json", "--route", "VERL_USE_EXTERNAL_MODULES"],
        env=clean_env([ROOT], VERL_USE_EXTERNAL_MODULES="json"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(completed.stdout) == {"env_vars": {"VERL_USE_EXTERNAL_MODULES": "npu_shim"}}


def test_bootstrap_dir_from_a_deleted_directory(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    code = (
        "import os, runpy, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
        "sys.argv = ['npu_shim', 'bootstrap-dir']; runpy.run_module('npu_shim', run_name='__main__')"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code, str(gone)],
        env=clean_env([ROOT]),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    assert completed.returncode == 0
    assert completed.stdout.strip() == str(ROOT)


FAKE_RAY = """
class GetTimeoutError(Exception):
    pass

class _Context:
    address_info = {"gcs_address": "10.0.0.7:6379", "address": "10.0.0.7:6379"}

class _Task:
    def __init__(self, function):
        self.function = function
    def remote(self, *args):
        return self.function(*args)

def remote(**options):
    return _Task

def init(address=None, **kwargs):
    return _Context()

def get(result, timeout=None):
    return result

def cancel(reference, force=False):
    pass

def shutdown():
    pass
"""


def test_doctor_ray_names_the_cluster_it_resolved(site, synthetic, tmp_path):
    """`--ray` without an address: the report names the cluster Ray connected to, not `auto` (a stand-in Ray)."""
    fake = tmp_path / "fake_ray"
    (fake / "ray").mkdir(parents=True)
    (fake / "ray" / "__init__.py").write_text(FAKE_RAY)
    (fake / "ray" / "exceptions.py").write_text("from ray import GetTimeoutError\n")
    report, _ = run_doctor([fake, site, synthetic("0.7.1")], tmp_path, "--ray", VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert report["probed_in"] == "a Ray worker of the cluster at 10.0.0.7:6379"


# Ray 2.60's ConnectionError from ray.init(address="auto") when no cluster runs on this machine.
RAY_NO_CLUSTER = (
    "Could not find any running Ray instance. "
    "Please specify the one to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable."
)


def test_no_ray_cluster_is_told_what_npu_shim_takes_not_rays_flag(monkeypatch):
    """Ray's advice names its CLI's `--address`, which npu-shim has not: the doctor's `--ray ADDRESS` instead."""
    from npu_shim.__main__ import _parser
    from npu_shim.doctor import ray_probe

    def init(address=None, **kwargs):
        raise ConnectionError(RAY_NO_CLUSTER)

    ray = types.ModuleType("ray")
    ray.remote = lambda **options: lambda function: function
    ray.init = init
    exceptions = types.ModuleType("ray.exceptions")
    exceptions.GetTimeoutError = TimeoutError
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.exceptions", exceptions)
    answer = ray_probe.connect_and_probe(None, time.time() + 30, 30, str(ROOT))
    assert answer == {
        "error": "could not connect to a Ray cluster at auto: Could not find any running Ray instance. Name the "
        "cluster to probe: npu-shim doctor --ray ADDRESS (or RAY_ADDRESS=ADDRESS with --ray alone), or start one "
        "here: ray start --head."
    }
    assert _parser().parse_args(["doctor", "--ray", "10.0.0.7:6379"]).ray == "10.0.0.7:6379"  # what it names exists
    unadvised = "Failed to connect to GCS at 127.0.0.1:1 within 60 s."  # no advice of Ray's: kept as it is
    assert ray_probe._with_our_advice(ConnectionError(unadvised)) == unadvised


def test_doctor_help_gives_the_default_timeout_in_seconds():
    completed = subprocess.run(
        [sys.executable, "-m", "npu_shim", "doctor", "--help"],
        env={**clean_env([ROOT]), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "(default: 600 s)" in completed.stdout
    top = subprocess.run(
        [sys.executable, "-m", "npu_shim", "--help"],
        env={**clean_env([ROOT]), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "0.6.x to 0.9.x" in top and "0.6.x/0.7.x" not in top
