"""The start-up files in interpreters other than the shim's own: other versions, other environments.

Every interpreter that sees a PYTHONPATH runs the ``sitecustomize.py`` on it, so
a container's second Python, a system ``python3`` or a pyenv Python of the same
minor version run the shim's too. They must start silently and get nothing added
to their ``sys.path``. The interpreters are the ones pyenv holds on these
machines; without one a test fails under CI and is listed as not run elsewhere (``helpers.lacking``).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import ROOT, SHIM_VIA, clean_env, lacking, pyenv_python, shim_source

OLD = ["2.7.18", "3.6.15", "3.7.16", "3.8.18", "3.9.18"]  # older than npu_shim's minimum, 3.10
SUPPORTED = ["3.10.13", "3.11.7", "3.12.1", "3.13.0"]

# Python 2.7 syntax: what the interpreter's sys.path is, and whether npu_shim started in it.
STATE = f"import sys, json; print(json.dumps([sys.path, {SHIM_VIA}]))"


def state(python: Path | str, pythonpath: Path, cwd: Path) -> tuple[list[str], str | None]:
    # PYTHONDONTWRITEBYTECODE: Python 2.7 would write sitecustomize.pyc into the checkout.
    completed = subprocess.run(
        [str(python), "-c", STATE],
        env=clean_env([pythonpath], PYTHONDONTWRITEBYTECODE="1"),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (completed.returncode, completed.stderr) == (0, ""), f"{python}: {completed.stderr}"
    path, via = json.loads(completed.stdout)
    return path, via


def assert_nothing_added(python: Path | str, pythonpath: Path, tmp_path: Path) -> None:
    """With ``pythonpath`` the interpreter's sys.path is what an empty directory there would give, and no shim."""
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    with_shim, via = state(python, pythonpath, tmp_path)
    without, _ = state(python, empty, tmp_path)
    assert via is None
    assert [str(empty) if entry == str(pythonpath) else entry for entry in with_shim] == without


@pytest.mark.parametrize("version", OLD)
@pytest.mark.parametrize("route", ["checkout", "installed bootstrap"])
def test_pythons_older_than_3_10_start_silently_and_unchanged(installed_shim, tmp_path, version, route):
    _, site = installed_shim
    pythonpath = ROOT if route == "checkout" else site / "npu_shim_bootstrap"
    assert_nothing_added(pyenv_python(version), pythonpath, tmp_path)


@pytest.mark.parametrize("version", SUPPORTED)
def test_another_environment_gets_nothing_from_an_installed_bootstrap(installed_shim, tmp_path, version):
    _, site = installed_shim
    assert_nothing_added(pyenv_python(version), site / "npu_shim_bootstrap", tmp_path)


