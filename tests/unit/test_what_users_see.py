"""What a user sees and can switch in a process the shim changes: the log line, and one fix turned off.

Each test runs a fresh interpreter over a synthetic verl (tests/unit/synthetic_verl.py) with the checkout on
PYTHONPATH, as a container's workers start; the doctor's view of the same switches is in test_doctor.py.
"""

from __future__ import annotations

import pytest

# The fixes that change the synthetic 0.7.1, in catalogue order, and the line that says so.
CHANGED_0_7_1 = ["shared_repatch", "value_engine", "lm_engine_repatch"]
UNKNOWN_DEVICE = "Unknown device: npu for model_type: value_model and backend: megatron"


def changed_line(fixes: list[str]) -> str:
    from helpers import ROOT

    (version,) = [line.split('"')[1] for line in (ROOT / "npu_shim" / "settings.py").read_text().splitlines()
                  if line.startswith("VERSION = ")]  # fmt: skip
    return (
        f"npu_shim {version}: changed verl 0.7.1 in this process: {', '.join(fixes)} "
        "(NPU_SHIM_LOG_LEVEL=WARNING hides this line)"
    )


def applied(report: dict) -> list[str]:
    return [fix for fix, (verdict, _) in report["outcomes"].items() if verdict == "applied"]


def test_a_process_the_shim_changes_says_so_in_one_line_without_any_logging_set_up(synthetic, run_with):
    run = run_with("import verl.workers.engine\n", synthetic("0.7.1"))
    assert applied(run.report) == CHANGED_0_7_1
    assert run.stderr.splitlines() == [changed_line(CHANGED_0_7_1)]


def test_a_process_the_shim_does_not_change_says_nothing(synthetic, run_with):
    """verl 0.9 has every change of its engines (the synthetic one, with MindSpeed's stand-in, needs none)."""
    run = run_with("import verl.workers.engine\n", synthetic("0.9"))
    assert run.report["activated_via"] == "sitecustomize" and run.report["outcomes"], "the hook ran"
    assert applied(run.report) == []
    assert run.stderr == ""


def test_the_line_goes_through_the_applications_logging_once_when_it_set_some_up(synthetic, run_with):
    code = (
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stderr, format='app|%(levelname)s|%(name)s|%(message)s')\n"
        "import verl.workers.engine\n"
    )
    run = run_with(code, synthetic("0.7.1"))
    assert run.stderr.splitlines() == [f"app|INFO|npu_shim|{changed_line(CHANGED_0_7_1)}"]


@pytest.mark.parametrize("level", ["WARNING", "warn", "error", "40"])
def test_npu_shim_log_level_hides_the_line_and_changes_nothing_else(synthetic, run_with, level):
    run = run_with("import verl.workers.engine\n", synthetic("0.7.1"), env={"NPU_SHIM_LOG_LEVEL": level})
    assert run.stderr == ""
    assert applied(run.report) == CHANGED_0_7_1
    assert run.report["value_model"]["shim"] is True


def test_debug_adds_each_fixs_verdict_and_reason(synthetic, run_with):
    run = run_with("import verl.workers.engine\n", synthetic("0.7.1"), env={"NPU_SHIM_LOG_LEVEL": "DEBUG"})
    lines = run.stderr.splitlines()
    assert changed_line(CHANGED_0_7_1) in lines
    for fix, (verdict, reason) in run.report["outcomes"].items():
        assert f"{fix}: {verdict} ({reason})" in lines


def test_a_log_level_it_cannot_read_is_reported_once_and_the_line_still_shows(synthetic, run_with):
    run = run_with("import verl.workers.engine\n", synthetic("0.7.1"), env={"NPU_SHIM_LOG_LEVEL": "loud"})
    assert run.stderr.splitlines() == [
        "NPU_SHIM_LOG_LEVEL='loud' is not a logging level (DEBUG, INFO, WARNING, ERROR); using INFO",
        changed_line(CHANGED_0_7_1),
    ]


