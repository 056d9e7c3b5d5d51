"""The doctor names the real cause (issue 22): one verdict per cause, none that blames something else.

Each test runs ``python -m npu_shim doctor`` over a synthetic 0.7.1 tree (device ``npu``), with the
shim pip-installed in ``site`` as in ``test_doctor.py``, and reads its JSON and its text.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import types

import pytest
from helpers import ROOT, clean_env, doctor, rendered, run_doctor
from synthetic_verl import MEGATRON_ADAPTOR, MINDSPEED_NEEDING_ADAPTOR, TRANSFORMER_ENGINE_NPU, write_files


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
    text = rendered(report)
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
    assert "broken" not in rendered(report)


def test_a_misspelt_verl_use_external_modules_keeps_its_hint(site, synthetic, tmp_path):
    report, _ = run_doctor([site, synthetic("0.7.1")], tmp_path, VERL_USE_EXTERNAL_MODULES="json, npu_shim")
    assert report["routes"]["VERL_USE_EXTERNAL_MODULES"]["reason"].endswith("(see verl)")
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
    # the probe's own import works, with a repatch: no problem of MindSpeed's, and not called a line without it
    assert (report["mindspeed_import_error"], report["mindspeed_adaptor_has_repatch"]) == (None, True)
    assert report["mindspeed"]["meaning"][0].startswith("no repatch bound by verl, though")
    text = rendered(report)
    assert "not importable" not in text
    assert "not bound by verl, though MindSpeed is installed here" in text
    meaning = r"\n  mindspeed means +no repatch bound by verl, though mindspeed\.megatron_adaptor\.repatch imports here"
    assert re.search(meaning, text)


# What the doctor says, as before, where verl bound no repatch and nothing of MindSpeed failed to import.
NO_REPATCH = (
    "no repatch (a MindSpeed line without it, such as 2.1.0_core_r0.12.1): verl's engine config never "
    "reaches MindSpeed; fusion attention and context parallelism only by MindSpeed's own command-line flags"
)
# The `mindspeed` section's keys, as before: what was found about verl's binding is in keys of its own.
MINDSPEED_KEYS = {"repatch_importable", "source", "batch_invariant_attention", "context_parallel_wrapper", "meaning"}
ADAPTOR_MISSING = {
    "module": "mindspeed.megatron_adaptor",
    "error": "ModuleNotFoundError: No module named 'megatron_adaptor'",
    "missing": "megatron_adaptor",
}


@pytest.mark.parametrize(
    ("layout", "device"),
    [("0.7.1", "npu"), ("0.7.1", "cuda"), ("0.6", "npu"), ("0.9", "npu")],  # 0.6: an unguarded import
)
def test_a_mindspeed_without_megatron_adaptor_is_a_problem_not_absent(site, synthetic, tmp_path, layout, device):
    """MindSpeed core_r0.18.0 without MegatronAdaptor: `import mindspeed` fails, verl's guard hides it, and every
    MindSpeed patch is off; on any device, and not called an absent MindSpeed."""
    tree = write_files(synthetic(layout), MINDSPEED_NEEDING_ADAPTOR)
    (tree / "verl" / "utils" / "device.py").write_text(f"def get_device_name():\n    return {device!r}\n")
    report, status = run_doctor([site, tree], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    mindspeed = report["mindspeed"]
    assert report["mindspeed_import_error"] == ADAPTOR_MISSING
    assert (mindspeed["repatch_importable"], report["mindspeed_installed"]) == (False, True)
    assert (report["megatron_adaptor_installed"], report["transformer_engine_installed"]) == (False, False)
    assert report["mindspeed_adaptor_has_repatch"] is None
    assert set(mindspeed) == MINDSPEED_KEYS
    assert (status, report["status"], report["exit_code"]) == (1, "problem", 1)
    assert mindspeed["meaning"] == [
        "MegatronAdaptor (module megatron_adaptor) is not installed: MindSpeed core_r0.17.0/core_r0.18.0 imports "
        "it at `import mindspeed`, so verl runs with repatch = None, every MindSpeed patch off; "
        "TransformerEngineNPU (module transformer_engine) is not installed either; fix: install MegatronAdaptor, "
        "then TransformerEngineNPU, then MindSpeed"
    ]
    text = rendered(report)
    assert "not bound by verl, though MindSpeed is installed here (mindspeed means: why" in text
    assert (
        "problem (exit 1): MindSpeed is installed but `import mindspeed.megatron_adaptor` fails, so verl runs "
        "every MindSpeed patch off"
    ) in text
    assert "absent" not in text and "MindSpeed is not installed" not in text and "not judged" not in text


def test_a_mindspeed_with_its_megatron_adaptor_and_transformer_engine_npu_is_ok(site, synthetic, tmp_path):
    tree = write_files(synthetic("0.7.1"), {**MINDSPEED_NEEDING_ADAPTOR, **MEGATRON_ADAPTOR, **TRANSFORMER_ENGINE_NPU})
    report, status = run_doctor([site, tree], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert report["mindspeed"]["repatch_importable"] is True
    # verl bound it: the probe imports nothing of MindSpeed's itself
    assert (report["mindspeed_import_error"], report["mindspeed_adaptor_has_repatch"]) == (None, None)
    assert (report["megatron_adaptor_installed"], report["transformer_engine_installed"]) == (True, True)
    assert report["transformer_engine_import_error"] is None
    assert (status, report["status"]) == (0, "ok")
    assert "bound by verl's MindSpeed engine module" in rendered(report)


@pytest.mark.parametrize(
    ("engine", "missing", "meaning"),
    [
        (
            {},
            "transformer_engine",
            "TransformerEngineNPU (module transformer_engine) is not installed beside MegatronAdaptor and MindSpeed: "
            "Megatron runs without Transformer Engine, so verl's Megatron models (Transformer Engine layer specs) and "
            "MindSpeed core_r0.18.0's norms fail to build; fix: install MegatronAdaptor, then TransformerEngineNPU, "
            "then MindSpeed",
        ),
        (
            {"transformer_engine/__init__.py": "import torch_npu_for_transformer_engine\n"},
            "torch_npu_for_transformer_engine",
            "TransformerEngineNPU is installed but `import transformer_engine` failed: ModuleNotFoundError: No module "
            "named 'torch_npu_for_transformer_engine': Megatron runs without Transformer Engine, so verl's Megatron "
            "models (Transformer Engine layer specs) and MindSpeed core_r0.18.0's norms fail to build",
        ),
    ],
    ids=["missing", "broken"],
)
def test_megatron_adaptor_without_a_working_transformer_engine_npu_is_a_problem_named(
    site, synthetic, tmp_path, engine, missing, meaning
):
    """MindSpeed imports and verl binds repatch, but Megatron's guarded TE import leaves it without Transformer Engine:
    nothing verl builds on Megatron would run, which the doctor must say instead of ``ok``."""
    tree = write_files(synthetic("0.7.1"), {**MINDSPEED_NEEDING_ADAPTOR, **MEGATRON_ADAPTOR, **engine})
    report, status = run_doctor([site, tree], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert report["mindspeed"]["repatch_importable"] is True
    assert report["mindspeed_import_error"] is None
    failure = report["transformer_engine_import_error"]
    assert (failure["module"], failure["missing"]) == ("transformer_engine", missing)
    assert (status, report["status"], report["exit_code"]) == (1, "problem", 1)
    assert report["mindspeed"]["meaning"] == [meaning]
    assert "MegatronAdaptor is installed but `import transformer_engine` fails" in rendered(report)


def test_transformer_engine_is_not_asked_for_without_megatron_adaptor(site, synthetic, tmp_path):
    """A MindSpeed line before MegatronAdaptor (core_r0.16.0 and older) runs without Transformer Engine: no problem."""
    tree = write_files(synthetic("0.7.1"), {})
    report, status = run_doctor([site, tree], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert (report["megatron_adaptor_installed"], report["transformer_engine_installed"]) == (False, False)
    assert report["transformer_engine_import_error"] is None
    assert (status, report["status"]) == (0, "ok")


@pytest.mark.parametrize(
    ("route", "adaptor", "before", "first"),
    [
        ("PYTHONPATH", True, True, []),  # npu_shim's watcher imports MA at Megatron's first import
        ("VERL_USE_EXTERNAL_MODULES", True, False, ["megatron", "megatron.core"]),  # verl imports npu_shim too late
        ("PYTHONPATH, switched off", True, False, ["megatron", "megatron.core"]),
        ("PYTHONPATH", False, False, None),
    ],
)
def test_the_doctor_says_whether_megatron_adaptor_comes_before_megatron(site, synthetic, tmp_path, route, adaptor,
                                                                        before, first):  # fmt: skip
    """Installed or not, loaded before Megatron in processes started so or not, and what the probe saw first:
    this verl imports Megatron first thing, before the modules VERL_USE_EXTERNAL_MODULES names and MindSpeed."""
    three_layers = {**MEGATRON_ADAPTOR, **TRANSFORMER_ENGINE_NPU} if adaptor else {}
    tree = write_files(synthetic("0.7.1"), {**MINDSPEED_NEEDING_ADAPTOR, **three_layers})
    init = tree / "verl" / "__init__.py"
    init.write_text("import megatron.core\n" + init.read_text())
    entries = [site, tree] if route == "VERL_USE_EXTERNAL_MODULES" else [site / "npu_shim_bootstrap", site, tree]
    env = {"VERL_USE_EXTERNAL_MODULES": "npu_shim"} if route == "VERL_USE_EXTERNAL_MODULES" else {}
    if route.endswith("switched off"):
        env["NPU_SHIM_MEGATRON_ADAPTOR"] = "0"
    report, _ = run_doctor(entries, tmp_path, **env)
    section = report["megatron_adaptor"]
    assert (section["installed"], section["before_megatron"], section["megatron_first"]) == (adaptor, before, first)
    text = rendered(report)
    line = next(line for line in text.splitlines() if line.strip().startswith("megatron_adaptor "))
    if not adaptor:
        assert "is not installed" in line
    elif before:
        assert "loaded before Megatron: npu_shim imports" in line and "it came before Megatron" in line
    else:
        assert "not loaded before Megatron" in line and "megatron, megatron.core" in line
        assert ("NPU_SHIM_MEGATRON_ADAPTOR=0" in line) == route.endswith("switched off")
    # Reported, not judged: the status is the one the rest of the report gives
    assert report["status"] == ("problem" if not adaptor else "ok")


@pytest.mark.parametrize(
    ("first_line", "missing", "error", "meaning"),
    [
        (
            "import transformer_engine",
            "transformer_engine",
            "ModuleNotFoundError: No module named 'transformer_engine'",
            "TransformerEngineNPU (module transformer_engine) is not installed: MindSpeed core_r0.17.0/core_r0.18.0 "
            "imports it at `import mindspeed.megatron_adaptor`, so verl runs with repatch = None, every MindSpeed "
            "patch off; fix: install MegatronAdaptor, then TransformerEngineNPU, then MindSpeed",
        ),
        (
            "from megatron.core import no_such_name",  # a MindSpeed for another megatron-core
            None,
            "ImportError: cannot import name 'no_such_name' from 'megatron.core'",
            "MindSpeed is installed but `import mindspeed.megatron_adaptor` failed: {error}: verl runs with "
            "repatch = None, every MindSpeed patch off",
        ),
    ],
)
def test_a_mindspeed_adaptor_that_fails_to_import_is_a_problem_named_by_its_error(
    site, synthetic, tmp_path, first_line, missing, error, meaning
):
    tree = write_files(synthetic("0.7.1"), {**MINDSPEED_NEEDING_ADAPTOR, **MEGATRON_ADAPTOR})
    adaptor = tree / "mindspeed" / "megatron_adaptor.py"
    adaptor.write_text(f"{first_line}\n{adaptor.read_text()}")
    report, status = run_doctor([site, tree], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    failure = report["mindspeed_import_error"]
    assert (failure["module"], failure["missing"]) == ("mindspeed.megatron_adaptor", missing)
    assert failure["error"].startswith(error), failure  # ImportError's message ends with megatron.core's path
    assert (status, report["status"], report["exit_code"]) == (1, "problem", 1)
    assert report["mindspeed"]["meaning"] == [meaning.format(error=failure["error"])]
    text = rendered(report)
    assert f"\n  mindspeed means                  {meaning.format(error=failure['error'])}\n" in text
    assert "absent" not in text and "MindSpeed is not installed" not in text


def test_no_mindspeed_at_all_on_an_npu_is_a_problem(site, synthetic, tmp_path):
    """Nothing of MindSpeed installed: no import tried, the wording of before; on an NPU, verl's Megatron engines run
    through MindSpeed, so a Megatron critic there has none to run on."""
    report, status = run_doctor(
        [site, synthetic("0.7.1", with_mindspeed=False)], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim"
    )
    assert (report["mindspeed_installed"], report["mindspeed"]["repatch_importable"]) == (False, False)
    assert (report["mindspeed_import_error"], report["mindspeed_adaptor_has_repatch"]) == (None, None)
    assert report["megatron_adaptor_installed"] is False
    assert report["mindspeed"]["meaning"] == []  # the repatch line and the status say it: nothing more to mean
    assert (status, report["status"]) == (1, "problem")
    assert report["problems"] == ["MindSpeed is not installed: verl's Megatron engines run on an NPU through MindSpeed"]
    assert "not bound by verl: MindSpeed is not installed here" in rendered(report)


def test_a_line_without_repatch_is_as_before(site, synthetic, tmp_path):
    """2.1.0_core_r0.12.1: mindspeed.megatron_adaptor imports, with no repatch; no problem, the wording of before."""
    tree = write_files(synthetic("0.7.1"), {"mindspeed/megatron_adaptor.py": "LINE = '2.1.0_core_r0.12.1'\n"})
    report, status = run_doctor([site, tree], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert report["mindspeed"]["repatch_importable"] is False
    assert (report["mindspeed_import_error"], report["mindspeed_adaptor_has_repatch"]) == (None, False)
    assert report["mindspeed"]["meaning"] == [NO_REPATCH]
    assert (status, report["status"]) == (0, "ok")
    assert f"\n  mindspeed means                  {NO_REPATCH}\n" in rendered(report)


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
    text = rendered(report)
    assert "route  yes" not in text and "yes: " not in text


def test_a_missing_wrapt_is_named_not_guessed(installed_shim, synthetic, tmp_path):
    """The installed shim's venv has no wrapt (installed --no-deps): the reason says so, as a fact."""
    python, _ = installed_shim
    env = clean_env([synthetic("0.7.1")], VERL_USE_EXTERNAL_MODULES="npu_shim")
    run = doctor(env, tmp_path, python=python)
    report = run.report
    assert (run.status, report["shim"]["hook_loaded"]) == (1, False), run.stderr
    assert report["shim"]["reason"] == (
        "the shim's import hook did not load (wrapt is not installed here); verl runs unpatched"
    )
    assert "is wrapt installed?" not in rendered(report)


def test_a_relative_pythonpath_entry_is_named_with_what_it_depends_on(site, synthetic, tmp_path):
    """`PYTHONPATH=.` from the bootstrap directory: processes started there get the shim, workers elsewhere not."""
    bootstrap = site / "npu_shim_bootstrap"
    report, status = run_doctor([".", site, synthetic("0.7.1")], bootstrap)
    reason = report["routes"]["PYTHONPATH"]["reason"]
    assert status == 1
    assert "PYTHONPATH entry '.' is relative" in reason
    assert f"from {bootstrap} it holds npu_shim's bootstrap" in reason
    assert f'export PYTHONPATH={bootstrap}"${{PYTHONPATH:+:$PYTHONPATH}}"' in reason
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
        reasons.append(doctor(env, ROOT, entry=command).report["routes"]["PYTHONPATH"]["reason"])
    installed = site / "npu_shim_bootstrap"
    export = f'export PYTHONPATH={installed}"${{PYTHONPATH:+:$PYTHONPATH}}"'
    assert reasons == [f"PYTHONPATH has no npu_shim bootstrap ({export})"] * 2


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

    installed = str(site / "npu_shim_bootstrap")
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
