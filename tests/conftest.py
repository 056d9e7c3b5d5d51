"""Having this file here puts tests/ on sys.path, so test modules can import ``helpers``.

It also guards the pytest process itself: importing npu_shim's modules by their full names
(the kit, the fixes' constants) must leave it as it was, so no test, and no test module's
import, may leave the shim activated here or ``PYTHONPATH`` changed. Tests activate the shim
in child interpreters.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _shim_state() -> tuple[str | None, str | None]:
    shim = sys.modules.get("npu_shim")
    return (shim.activated_via() if shim is not None else None), os.environ.get("PYTHONPATH")


# Measured when pytest loads this file, before it collects (imports) any test module: a module whose
# own import activates the shim or rewrites PYTHONPATH would otherwise be in every test's "before".
_AT_START = _shim_state()
_CHANGED = "the pytest process is no longer as pytest started (shim activated via, PYTHONPATH)"


@pytest.fixture(autouse=True)
def _the_test_process_stays_unpatched() -> Iterator[None]:
    before = _shim_state()
    assert before == _AT_START, f"{_CHANGED} before this test ran (a test module's import?): {_AT_START} -> {before}"
    yield
    after = _shim_state()
    assert after == _AT_START, f"{_CHANGED}: the test left the shim activated: {_AT_START} -> {after}"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Also when no test ran after the change (a module imported at collection whose tests were all skipped)."""
    end = _shim_state()
    if end != _AT_START:
        sys.stderr.write(f"\n{_CHANGED} at the end of the session: {_AT_START} -> {end}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


NOT_RUN = "NOT RUN"  # helpers.lacking's prefix (this file stands alone: tests/unit/test_guard.py copies it)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Every test skipped for want of an interpreter or tool (helpers.lacking), one line each: not run, not green.
    Then each test file's time (set-up, call and tear-down of its tests, summed), longest first: what an environment's
    share of `make test`'s budget goes to (docs/costs.md)."""
    _not_run_summary(terminalreporter)
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                path = report.nodeid.partition("::")[0]
                seconds[path] = seconds.get(path, 0.0) + report.duration
    if seconds:
        terminalreporter.section("seconds per test file", sep="-")
        for path, total in sorted(seconds.items(), key=lambda item: -item[1])[:12]:
            terminalreporter.write_line(f"{total:8.1f} s  {path}")


def _not_run_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = []
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if NOT_RUN in reason:
            lines.append(f"{NOT_RUN}: {report.nodeid}: {reason.partition(NOT_RUN + ': ')[2]}")
    if lines:
        terminalreporter.section(f"{len(lines)} tests not run: this machine lacks what they need", sep="-")
        for line in lines:
            terminalreporter.write_line(line)


# The files whose child interpreters take longest (one to four minutes a release), first: `make test` gives a
# release's files to two xdist workers a file at a time, in this order (noxfile.py: --dist=loadfile
# --no-loadscope-reorder), and a long file taken last would keep one worker busy while the other idles.
LONGEST_FIRST = (
    "e2e/test_verl_workers.py",
    "matrix/test_training.py",
    "matrix/test_matrix.py",
    "ray/test_verl_route.py",
    "kit/test_parallel_kit.py",
    "matrix/test_upstream_fixes.py",
    "matrix/test_plugin_route.py",
    "matrix/test_context_parallel.py",
)
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.path.relative_to(TESTS).as_posix()
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: a file's tests stay together, in their order
