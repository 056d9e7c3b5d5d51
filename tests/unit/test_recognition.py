"""The one decision of the fixes that recognise verl's code (npu_shim.recognition), and the table it reads."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from helpers import ROOT

from npu_shim.changes import ChangeSet
from npu_shim.fingerprint import source_fingerprint
from npu_shim.recognition import DATA_FILE, KnownFunction, declared_functions, known_code, replaced_name

OLD = "def build(x):\n    return x + 1\n"
NEW = "def build(x):\n    return x + 2\n"
OTHER = "def build(x):\n    return x\n"  # a known release that does not need the change
PATCHED = "def build(x):\n    return x + 1  # a local patch:\n    print(x)\n"
BUILD = KnownFunction(
    fix="some_fix",
    source="verl/some.py:build",
    missing_in=("0.7.1",),
    fixed_in=("0.8.0",),
    change="verl #1",
    if_left="something fails",
)


def test_the_table_holds_every_release_each_fix_names():
    """Editing a release out of known_code.json fails here (the matrix checks the installed release's code)."""
    table = json.loads((ROOT / "npu_shim" / DATA_FILE).read_text(encoding="utf-8"))
    assert table["functions"] == known_code()
    for known in declared_functions():
        named = (*known.missing_in, *known.fixed_in)
        held = {release for release, fingerprint in table["functions"][known.source].items() if fingerprint}
        assert set(named) <= held, (known.fix, sorted(set(named) - held))
        assert set(named) <= set(table["releases"]), known.fix
    assert {known.source for known in declared_functions()} == set(table["functions"]), (
        "one entry per declared function"
    )


@pytest.fixture
def verl_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A module of a fake verl whose ``build`` is ``source``, judged against a table of three releases."""
    table = {"0.6.1": source_fingerprint(OTHER, "build"), "0.7.1": source_fingerprint(OLD, "build")}
    table["0.8.0"] = source_fingerprint(NEW, "build")
    # a module of ours by its full name: `from npu_shim import ...` would activate the shim in pytest
    monkeypatch.setattr("npu_shim.recognition.known_code", lambda: {BUILD.source: table})

    def load(source: str, version: str = "0.7.1") -> ModuleType:
        monkeypatch.setitem(sys.modules, "verl", SimpleNamespace(__version__=version))
        path = tmp_path / f"some_{len(list(tmp_path.iterdir()))}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


def test_the_releases_code_without_the_change_is_missing_and_applied_once(verl_module):
    module = verl_module(OLD)
    judged = BUILD.judge(module)
    assert (judged.verdict, judged.releases) == ("missing", "0.7.1")
    replacement = lambda x: x  # noqa: E731
    replacement.__npu_shim__ = True
    changes = ChangeSet()
    BUILD.rebind(module, replacement, changes)
    assert module.build is replacement
    assert BUILD.judge(module).verdict == "already applied"
    assert BUILD.judge(module).outcome().verdict == "already applied"
    assert judged.outcome("now adds 2").reason == f"{module.__name__}.build (verl 0.7.1's) now adds 2"
    changes.revert()
    assert BUILD.judge(module).verdict == "missing", "reverted: verl's own function, and nothing kept beside it"
    assert not hasattr(module, replaced_name("build"))


@pytest.mark.parametrize(
    ("source", "version", "verdict", "said"),
    [
        (NEW, "0.8.0", "native", "has verl #1 (the code of verl 0.8.0)"),
        (OTHER, "0.6.1", "not applicable", "is verl 0.6.1's, which has no need of verl #1"),
        (PATCHED, "0.7.1", "unrecognised", "is not the code of verl 0.7.1 (a local patch?): left as verl ships it"),
        (PATCHED, "0.7.1+ascend", "unrecognised", "without verl #1, so something fails"),
        (PATCHED, "0.8.0", "not applicable", "is not the code of a verl release npu_shim knows"),
        (PATCHED, "0.7.2.dev0", "not applicable", "left as verl ships it"),
        ("x = 1\n", "0.7.1", "not applicable", "verl has no "),
    ],
)
def test_each_verdict_from_the_code_and_the_installed_release(verl_module, source, version, verdict, said):
    judged = BUILD.judge(verl_module(source, version))
    assert judged.verdict == verdict
    assert said in judged.reason


def test_the_fix_can_say_the_change_is_missing_where_the_version_cannot(verl_module):
    """lm_engine_repatch: verl's layout says so (no _init_device_mesh), whatever the version."""
    module = verl_module(PATCHED, "0.8.0.dev")
    assert BUILD.judge(module).verdict == "not applicable"
    assert BUILD.judge(module, needed=True).verdict == "unrecognised"


def test_a_function_without_readable_source_is_unrecognised_where_needed(verl_module):
    module = verl_module(OLD)
    namespace: dict = {}
    exec(compile(OLD, "<no file>", "exec"), namespace)
    module.build = namespace["build"]
    judged = BUILD.judge(module)
    assert judged.verdict == "unrecognised"
    assert "its source could not be read" in judged.reason


def test_npu_shims_own_function_bound_by_another_fix_is_not_verls(verl_module):
    module = verl_module("x = 1\n")
    ours = lambda x: x  # noqa: E731
    ours.__npu_shim__ = True
    module.build = ours
    assert BUILD.judge(module).reason.endswith("is npu_shim's own: this verl has none of its own")
