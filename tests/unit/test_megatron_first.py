"""MegatronAdaptor before Megatron (issue 34): the watcher's part, with a tiny fake of each in tmp dirs.

Each test starts fresh interpreters from a clean environment: the checkout on PYTHONPATH (npu_shim's
sitecustomize) or not, a fake ``megatron`` that counts its runs, and a fake ``megatron_adaptor`` that records
the Megatron modules imported before it, as the kit's stand-in does. No torch, no real Megatron: the matrix
(``tests/matrix/test_megatron_adaptor_first.py``) and Ray (``tests/ray``) check the same with the kit's stand-in.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, clean_env, pyenv_python, run_python
from test_interpreters import SUPPORTED

# What a process looks like after its imports: the fake MA's record, Megatron's runs, the import order as the
# fakes logged it, and sys.modules and sys.meta_path by name.
REPORT = """
import json, sys
adaptor = sys.modules.get("megatron_adaptor")
print(json.dumps({
    "adaptor_loaded": adaptor is not None,
    "megatron_first": getattr(adaptor, "MEGATRON_FIRST", None),
    "megatron_runs": getattr(sys, "fake_megatron_runs", 0),
    "order": getattr(sys, "fake_import_order", []),
    "modules": sorted(sys.modules),
    "meta_path": [getattr(finder, "__name__", type(finder).__name__) for finder in sys.meta_path],
    "megatron_spec_origin": getattr(getattr(sys.modules.get("megatron"), "__spec__", None), "origin", None),
}))
"""
ADAPTOR = """
import sys
sys.fake_import_order = getattr(sys, "fake_import_order", []) + ["megatron_adaptor"]
MEGATRON_FIRST = sorted(name for name in sys.modules if name.partition(".")[0] == "megatron")
"""
# What of npu_shim a process loads where the watcher lets Megatron by: three modules of the standard library's imports.
FIRST_IMPORT_ONLY = {"npu_shim", "npu_shim.settings", "npu_shim.watcher"}


@pytest.fixture
def fakes(tmp_path: Path) -> dict[str, Path]:
    """Directories each holding one fake: ``megatron`` (with ``megatron.core``), ``megatron_adaptor``, ``mindspeed``."""
    dirs = {name: tmp_path / name for name in ("megatron", "adaptor", "mindspeed", "cwd")}
    for directory in dirs.values():
        directory.mkdir()
    (dirs["megatron"] / "megatron" / "core").mkdir(parents=True)
    (dirs["megatron"] / "megatron" / "__init__.py").write_text(
        "import sys\nsys.fake_megatron_runs = getattr(sys, 'fake_megatron_runs', 0) + 1\n"
        "sys.fake_import_order = getattr(sys, 'fake_import_order', []) + ['megatron']\n"
    )
    (dirs["megatron"] / "megatron" / "core" / "__init__.py").write_text("VALUE = 1\n")
    (dirs["adaptor"] / "megatron_adaptor").mkdir()
    (dirs["adaptor"] / "megatron_adaptor" / "__init__.py").write_text(ADAPTOR)
    (dirs["mindspeed"] / "mindspeed").mkdir()  # MindSpeed core_r0.18.0's __init__ imports MA itself
    (dirs["mindspeed"] / "mindspeed" / "__init__.py").write_text("import megatron_adaptor\nimport megatron.core\n")
    return dirs


def run(code: str, fakes: dict[str, Path], *, shim: bool = True, adaptor: bool = True, **env: str) -> dict:
    entries = [ROOT] if shim else []
    entries += [fakes["megatron"], fakes["mindspeed"], *([fakes["adaptor"]] if adaptor else [])]
    return run_python(code + "\n" + REPORT, clean_env(entries, **env), cwd=fakes["cwd"]).report


@pytest.mark.parametrize(
    "first_import",
    [
        "import megatron.core",
        "from megatron.core import VALUE",
        "import megatron",
        "import importlib; importlib.import_module('megatron.core')",
    ],
)
def test_the_first_import_of_megatron_imports_megatron_adaptor_first_where_the_shim_starts(fakes, first_import):
    loaded = run(first_import, fakes)
    assert loaded["megatron_first"] == []
    assert loaded["order"] == ["megatron_adaptor", "megatron"]
    assert loaded["megatron_runs"] == 1
    assert not any(name.startswith("verl") for name in loaded["modules"])
    # Without the shim on PYTHONPATH, the same script imports Megatron alone.
    without = run(first_import, fakes, shim=False)
    assert (without["adaptor_loaded"], without["order"]) == (False, ["megatron"])


def test_a_megatron_adaptor_that_imports_megatron_itself_runs_megatron_once(fakes):
    """No recursion, no second run of Megatron (Python would load a module found meanwhile again), its own spec."""
    init = fakes["adaptor"] / "megatron_adaptor" / "__init__.py"
    init.write_text(ADAPTOR + "import megatron.core\n")
    loaded = run("import megatron.core", fakes)
    assert loaded["megatron_first"] == []
    assert loaded["order"] == ["megatron_adaptor", "megatron"]
    assert loaded["megatron_runs"] == 1
    assert loaded["megatron_spec_origin"] == str(fakes["megatron"] / "megatron" / "__init__.py")


@pytest.mark.parametrize("version", SUPPORTED)
def test_megatron_runs_once_on_every_supported_python(fakes, version):
    """The hand-back relies on how importlib loads a module that appeared while it searched: each Python."""
    (fakes["adaptor"] / "megatron_adaptor" / "__init__.py").write_text(ADAPTOR + "import megatron.core\n")
    env = clean_env([ROOT, fakes["megatron"], fakes["adaptor"]], PYTHONDONTWRITEBYTECODE="1")
    completed = subprocess.run(
        [str(pyenv_python(version)), "-c", "import megatron.core\n" + REPORT],
        env=env,
        cwd=fakes["cwd"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = json.loads(completed.stdout)
    assert (loaded["megatron_first"], loaded["order"], loaded["megatron_runs"]) == (
        [],
        ["megatron_adaptor", "megatron"],
        1,
    )
    assert loaded["megatron_spec_origin"] == str(fakes["megatron"] / "megatron" / "__init__.py")


def test_a_process_where_mindspeed_imports_megatron_adaptor_is_unchanged(fakes):
    with_shim, without = run("import mindspeed", fakes), run("import mindspeed", fakes, shim=False)
    assert with_shim["order"] == without["order"] == ["megatron_adaptor", "megatron"]
    assert with_shim["megatron_first"] == without["megatron_first"] == []
    # MA was there already: the watcher looks and lets Megatron by, nothing else of npu_shim loaded
    assert {name for name in with_shim["modules"] if name.startswith("npu_shim")} == FIRST_IMPORT_ONLY


def test_without_megatron_adaptor_installed_a_process_imports_exactly_as_before(fakes):
    """Where MA is installed the shim imports it; where not, sys.modules and sys.meta_path are as without the shim
    but for the shim's sitecustomize and the watcher it handed over to at Megatron's first look-up (imported then,
    rather than compiled in every interpreter: docs/costs.md), with the package and its settings."""
    assert run("import megatron.core", fakes)["order"] == ["megatron_adaptor", "megatron"]
    with_shim = run("import megatron.core", fakes, adaptor=False)
    without = run("import megatron.core", fakes, shim=False, adaptor=False)
    assert set(with_shim["modules"]) - set(without["modules"]) == {"sitecustomize", *FIRST_IMPORT_ONLY}
    assert set(without["modules"]) <= set(with_shim["modules"])
    assert with_shim["meta_path"] == ["npu_shim.watcher", *without["meta_path"]]  # in the bootstrap's place
    assert with_shim["order"] == without["order"] == ["megatron"]


@pytest.mark.parametrize(("on", "off"), [("1", "0"), ("on", "off")])
def test_the_switch_turns_it_off(fakes, on, off):
    assert run("import megatron.core", fakes, NPU_SHIM_MEGATRON_ADAPTOR=on)["order"] == ["megatron_adaptor", "megatron"]
    assert run("import megatron.core", fakes, NPU_SHIM_MEGATRON_ADAPTOR=off)["order"] == ["megatron"]


BROKEN = "raise RuntimeError('synthetic: MegatronAdaptor is broken')\n"
WARNING = (
    "npu_shim imported MegatronAdaptor (module megatron_adaptor) before Megatron, and that failed "
    "(RuntimeError: synthetic: MegatronAdaptor is broken); Megatron imports without it."
)


def test_a_broken_megatron_adaptor_is_reported_once_and_megatron_still_imports(fakes):
    (fakes["adaptor"] / "megatron_adaptor" / "__init__.py").write_text(ADAPTOR + BROKEN)
    code = "import megatron.core, megatron.core as again, importlib; importlib.import_module('megatron')"
    env = clean_env([ROOT, fakes["megatron"], fakes["adaptor"]])
    completed = run_python(code + "\n" + REPORT, env, cwd=fakes["cwd"])
    assert completed.stderr.count(WARNING) == 1, completed.stderr
    assert completed.stderr.count("npu_shim") == 1, completed.stderr
    loaded = completed.report
    assert (loaded["adaptor_loaded"], loaded["megatron_runs"]) == (False, 1)
    assert loaded["order"] == ["megatron_adaptor", "megatron"]  # tried first, failed, then Megatron as before


def test_a_broken_megatron_adaptor_raises_in_strict_mode(fakes):
    (fakes["adaptor"] / "megatron_adaptor" / "__init__.py").write_text(ADAPTOR + BROKEN)
    env = clean_env([ROOT, fakes["megatron"], fakes["adaptor"]], NPU_SHIM_STRICT="1")
    completed = run_python("import megatron.core", env, cwd=fakes["cwd"], check=False)
    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines()[-1] == "RuntimeError: synthetic: MegatronAdaptor is broken"
    assert "watcher.py" in completed.stderr  # raised by npu_shim's import of it, not by Megatron's


LATE = f"import sys, megatron.core; sys.path.insert(0, {str(ROOT)!r}); import npu_shim; npu_shim.activate()"
TOO_LATE = "MegatronAdaptor (module megatron_adaptor) came too late: megatron was imported before npu_shim"


@pytest.mark.parametrize(
    ("code", "adaptor", "warnings", "order"),
    [
        (LATE, True, 1, ["megatron"]),  # too late: not imported after Megatron either
        (LATE.replace("megatron.core", "megatron_adaptor, megatron.core"), True, 0, ["megatron_adaptor", "megatron"]),
        (LATE, False, 0, ["megatron"]),  # MA not installed: nothing came too late
        (LATE.replace("import sys, megatron.core;", "import sys;"), True, 0, ["megatron_adaptor", "megatron"]),
    ],
)
def test_activation_after_megatron_warns_once_that_megatron_adaptor_came_too_late(
    fakes, code, adaptor, warnings, order
):
    entries = [fakes["megatron"], *([fakes["adaptor"]] if adaptor else [])]
    completed = run_python(code + "\nimport megatron.core\n" + REPORT, clean_env(entries), cwd=fakes["cwd"])
    assert completed.stderr.count(TOO_LATE) == warnings, completed.stderr
    assert completed.report["order"] == order


@pytest.mark.parametrize(("switch", "warnings"), [("1", 1), ("0", 0), ("off", 0)])
def test_no_late_warning_where_the_switch_turns_megatron_adaptor_first_off(fakes, switch, warnings):
    """Off, the shim would not import MegatronAdaptor first anyway: nothing came too late, so nothing is said."""
    env = clean_env([fakes["megatron"], fakes["adaptor"]], NPU_SHIM_MEGATRON_ADAPTOR=switch)
    completed = run_python(LATE + "\n" + REPORT, env, cwd=fakes["cwd"])
    assert completed.stderr.count(TOO_LATE) == warnings, completed.stderr
    assert completed.report["order"] == ["megatron"]


def test_the_late_warning_is_logged_on_logger_npu_shim(fakes):
    code = "import logging; records = []\n"
    code += "logging.getLogger('npu_shim').addHandler(type('H', (logging.Handler,), {'emit': "
    code += "lambda self, record: records.append((record.name, record.levelname, record.getMessage()))})())\n"
    code += LATE + "\nimport json; print(json.dumps(records))"
    completed = run_python(code, clean_env([fakes["megatron"], fakes["adaptor"]]), cwd=fakes["cwd"])
    [(name, level, message)] = json.loads(completed.stdout.strip().splitlines()[-1])
    assert (name, level) == ("npu_shim", "WARNING")
    assert message.startswith(TOO_LATE)
