"""``python -m npu_shim doctor`` judges the environment it was started in, route by route (synthetic verl).

Each test runs the doctor from a clean environment over a synthetic 0.7.1 tree
(its device is ``npu``), the shim pip-installed in a directory on PYTHONPATH
(``site``, importable, but no bootstrap on PYTHONPATH unless a test puts it there).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from helpers import ROOT, assert_consistent, clean_env, doctor, rendered, run_doctor

UNKNOWN_DEVICE = "Unknown device: npu for model_type: value_model and backend: megatron"


def test_an_installed_shim_without_a_route_is_a_problem_though_the_doctor_imported_it(site, synthetic, tmp_path):
    """`python -m npu_shim` imports (and so activates) the shim: the doctor must not count that."""
    report, status = run_doctor([site, synthetic("0.7.1")], tmp_path)
    assert (status, report["status"], report["exit_code"]) == (1, "problem", 1)
    assert report["probed_in"] == "a fresh interpreter"
    assert report["probe"]["environment"]["PYTHONPATH"] == f"{site}:{synthetic('0.7.1')}"
    assert report["probe"]["activated_at_start"] is None
    assert report["shim"]["active"] is False
    assert report["routes"]["effective"] is None
    assert report["routes"]["PYTHONPATH"]["configured"] is None
    assert report["routes"]["VERL_USE_EXTERNAL_MODULES"]["configured"] is False
    assert report["value_model_megatron_error"] == UNKNOWN_DEVICE


def test_a_foreign_sitecustomize_that_shadows_the_bootstrap_is_named(site, synthetic, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "sitecustomize.py").write_text("FOREIGN = True\n")
    bootstrap = site / "npu_shim_bootstrap"
    report, status = run_doctor([foreign, bootstrap, site, synthetic("0.7.1")], tmp_path)
    route = report["routes"]["PYTHONPATH"]
    assert status == 1
    assert route["configured"] == str(bootstrap)
    assert route["works"] is False
    assert route["shadowed_by"] == str(foreign / "sitecustomize.py")
    assert str(foreign / "sitecustomize.py") in route["reason"]
    assert "runs instead of npu_shim's" in route["reason"]


def test_the_pythonpath_route(site, synthetic, tmp_path):
    report, status = run_doctor([site / "npu_shim_bootstrap", site, synthetic("0.7.1")], tmp_path)
    assert (status, report["status"]) == (0, "ok")
    assert report["routes"]["effective"] == "PYTHONPATH"
    assert report["shim"]["activated_via"] == "sitecustomize"
    assert report["value_model_megatron_resolves"] is True


def test_verls_own_route(site, synthetic, tmp_path):
    report, status = run_doctor([site, synthetic("0.7.1")], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert (status, report["status"]) == (0, "ok")
    assert report["routes"]["effective"] == "VERL_USE_EXTERNAL_MODULES"
    assert report["routes"]["VERL_USE_EXTERNAL_MODULES"]["works"] is True
    assert report["probe"]["activated_at_start"] is None
    assert report["shim"]["activated_via"] == "VERL_USE_EXTERNAL_MODULES"


def test_another_environments_bootstrap_is_explained(installed_shim, synthetic, tmp_path):
    """The checkout runs the doctor; PYTHONPATH holds the bootstrap of a venv this python is not."""
    _, site = installed_shim
    report, status = run_doctor([site / "npu_shim_bootstrap", synthetic("0.7.1")], ROOT)
    route = report["routes"]["PYTHONPATH"]
    assert status == 1
    assert route["works"] is False
    assert "another environment's bootstrap" in route["reason"]


def test_without_verl_the_doctor_has_nothing_to_judge(site, tmp_path):
    report, status = run_doctor([site], tmp_path)
    assert (status, report["status"]) == (0, "not applicable")
    assert report["verl"]["importable"] is False


def test_no_ray_cluster_is_an_error_within_the_timeout(site, tmp_path):
    """`--ray` starts nothing: with no cluster to connect to it says so (exit 2), or that ray is absent."""
    report, status = run_doctor([site], tmp_path, "--ray", "127.0.0.1:1", "--timeout", "30", RAY_AUTH_MODE="disabled")
    assert (status, report["status"]) == (2, "error")
    assert "ray is not importable" in report["error"] or "could not connect" in report["error"]


def refused(cwd, *arguments: str) -> str:
    """The doctor's last line on stderr for ``arguments`` it refuses (exit 2, argparse's usage error)."""
    completed = subprocess.run(
        [sys.executable, "-m", "npu_shim", "doctor", *arguments],
        env=clean_env([ROOT]),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    return completed.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("timeout", ["0", "-5", "nan", "inf", "soon"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused(tmp_path, timeout):
    assert refused(tmp_path, "--ray", "127.0.0.1:1", "--timeout", timeout) == (
        f"npu-shim doctor: error: argument --timeout: {timeout!r} is not a positive number of seconds"
    )


def probe_without_npu_shim(tree, cwd, **options) -> dict:
    """The probe's answer from a fresh interpreter over ``tree`` where npu_shim is not importable (no shim parent)."""
    source = (ROOT / "npu_shim" / "doctor" / "probe.py").read_text()
    completed = subprocess.run(
        [sys.executable, "-c", source, json.dumps(options)],
        env=clean_env([tree]),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def doctor_over(answer: dict, monkeypatch, **options) -> tuple[dict, str, int]:
    """``npu_shim.doctor.command.main`` where the probe gave ``answer``: the report, its text and the exit status."""
    from npu_shim.doctor import command

    monkeypatch.setattr(command, "probe_in_fresh_interpreter", lambda timeout, probe_options: answer)
    text, status = command.main(**options)
    report = json.loads(command.main(as_json=True, **options)[0])
    assert_consistent(report)
    return report, text, status


def test_a_worker_without_npu_shim_still_gets_a_verdict(synthetic, tmp_path, monkeypatch):
    """The probe in an interpreter where npu_shim is not importable reads the device and the lookup itself."""
    answer = probe_without_npu_shim(synthetic("0.7.1"), tmp_path)
    probed = answer["report"]
    assert "npu_shim is not importable here" in probed["probe"]["report_error"]
    assert probed["device"] == "npu"
    assert probed["value_model_megatron_resolves"] is False
    assert UNKNOWN_DEVICE in probed["value_model_megatron_error"]

    report, text, status = doctor_over(answer, monkeypatch)
    assert (report["status"], report["exit_code"], status) == ("problem", 1, 1)
    assert "npu_shim is not importable here" in report["error"]
    assert report["shim"] is None and report["routes"] is None
    assert "does not resolve: Unknown device: npu" in text  # verl's words, as in the full report
    assert rendered(report) == text


@pytest.mark.parametrize("release", ["0.8-edited", "0.9"])
def test_a_worker_without_npu_shim_where_verl_resolves_the_critic_says_so(synthetic, tmp_path, monkeypatch, release):
    """0.8/0.9 register the critic's engine themselves: without npu_shim there, the lookup resolves, and the report
    says so (status error, exit 2: no full report, but no problem either)."""
    answer = probe_without_npu_shim(synthetic(release), tmp_path)
    report, text, status = doctor_over(answer, monkeypatch)
    assert report["value_model_megatron_resolves"] is True
    assert report["value_model_megatron_error"] is None
    assert (report["status"], status) == ("error", 2)
    # the one lookup the full report makes too: the class named
    assert re.search(r"\n  value_model/megatron +resolves to verl\.workers\.engine\.\S+WithValueHead\n", text), text


def test_a_route_not_set_up_is_not_needed_when_the_other_works(site, synthetic, tmp_path):
    report, _ = run_doctor([site / "npu_shim_bootstrap", site, synthetic("0.7.1")], tmp_path)
    verl_route = report["routes"]["VERL_USE_EXTERNAL_MODULES"]
    assert (verl_route["needed"], verl_route["reason"]) == (False, "not used (the shim comes by PYTHONPATH)")


def test_the_probe_runs_from_a_neutral_directory_not_the_callers(site, synthetic, tmp_path):
    """A stray verl.py where the doctor is started is not what a worker imports."""
    (tmp_path / "verl.py").write_text('__version__ = "not verl"\n')
    report, status = run_doctor([site, synthetic("0.7.1")], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert report["verl"]["version"] == "0.7.1"
    assert (status, report["status"]) == (0, "ok")


def test_verl_route_without_npu_shim_importable_is_a_problem_even_from_the_checkout(synthetic):
    """From the checkout `python -m npu_shim` finds the package; a worker, from any other directory, does not."""
    env = clean_env([synthetic("0.7.1")], VERL_USE_EXTERNAL_MODULES="npu_shim")
    run = doctor(env, ROOT)
    report = run.report
    assert (run.status, report["status"]) == (1, "problem")
    assert report["verl"] == {**report["verl"], "installed": True, "importable": False}
    assert report["verl"]["error"] == "ModuleNotFoundError: No module named 'npu_shim'"
    assert report["routes"]["VERL_USE_EXTERNAL_MODULES"]["works"] is False
    # the probed interpreter finds no npu_shim: the entry to suggest is the checkout the doctor runs from
    assert f'(export PYTHONPATH={ROOT}"${{PYTHONPATH:+:$PYTHONPATH}}")' in report["routes"]["PYTHONPATH"]["reason"]


@pytest.mark.parametrize("named", [" npu_shim", "NPU_SHIM", "json, npu_shim", "npu_shim,"])
def test_a_verl_use_external_modules_that_verl_cannot_import_is_a_problem(site, synthetic, tmp_path, named):
    report, status = run_doctor([site, synthetic("0.7.1")], tmp_path, VERL_USE_EXTERNAL_MODULES=named)
    assert (status, report["status"]) == (1, "problem")
    assert report["value_model_megatron_error"].startswith("import verl fails: ")
    reason = report["routes"]["VERL_USE_EXTERNAL_MODULES"]["reason"]
    assert reason == f"import verl failed on VERL_USE_EXTERNAL_MODULES={named!r} (see verl)"
    # the verl line says why, once
    assert f"verl imports each name of VERL_USE_EXTERNAL_MODULES={named!r} as written" in rendered(report)


def test_runtime_env_helper_writes_a_value_verl_accepts():
    from npu_shim.propagation import verl_modules_runtime_env

    def written(value: str) -> str:
        return verl_modules_runtime_env({"env_vars": {"VERL_USE_EXTERNAL_MODULES": value}})["env_vars"][
            "VERL_USE_EXTERNAL_MODULES"
        ]

    assert written("foo, npu_shim") == "foo,npu_shim"
    assert written(" npu_shim") == "npu_shim"
    assert written("json,,npu_shim,") == "json,npu_shim"
    assert written("json") == "json,npu_shim"
    assert written("") == "npu_shim"


def test_without_an_npu_the_doctor_says_what_it_did_not_judge(site, synthetic, tmp_path):
    """A docker build on a machine without an NPU: no 'ok' for a lookup that was never made for npu."""
    tree = synthetic("0.7.1")
    (tree / "verl" / "utils" / "device.py").write_text('def get_device_name():\n    return "cuda"\n')
    report, status = run_doctor([site, tree], tmp_path)
    assert (status, report["status"]) == (0, "not judged")

    assert "not judged (exit 0): verl looks up cuda engines here, not npu" in rendered(report)


def test_an_inactive_fix_says_in_words_what_it_would_do(site, synthetic, tmp_path):
    report, _ = run_doctor([site, synthetic("0.7.1")], tmp_path)  # installed, no route: the shim is inactive

    text = rendered(report)
    assert "inactive (would apply)" in text
    assert "inactive (nothing to do here)" in text
    assert "(would not applicable)" not in text


def test_a_verl_whose_engine_package_fails_to_import_is_a_problem(site, synthetic, tmp_path):
    """verl imports, verl.workers.engine does not: every worker that builds an engine dies, shim or not."""
    tree = synthetic("0.7.1")
    engine = tree / "verl" / "workers" / "engine" / "__init__.py"
    engine.write_text('raise ImportError("synthetic: a dependency of the engines is broken")\n' + engine.read_text())
    report, status = run_doctor([site, tree], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim")
    assert (status, report["status"], report["exit_code"]) == (1, "problem", 1)
    assert report["verl"]["importable"] is True
    broken = "verl.workers.engine did not import: ImportError: synthetic: a dependency of the engines is broken"
    assert report["verl"]["error"] == broken
    assert report["value_model_megatron_error"] == broken


# A module verl imports through VERL_USE_EXTERNAL_MODULES after npu_shim: one fix raises when the hook applies it.
BREAK_A_FIX = """
from npu_shim import patcher
def _broken(*args, **kwargs):
    raise RuntimeError("injected fault in value_engine")
patcher.Writer.export = _broken  # value_engine's exports: the one fix that exports
"""


def test_a_hook_that_failed_is_named_in_the_reason(site, synthetic, tmp_path):
    """Not "the shim's hook has not run": it ran, failed, and left verl as it shipped; the reason says so."""
    breaker = tmp_path / "breaker"
    breaker.mkdir()
    (breaker / "break_a_fix.py").write_text(BREAK_A_FIX)
    report, status = run_doctor(
        [site, breaker, synthetic("0.7.1")], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim,break_a_fix"
    )
    assert (status, report["status"]) == (1, "problem")
    shim = report["shim"]
    assert (shim["activated_via"], shim["active"]) == ("VERL_USE_EXTERNAL_MODULES", False)
    assert shim["failure"] == "RuntimeError: injected fault in value_engine"
    assert shim["reason"] == (
        "the shim failed while patching verl.workers.engine and left it as it shipped "
        "(RuntimeError: injected fault in value_engine)"
    )


def test_verls_plugin_route_activates_an_installed_shim_with_no_variable_set(site, synthetic, tmp_path):
    """From 0.9.0 `import verl` loads the installed shim's verl.plugins entry point (the synthetic 0.9 does too)."""
    report, status = run_doctor([site, synthetic("0.9")], tmp_path)
    assert (status, report["status"]) == (0, "ok")
    assert report["probe"]["verl_plugin"] == "npu_shim.verl_plugin"
    assert (report["probe"]["activated_at_start"], report["shim"]["activated_via"]) == (None, "verl.plugins")
    assert report["routes"]["effective"] == "verl.plugins"
    assert report["routes"]["verl.plugins"]["works"] is True
    for other in ("PYTHONPATH", "VERL_USE_EXTERNAL_MODULES"):
        assert report["routes"][other]["needed"] is False, other
    assert {fix["verdict"] for fix in report["fixes"]} <= {"applied", "native", "not applicable"}


@pytest.mark.parametrize(
    ("policy", "loads"), [("none", False), ("other_plugin", False), ("", False), ("other, NPU_SHIM", True)]
)
def test_verls_plugin_policy_is_respected_and_named(site, synthetic, tmp_path, policy, loads):
    report, _ = run_doctor([site, synthetic("0.9")], tmp_path, VERL_USE_EXTERNAL_PLUGINS=policy)
    route = report["routes"]["verl.plugins"]
    assert report["probe"]["environment"]["VERL_USE_EXTERNAL_PLUGINS"] == policy
    assert (route["configured"], route["works"], report["shim"]["active"]) == (True, loads, loads)
    if not loads:
        assert f"VERL_USE_EXTERNAL_PLUGINS={policy!r} keeps verl from loading it" in route["reason"]
        assert report["routes"]["effective"] is None


def test_the_probe_is_judged_by_its_own_environment_not_the_doctors(site, synthetic, monkeypatch):
    """A worker whose environment differs from the doctor's (``VERL_USE_EXTERNAL_PLUGINS=none`` in the worker only,
    as a cluster's image may set it): the routes are judged from what the probe saw there, not from here."""
    from npu_shim.doctor import command

    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "auto")  # here, verl would load the plugin
    worker = clean_env([site, synthetic("0.9")], VERL_USE_EXTERNAL_PLUGINS="none")
    monkeypatch.setattr(command, "environment_as_given", lambda: worker)
    text, _ = command.main()
    report = json.loads(command.main(as_json=True)[0])
    assert report["probe"]["environment"]["VERL_USE_EXTERNAL_PLUGINS"] == "none"
    route = report["routes"]["verl.plugins"]
    assert (route["configured"], route["works"], report["shim"]["active"]) == (True, False, False)
    assert report["routes"]["effective"] is None
    assert "VERL_USE_EXTERNAL_PLUGINS='none' keeps verl from loading it" in route["reason"]
    assert re.search(r"\n  verl\.plugins route +no: installed, but VERL_USE_EXTERNAL_PLUGINS='none'", text)
    assert {row["verdict"] for row in report["fixes"]} == {"inactive"}


def test_the_plugin_route_on_a_verl_that_loads_no_plugins_says_so(site, synthetic, tmp_path):
    report, _ = run_doctor([site, synthetic("0.7.1")], tmp_path)
    route = report["routes"]["verl.plugins"]
    assert (route["configured"], route["works"]) == (True, False)
    assert route["reason"] == "installed, but this verl did not load it (verl loads verl.plugins from 0.9.0 on)"


def test_a_checkout_on_pythonpath_declares_no_plugin(synthetic, tmp_path):
    """Only an installed shim has the entry point: a build that left npu_shim.egg-info in the checkout would give it
    to every process with the checkout on PYTHONPATH (tests/helpers.shim_source builds from a copy)."""
    report, _ = run_doctor([ROOT, synthetic("0.9")], tmp_path)
    assert report["probe"]["verl_plugin"] is None, "an npu_shim.egg-info in the checkout? remove it"
    assert report["shim"]["activated_via"] == "sitecustomize"
    assert report["routes"]["verl.plugins"]["configured"] is False
    assert report["routes"]["verl.plugins"]["needed"] is False


# -- judging as on an NPU host where there is none (an image build), and fixes turned off -------------------------


def _on_a_machine_without_an_npu(tree):
    (tree / "verl" / "utils" / "device.py").write_text('def get_device_name():\n    return "cuda"\n')
    return tree


@pytest.mark.parametrize(
    ("route", "expected"),
    [({}, (1, "problem")), ({"VERL_USE_EXTERNAL_MODULES": "npu_shim"}, (0, "ok"))],
    ids=["without the shim", "with the shim"],
)
def test_device_npu_judges_an_image_build_as_on_an_npu_host(site, synthetic, tmp_path, route, expected):
    tree = _on_a_machine_without_an_npu(synthetic("0.7.1"))
    report, status = run_doctor([site, tree], tmp_path, "--device", "npu", **route)
    assert (status, report["status"]) == expected
    assert (report["device"], report["assumed_device"], report["engine_device"]) == ("cuda", "npu", "npu")
    resolves = expected[0] == 0
    assert report["value_model_megatron_resolves"] is resolves
    if not resolves:
        assert report["value_model_megatron_error"] == UNKNOWN_DEVICE
    assert re.search(r"\n  device +cuda; judged as on an npu host \(--device npu\)\n", rendered(report))
    # the lookup was made for npu in the probe only: without the flag, the same machine is not judged
    unjudged, status = run_doctor([site, tree], tmp_path, **route)
    assert (status, unjudged["status"], unjudged["assumed_device"]) == (0, "not judged", None)
    assert "or with --device npu" in rendered(unjudged)


def test_device_npu_where_npu_shim_is_not_importable_still_judges_the_lookup(synthetic, tmp_path, monkeypatch):
    """The probe's own standard-library lookup (a worker without npu_shim) honours the flag too."""
    answer = probe_without_npu_shim(_on_a_machine_without_an_npu(synthetic("0.7.1")), tmp_path, device="npu")
    probed = answer["report"]
    assert "npu_shim is not importable here" in probed["probe"]["report_error"]
    assert (probed["device"], probed["assumed_device"]) == ("cuda", "npu")
    assert probed["value_model_megatron_error"] == UNKNOWN_DEVICE  # verl's words, as in the full report

    report, text, _ = doctor_over(answer, monkeypatch, device="npu")
    assert (report["status"], report["exit_code"]) == ("problem", 1)
    assert "cuda; judged as on an npu host (--device npu)" in text


def test_a_device_the_doctor_cannot_assume_is_refused_with_its_usage(tmp_path):
    assert refused(tmp_path, "--device", "gpu") == (
        "npu-shim doctor: error: argument --device: invalid choice: 'gpu' (choose from 'npu')"
    )


def test_fixes_turned_off_are_named_with_their_verdict_and_unknown_names_with_the_list(site, synthetic, tmp_path):
    off = "value_engine,no_such_fix"
    report, status = run_doctor(
        [site, synthetic("0.7.1")], tmp_path, VERL_USE_EXTERNAL_MODULES="npu_shim", NPU_SHIM_DISABLED_FIXES=off
    )
    assert (status, report["status"]) == (1, "problem"), "without the value engine the critic's lookup fails"
    assert (report["shim"]["disabled_fixes"], report["shim"]["unknown_fixes"]) == (["value_engine"], ["no_such_fix"])
    verdicts = {row["fix"]: row["verdict"] for row in report["fixes"]}
    assert verdicts["value_engine"] == "disabled" and verdicts["shared_repatch"] == "applied"
    assert report["probe"]["environment"]["NPU_SHIM_DISABLED_FIXES"] == off
    names = ", ".join(row["fix"] for row in report["fixes"])
    off_line = f"value_engine (NPU_SHIM_DISABLED_FIXES); no fix is named no_such_fix: ignored (the fixes: {names})"
    assert re.search(r"\n  fixes off +" + re.escape(off_line) + "\n", rendered(report))


def test_an_inactive_shim_says_a_fix_turned_off_would_stay_off(site, synthetic, tmp_path):
    report, _ = run_doctor([site, synthetic("0.7.1")], tmp_path, NPU_SHIM_DISABLED_FIXES="value_engine")
    (row,) = [row for row in report["fixes"] if row["fix"] == "value_engine"]
    assert (row["verdict"], row["would"]) == ("inactive", "disabled")
    assert "inactive (turned off)" in rendered(report)