# The application sets a level on logger npu_shim before verl is imported (when the shim sets its own): where
# NPU_SHIM_LOG_LEVEL is set, the variable wins; where it is not, the application's level stays.
@pytest.mark.parametrize(
    ("application", "variable", "shown"),
    [("WARNING", "INFO", True), ("DEBUG", "WARNING", False), ("WARNING", None, False)],
)
def test_npu_shim_log_level_wins_over_a_level_the_application_set(synthetic, run_with, application, variable, shown):
    code = (
        f"import logging\nlogging.getLogger('npu_shim').setLevel(logging.{application})\nimport verl.workers.engine\n"
    )
    env = {} if variable is None else {"NPU_SHIM_LOG_LEVEL": variable}
    run = run_with(code, synthetic("0.7.1"), env=env)
    assert run.stderr.splitlines() == ([changed_line(CHANGED_0_7_1)] if shown else [])
    assert applied(run.report) == CHANGED_0_7_1


def test_a_fix_named_in_npu_shim_disabled_fixes_is_not_applied_and_the_others_are(synthetic, run_with):
    env = {"NPU_SHIM_DISABLED_FIXES": "value_engine"}
    run = run_with("import verl.workers.engine\n", synthetic("0.7.1"), env=env)
    assert run.report["outcomes"]["value_engine"] == ["disabled", "turned off by NPU_SHIM_DISABLED_FIXES"]
    assert run.report["value_model"] == {"error": UNKNOWN_DEVICE}  # verl's own, as it ships
    assert applied(run.report) == ["shared_repatch", "lm_engine_repatch"]
    assert run.stderr.splitlines() == [changed_line(["shared_repatch", "lm_engine_repatch"])]


def test_several_fixes_off_with_blanks_and_empty_names(synthetic, run_with):
    env = {"NPU_SHIM_DISABLED_FIXES": " lm_engine_repatch, ,value_engine,"}
    run = run_with("import verl.workers.engine\n", synthetic("0.7.1"), env=env)
    assert applied(run.report) == ["shared_repatch"]
    assert run.report["outcomes"]["lm_engine_repatch"][0] == "disabled"
    assert run.report["language_model"]["shim"] is False
    assert run.stderr.splitlines() == [changed_line(["shared_repatch"])]


def test_every_fix_off_changes_nothing_and_says_nothing(synthetic, run_with):
    from npu_shim.catalogue import fix_names

    env = {"NPU_SHIM_DISABLED_FIXES": ",".join(fix_names())}
    run = run_with("import verl.workers.engine\n", synthetic("0.7.1"), env=env)
    assert {verdict for verdict, _ in run.report["outcomes"].values()} == {"disabled"}
    assert run.report["value_model"] == {"error": UNKNOWN_DEVICE}
    assert run.stderr == ""


def test_an_unknown_fix_name_is_reported_once_with_the_names_and_ignored(synthetic, run_with):
    from npu_shim.catalogue import fix_names

    code = (  # the switch is read at each application: twice more here, as a later watched module would
        "import sys, verl.workers.engine\n"
        "from npu_shim.catalogue import apply_module\n"
        "from npu_shim.patcher import Writer\n"
        "for _ in range(2):\n"
        "    apply_module(sys.modules['verl.workers.engine'], Writer()).clear()\n"
    )
    env = {"NPU_SHIM_DISABLED_FIXES": "value_engin,value_engine,no_such_thing"}
    run = run_with(code, synthetic("0.7.1"), env=env)
    warning = (  # the nearest known name of a misspelt one, none for a name near no fix's
        "NPU_SHIM_DISABLED_FIXES names no fix no_such_thing, value_engin (did you mean value_engine?): ignored. "
        f"The fixes are: {', '.join(fix_names())}"
    )
    assert run.stderr.count("names no fix") == 1, run.stderr
    assert warning in run.stderr.splitlines()
    assert run.report["outcomes"]["value_engine"][0] == "disabled"  # the name it knows is still honoured
