"""scripts/suite.py, `make test`'s runner, over a noxfile of three small sessions run side by side by the real nox (the
tool environment's, which `make test` builds before it runs this)."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import ROOT, clean_env, lacking, run_in_session

TOOLS_PYTHON = ROOT / ".cache" / "tools" / "bin" / "python"
NOXFILE = """
import nox

nox.options.allow_parallel = True
nox.options.sessions = ["failing", "passing", "skipping"]


def lines(session, name, count):
    for number in range(count):
        session.run("{python}", "-c", f"import time; print('{{name}} line {{number}}'); time.sleep(0.2)", external=True)


@nox.session(venv_backend="none")
def passing(session):
    lines(session, "passing", 4)


@nox.session(venv_backend="none")
def failing(session):
    lines(session, "failing", 3)
    session.error("the deliberate failure")


@nox.session(venv_backend="none")
def skipping(session):
    session.skip("nothing to do")
"""


def run_suite(tmp_path: Path, *sessions: str, **env: str) -> tuple[int, str]:
    if not TOOLS_PYTHON.exists():
        lacking(f"no tool environment at {TOOLS_PYTHON} (make test builds it)")
    noxfile = tmp_path / "noxfile.py"
    noxfile.write_text(NOXFILE.format(python=TOOLS_PYTHON))
    selected = ["-s", *sessions] if sessions else []
    command = [str(TOOLS_PYTHON), str(ROOT / "scripts" / "suite.py"), "-f", str(noxfile), *selected]
    run = run_in_session(command, clean_env(**env), tmp_path, 120)
    return run.returncode, run.stdout


def test_a_failing_session_exits_non_zero_and_its_whole_log_ends_the_output(tmp_path: Path) -> None:
    status, output = run_suite(tmp_path)
    assert status != 0
    summary, _, ending = output.partition("=== the whole log of failing: aborted ===")
    assert ending, output
    # each session's lines in one block: no line of another session between a session's first and last line
    for session, count in (("failing", 3), ("passing", 4)):
        numbers = [index for index, line in enumerate(summary.splitlines()) if line.startswith(f"{session} line ")]
        assert numbers == list(range(numbers[0], numbers[0] + 2 * count, 2)), summary  # each after nox's command line
    assert re.search(r"^ +\d+\.\d  success  passing$", summary, re.MULTILINE), summary
    assert re.search(r"^ +\d+\.\d  aborted  failing$", summary, re.MULTILINE), summary
    # the failing session's whole block again at the end, and nothing of the passing one there
    printed = [line for line in ending.splitlines() if line.startswith(("failing line", "passing line"))]
    assert printed == [f"failing line {number}" for number in range(3)]
    assert "the deliberate failure" in ending
    assert ending.rstrip().endswith("=== not passed: failing ===")


def test_a_skipped_session_fails_the_run_under_ci_only(tmp_path: Path) -> None:
    assert run_suite(tmp_path, "passing", "skipping", CI="")[0] == 0
    status, output = run_suite(tmp_path, "passing", "skipping", CI="true")
    assert status == 1
    assert "=== the whole log of skipping: skipped (CI is set: every session must run) ===" in output