@pytest.mark.parametrize("python", ["test runner's venv", "/usr/bin/python3"])
def test_a_python_of_the_same_minor_version_in_another_environment_gets_nothing(installed_shim, tmp_path, python):
    shim_python, site = installed_shim
    other = sys.executable if python == "test runner's venv" else python
    if not Path(other).exists():
        lacking(f"{other} is absent")
    versions = {
        subprocess.run(
            [str(run), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True, check=True
        ).stdout
        for run in (shim_python, other)
    }
    if len(versions) != 1:
        lacking(f"{other} is not of the minor version of the shim's venv")
    assert_nothing_added(other, site / "npu_shim_bootstrap", tmp_path)


@pytest.mark.parametrize("spelling", ["lib", "lib64"])
def test_the_installed_bootstrap_activates_in_its_own_environment(installed_shim, tmp_path, spelling):
    python, site = installed_shim
    venv = python.parent.parent
    bootstrap = venv / spelling / site.relative_to(venv / "lib") / "npu_shim_bootstrap"
    if not bootstrap.is_dir():
        pytest.skip(f"this venv has no {spelling}/ directory")
    path, via = state(python, bootstrap, tmp_path)
    assert via == "sitecustomize"
    assert str(site) in path
    assert path.count(str(site)) == 1, "site-packages added a second time"


def imported_at_start(python: Path, pythonpath: list[Path], cwd: Path) -> list[str]:
    """The modules ``python -X importtime -c pass`` reports importing, in order (its stderr, one line each)."""
    completed = subprocess.run(
        [str(python), "-X", "importtime", "-c", "pass"],
        env=clean_env(pythonpath),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [line for line in completed.stderr.splitlines() if line.startswith("import time:")][1:]  # header first
    return [line.rsplit("|", 1)[1].strip() for line in lines]


def test_the_installed_bootstraps_common_case_imports_no_second_start_up_module(installed_shim, tmp_path):
    """Its own environment, no switch, no later sitecustomize: the bootstrap decides alone, without the chain."""
    python, site = installed_shim
    bootstrap = site / "npu_shim_bootstrap"
    common = imported_at_start(python, [bootstrap], tmp_path)
    assert "sitecustomize" in common
    assert not [name for name in common if "npu_shim" in name], common
    # The same probe sees the chain where it is needed: a later sitecustomize to run after the shim's.
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "sitecustomize.py").write_text("")
    assert "_npu_shim_chain" in imported_at_start(python, [bootstrap, tmp_path / "own"], tmp_path)


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_checkout_route_works_in_every_supported_python(tmp_path, version):
    path, via = state(pyenv_python(version), ROOT, tmp_path)
    assert via == "sitecustomize"
    assert path.count(str(ROOT)) == 1


MODULES = "import sys; print(repr(sorted(sys.modules)))"  # json would be one more module: repr imports none


@pytest.mark.parametrize("bytecode", ["cached", "none"])
@pytest.mark.parametrize("version", SUPPORTED)
def test_start_up_imports_no_module_an_empty_sitecustomize_does_not(tmp_path, version, bytecode):
    """The shim's start-up only puts its finder in sys.meta_path: it imports nothing, with or without bytecode."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "sitecustomize.py").write_text("")
    extra = {"PYTHONDONTWRITEBYTECODE": "1"} if bytecode == "none" else {}
    python = str(pyenv_python(version))
    loaded = []
    for entry in (ROOT, empty):
        if bytecode == "cached":  # a first start writes it
            subprocess.run([python, "-c", "pass"], env=clean_env([entry]), cwd=tmp_path, check=True, timeout=60)
        completed = subprocess.run(
            [python, "-c", MODULES],
            env=clean_env([entry], **extra),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        loaded.append(ast.literal_eval(completed.stdout))
    assert loaded[0] == loaded[1]


def test_another_environment_still_runs_its_own_later_sitecustomize(installed_shim, tmp_path):
    _, site = installed_shim
    own = tmp_path / "own-site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("OWN = True\n")
    code = "import sys, sitecustomize; print(getattr(sitecustomize, 'OWN', False), 'npu_shim' in sys.modules)"
    completed = subprocess.run(
        [str(pyenv_python("3.12.1")), "-c", code],
        env=clean_env([site / "npu_shim_bootstrap", own]),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (completed.returncode, completed.stderr, completed.stdout.split()) == (0, "", ["True", "False"])


def start(
    python: Path | str, pythonpath: list[Path], cwd: Path, code: str = "pass", **env: str
) -> tuple[int, str, str]:
    completed = subprocess.run(
        [str(python), "-c", code],
        env=clean_env(pythonpath, PYTHONDONTWRITEBYTECODE="1", **env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return completed.returncode, completed.stdout, completed.stderr


# A sitecustomize of the interpreter's own (Python 2.7 syntax), and ones that fail as a broken one would.
OWN = 'import sys\nsys.stderr.write("own sitecustomize ran\\n")\nOWN = True\n'
BROKEN = 'raise ValueError("the container\'s own sitecustomize is broken")\n'
MISSING_IMPORT = "import npu_shim_test_no_such_module\n"  # 2.7's site is silent about any ImportError, 3.x's not
ABSENT = 'error = ImportError("no sitecustomize")\nerror.name = "sitecustomize"\nraise error\n'  # 3.x: silent too
OWN_FILES = {"own": OWN, "broken": BROKEN, "missing import": MISSING_IMPORT, "as if absent": ABSENT}

# Python 2.7 syntax: whether the interpreter's own sitecustomize is what `import sitecustomize` gives, and the shim.
OWN_STATE = (
    "import sys; sys.stdout.write('%s %s' % "
    "(getattr(sys.modules.get('sitecustomize'), 'OWN', False), 'npu_shim' in sys.modules))"
)


def site_reports(version: str, kind: str) -> str:
    """What the interpreter's own ``site`` writes to stderr for that sitecustomize (read from each site.py)."""
    if kind == "own":
        return "own sitecustomize ran\n"
    python2 = version.startswith("2.")
    if kind == "broken":
        return (
            "'import sitecustomize' failed; use -v for traceback\n"
            if python2
            else "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
            "ValueError: the container's own sitecustomize is broken\n"
        )
    if kind == "missing import" and not python2:
        return (
            "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
            "ModuleNotFoundError: No module named 'npu_shim_test_no_such_module'\n"
        )
    return ""  # 2.7: any ImportError; 3.x: one that names sitecustomize itself


@pytest.mark.parametrize("version", OLD)
@pytest.mark.parametrize("route", ["checkout", "installed bootstrap"])
@pytest.mark.parametrize("kind", list(OWN_FILES))
def test_pythons_older_than_3_10_run_their_own_later_sitecustomize_exactly_as_without_the_shim(
    installed_shim, tmp_path, version, route, kind
):
    _, site = installed_shim
    shim = ROOT if route == "checkout" else site / "npu_shim_bootstrap"
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "sitecustomize.py").write_text(OWN_FILES[kind])
    python = pyenv_python(version)
    with_shim = start(python, [shim, tmp_path / "own"], tmp_path, OWN_STATE)
    without = start(python, [tmp_path / "own"], tmp_path, OWN_STATE)
    assert with_shim == without
    assert with_shim == (0, "True False" if kind == "own" else "False False", site_reports(version, kind))


