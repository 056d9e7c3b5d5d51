"""Shared helpers for the tests: run Python in a fresh interpreter from a clean environment."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent
BOOTSTRAP_DIR = ROOT / "npu_shim_bootstrap"
MATRIX = ROOT / "tests" / "matrix"
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
# An expression for a child's code (Python 2.7 syntax, after `import sys`): npu_shim.activated_via() there,
# without importing npu_shim, which start-up activates without importing.
SHIM_VIA = (
    "(lambda s: s.activated_via() if s is not None else 'sitecustomize' "
    "if [f for f in sys.meta_path if hasattr(f, 'npu_shim_waiting')] else None)(sys.modules.get('npu_shim'))"
)


def shim_source(directory: Path) -> Path:
    """What building the shim's distribution reads, copied to ``directory``: what to pip-install from.

    The build backend (build_backend/out_of_tree.py) leaves the checkout alone, npu_shim.egg-info included, whose
    entry points every process with the checkout on PYTHONPATH would see (test_distributions holds it to that); the
    tests install these files alone all the same, whatever else lies in the checkout."""
    source = directory / "npu-shim-source"
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    for folder in ("npu_shim", "npu_shim_bootstrap", "build_backend"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return source


# How a test that needs something this machine lacks (another Python, a system python3) ends: never silently green.
# CI (CI=true, `make test` from .ci/run) runs on machines of the kind that has every pyenv Python these tests name
# (docs/testing.md): a missing one there is a failure. Elsewhere (a developer's machine) the test is skipped with
# this prefix, and tests/conftest.py lists every such test at the end of the run (it reads this prefix).
NOT_RUN = "NOT RUN"


def lacking(what: str) -> NoReturn:
    """End the calling test for want of ``what``: a failure under CI, elsewhere a skip named at the end of the run."""
    import pytest

    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{what}: CI's machines have it (docs/testing.md, 'Interpreters the tests need')", pytrace=False)
    pytest.skip(f"{NOT_RUN}: {what}")


def pyenv_python(version: str) -> Path:
    """The interpreter pyenv holds for ``version`` (e.g. "3.12.1"); without it the test ends as :func:`lacking` says."""
    python = PYENV_ROOT / "versions" / version / "bin" / "python"
    if not python.exists():
        lacking(f"pyenv has no Python {version} on this machine")
    return python


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> Any:
        """The JSON object the child printed on its last line of output."""
        lines = self.stdout.strip().splitlines()
        assert lines, f"no output; stderr:\n{self.stderr}"
        return json.loads(lines[-1])


def clean_env(pythonpath: Iterable[os.PathLike[str] | str] = (), **extra: str) -> dict[str, str]:
    """PATH and HOME only, so nothing of the test runner's environment leaks into the child."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
    entries = [os.fspath(entry) for entry in pythonpath]
    if entries:
        env["PYTHONPATH"] = os.pathsep.join(entries)
    env.update(extra)
    return env


def run_python(
    code: str,
    env: Mapping[str, str],
    *,
    args: Iterable[str] = (),
    cwd: os.PathLike[str] | str | None = None,
    timeout: float = 120,
    check: bool = True,
) -> Run:
    return _checked([sys.executable, *args, "-c", code], env, cwd, timeout, check)


def run_python_file(child: os.PathLike[str] | str, env: Mapping[str, str], *argv: str, **options: Any) -> Run:
    """As :func:`run_python` (``options``: its cwd, timeout and check), for a child program kept as a file beside its
    test, which lint reads, with the arguments ``argv``."""
    return _checked([sys.executable, os.fspath(child), *argv], env, **options)


def _checked(
    command: list[str], env: Mapping[str, str], cwd: Any = None, timeout: float = 120, check: bool = True
) -> Run:
    run = run_in_session(command, env, cwd, timeout)
    if check and run.returncode != 0:
        raise AssertionError(f"child exited {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}")
    return run


def port_race(output: str) -> bool:
    """Whether a process of verl's failed because its free port was taken before it could listen (torch's TCPStore).

    verl picks its master port by binding port 0 and closing the socket; the rank that listens on it binds it again
    later, and on a busy machine another process can take it in between. Not an outcome of the code under test: the
    caller retries. (The tests' own ranks meet at the kit's ``rendezvous``, which has no such race.)
    """
    lowered = output.lower()
    return "eaddrinuse" in lowered or "address already in use" in lowered


def matrix_probe() -> ModuleType:
    """tests/matrix/probe.py, whose :func:`start_group` and :func:`finish` run every group of rank processes.

    It lives there, not here, because demo.py and the matrix's child interpreters import it with tests/matrix alone
    on sys.path; the matrix's tests import it by that name, and so does this."""
    if str(MATRIX) not in sys.path:
        sys.path.append(str(MATRIX))
    import probe

    return probe