@pytest.mark.parametrize("version", OLD)
@pytest.mark.parametrize("route", ["checkout", "installed bootstrap"])
@pytest.mark.parametrize("where", ["behind an entry without one", "in the user site-packages"])
def test_pythons_older_than_3_10_find_their_own_sitecustomize_past_entries_without_one(
    installed_shim, tmp_path, version, route, where
):
    """Not only right after the shim's entry: later on PYTHONPATH, or in site-packages behind python27.zip & co."""
    _, site = installed_shim
    shim = ROOT if route == "checkout" else site / "npu_shim_bootstrap"
    python = pyenv_python(version)
    empty, base = tmp_path / "empty", tmp_path / "userbase"
    empty.mkdir()
    if where == "in the user site-packages":
        major_minor = "python" + ".".join(version.split(".")[:2])
        own = base / "lib" / major_minor / "site-packages"
        pythonpath = [empty]
    else:
        own = tmp_path / "own"
        pythonpath = [empty, own]
    own.mkdir(parents=True)
    (own / "sitecustomize.py").write_text(OWN)
    with_shim = start(python, [shim, *pythonpath], tmp_path, OWN_STATE, PYTHONUSERBASE=str(base))
    without = start(python, pythonpath, tmp_path, OWN_STATE, PYTHONUSERBASE=str(base))
    assert with_shim == without == (0, "True False", "own sitecustomize ran\n")


def test_a_python_3_9_venv_runs_the_sitecustomize_in_its_site_packages(tmp_path):
    python = pyenv_python("3.9.18")
    venv = tmp_path / "venv"
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (venv / "lib" / "python3.9" / "site-packages" / "sitecustomize.py").write_text(OWN)
    assert start(venv / "bin" / "python", [ROOT], tmp_path)[2] == "own sitecustomize ran\n"


# Every kind of interpreter that may start with an installed bootstrap on PYTHONPATH: the shim's own
# (a venv of the runner's Python), one of the same minor version elsewhere, other versions, 2.7.
OTHERS = ["3.11.7", "3.12.1", "3.13.0", "3.10.13", "3.9.18", "3.6.15", "2.7.18"]


def install(tmp_path: Path, *options: str) -> tuple[list[str], Path, Path]:
    """npu_shim pip-installed (with ``options``) into a new venv: (the pip command for that venv, its python, its
    site-packages)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    subprocess.run(
        [*pip, "install", "-q", "--no-deps", *options, str(shim_source(tmp_path))],
        check=True,
        capture_output=True,
        timeout=300,
    )
    site = Path(run_in(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    assert (site / "npu_shim").is_dir()
    return pip, python, site


def start_each(interpreters: list[Path], site: Path, tmp_path: Path) -> None:
    """Each interpreter started with the installed bootstrap on PYTHONPATH, alone and before a later sitecustomize."""
    bootstrap = site / "npu_shim_bootstrap"
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("OWN = True\n")
    for interpreter in interpreters:
        for pythonpath in ([bootstrap], [bootstrap, own]):  # the chain to a later sitecustomize too
            completed = subprocess.run(
                [str(interpreter), "-c", "pass"],
                env=clean_env(pythonpath),  # bytecode written, as by default
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert (completed.returncode, completed.stderr) == (0, ""), interpreter


def tree(site: Path, top: str) -> list[str]:
    return sorted(str(path.relative_to(site)) for path in [site / top, *(site / top).rglob("*")] if path.exists())


def test_pip_uninstall_leaves_nothing_importable_whatever_other_interpreters_ran(tmp_path):
    """Each interpreter writes bytecode of the bootstrap it imports, and pip removes only its own interpreter's: what
    others wrote stays in npu_shim_bootstrap/, beside the package and not in it, so npu_shim/ goes whole (an npu_shim/
    left behind would still import, as an empty namespace package)."""
    pip, python, site = install(tmp_path)
    start_each([python, *map(pyenv_python, OTHERS)], site, tmp_path)
    subprocess.run([*pip, "uninstall", "-q", "-y", "npu-shim"], check=True, capture_output=True, timeout=300)
    assert tree(site, "npu_shim") == []
    assert all("__pycache__" in path or path.endswith(".pyc") for path in tree(site, "npu_shim_bootstrap")[1:])
    assert run_in(python, "import importlib.util; print(importlib.util.find_spec('npu_shim'))") == "None"


def test_other_interpreters_leave_an_installed_package_as_they_found_it(tmp_path):
    """Installed without bytecode, as uv installs: no interpreter that starts with the bootstrap, whichever npu_shim
    serves, writes into the package or deletes anything; their bytecode of the bootstrap is Python's own, beside it."""
    _, _, site = install(tmp_path, "--no-compile")
    installed, bootstrap = tree(site, "npu_shim"), tree(site, "npu_shim_bootstrap")
    assert not [path for path in installed + bootstrap if "__pycache__" in path or path.endswith(".pyc")]
    start_each(list(map(pyenv_python, OTHERS)), site, tmp_path)
    assert tree(site, "npu_shim") == installed, "made or removed by other interpreters"
    assert set(bootstrap) <= set(tree(site, "npu_shim_bootstrap")), "removed by other interpreters"


def run_in(python: Path, code: str) -> str:
    """``python -c code`` from an empty directory (a checkout's npu_shim must not be found); its output."""
    empty = Path(tempfile.mkdtemp())
    return subprocess.run(
        [str(python), "-c", code], env=clean_env(), cwd=empty, capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def test_an_offline_install_builds_with_the_environments_own_setuptools(tmp_path):
    """No index to fetch a build backend from: pip builds with the setuptools already installed."""
    from importlib.metadata import version

    assert int(version("setuptools").split(".")[0]) < 77, "this test is about a setuptools older than PEP 639's"
    target = tmp_path / "target"
    offline = ["--no-index", "--no-build-isolation", "--no-deps"]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", *offline, "--target", str(target), str(shim_source(tmp_path))],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert (target / "npu_shim_bootstrap" / "sitecustomize.py").is_file()