def run_ranks(
    child: os.PathLike[str] | str,
    env_of_rank: Callable[[int, dict[str, str]], Mapping[str, str]],
    world_size: int = 2,
) -> list[Any]:
    """The child program ``child`` (a file) in ``world_size`` interpreters at once, one per rank (``env_of_rank(rank,
    address)``: each rank's environment, with RANK and the kit's ``rendezvous`` address), each printing a JSON report
    last: the reports, by rank. A rank that fails ends the others (``probe.finish``)."""
    probe = matrix_probe()
    with tempfile.TemporaryDirectory() as directory:
        outputs = [Path(directory, f"rank{rank}.out") for rank in range(world_size)]

        def start_rank(rank: int, output: Path, address: dict[str, str]) -> subprocess.Popen[str]:
            with output.open("w") as stdout:  # a file, as stderr (probe.launch): no pipe for a rank to fill
                return probe.launch([sys.executable, os.fspath(child)], dict(env_of_rank(rank, address)), stdout=stdout)

        ranks = probe.start_group(outputs, start_rank)
        finished = probe.finish({rank: process for rank, (process, _) in enumerate(ranks)}, timeout=300)
        failed = [
            f"rank {rank} exited {status}:\n{stderr[-3000:]}" for rank, (status, stderr) in finished.items() if status
        ]
        assert not failed, "\n".join(failed)
        return [json.loads(output.read_text().strip().splitlines()[-1]) for output in outputs]


def run_in_session(
    command: list[str], env: Mapping[str, str], cwd: os.PathLike[str] | str | None, timeout: float
) -> Run:
    """Run ``command`` in a session of its own; on return or timeout, end every process it started.

    A Ray driver starts a cluster (raylet, GCS, workers) that outlives a killed driver: ending
    the whole session leaves nothing running for the next test, and a timeout still fails the test.
    """
    process = subprocess.Popen(
        command, env=dict(env), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return Run(process.returncode, stdout, stderr)


TABLE_MARK = "<!-- fixes-by-release: the test reads this table -->"


def fixes_by_release() -> dict[str, dict[str, str]]:
    """docs/fixes.md's table of each fix's verdict, per column (a release, and its Megatron if not 0.16.1)."""
    text = (ROOT / "docs" / "fixes.md").read_text(encoding="utf-8").split(TABLE_MARK, 1)[1].strip().splitlines()
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text]
    header, body = rows[0], [row for row in rows[2:] if len(row) == len(rows[0])]
    body = body[: next((i for i, row in enumerate(body) if not row[0].startswith("`")), len(body))]
    return {column: {row[0].split("`")[1]: row[i] for row in body} for i, column in enumerate(header) if i}


def matrix_column() -> str:
    """This environment's column of that table: its verl release, and its megatron-core where that is not 0.16.1."""
    from importlib.metadata import version

    release, megatron = os.environ.get("NPU_SHIM_TEST_VERL", ""), version("megatron-core")
    return release if megatron == "0.16.1" else f"{release}, megatron-core {megatron}"


@dataclass(frozen=True)
class DoctorRun:
    report: dict[str, Any]
    status: int  # the doctor's exit status
    stderr: str


def doctor(env: Mapping[str, str], cwd: Path, *args: str, python: os.PathLike[str] | str = sys.executable,
           entry: Iterable[str] = ("-m", "npu_shim")) -> DoctorRun:  # fmt: skip
    """``npu-shim doctor --json`` started as ``python entry``: the one way every test runs the doctor.

    In a session of its own, so that a timeout ends the probe it starts too. A traceback, or output that is not one
    JSON object, fails the test: bad input gets a clear message from the doctor, never a traceback.
    """
    import pytest

    completed = run_in_session([str(python), *entry, "doctor", "--json", *args], env, cwd, 300)
    assert "Traceback" not in completed.stderr, completed.stderr
    try:
        report = json.loads(completed.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"doctor --json printed no JSON object (exit {completed.returncode}):\n{completed.stdout}\n"
                    f"{completed.stderr}")  # fmt: skip
    assert_consistent(report)
    assert completed.returncode == report["exit_code"]
    return DoctorRun(report, completed.returncode, completed.stderr)


def rendered(report: Mapping[str, Any]) -> str:
    """The doctor's text of the report it printed as ``--json``."""
    from npu_shim.doctor.render import render

    return render(dict(report))


def assert_consistent(report: Mapping[str, Any]) -> None:
    """No two lines of one report contradict each other: every doctor run of the suite (each route x status it
        builds) is checked here. Every key is in every report, and a route says "yes" only where the shim is active (and
    where it is, by a route, unless a plain import activated it)."""
    from npu_shim.doctor.report import EXIT_CODES, blank

    assert set(report) == set(blank()), set(report) ^ set(blank())
    assert report["exit_code"] == EXIT_CODES[report["status"]]
    assert bool(report["problems"]) == (report["status"] == "problem"), report["problems"]
    text = rendered(report)
    if report["routes"] is not None:
        effective, shim = report["routes"]["effective"], report["shim"]
        assert re.findall(r"^  (\S+) route +yes: ", text, re.M) == ([effective] if effective else []), text
        assert shim["active"] if effective else shim["activated_via"] in (None, "import") or not shim["active"], text
        if shim["activated_via"] is None:  # no line may say that something activated it
            assert "already activated" not in text and "activated npu_shim" not in text, text


def run_doctor(pythonpath: Iterable[os.PathLike[str] | str], cwd: Path, *args: str, **env: str) -> tuple[Any, int]:
    """:func:`doctor` from a clean environment whose PYTHONPATH is ``pythonpath``: its report and exit status."""
    run = doctor(clean_env(pythonpath, **env), cwd, *args)
    return run.report, run.status
