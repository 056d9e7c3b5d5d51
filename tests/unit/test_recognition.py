"""The one decision of the fixes that recognise verl's code (npu_shim.recognition), and the table it reads."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from helpers import ROOT

from npu_shim.catalogue import declared_functions
from npu_shim.fingerprint import function_fingerprint, source_fingerprint
from npu_shim.patcher import MISSING, NATIVE, NOT_APPLICABLE, Writer, get_original, was_replaced
from npu_shim.recognition import DATA_FILE, KnownFunction, Rebinding, known_code

OLD = "def build(x):\n    return x + 1\n"
NEW = "def build(x):\n    return x + 2\n"
OTHER = "def build(x):\n    return x\n"  # a known release that does not need the change
PATCHED = "def build(x):\n    return x + 1  # a local patch:\n    print(x)\n"


def adds_one(x: int) -> int:
    return x + 1


BUILD = Rebinding(
    fix="some_fix",
    source="verl/some.py:build",
    missing_in=("0.7.1",),
    fixed_in=("0.8.0",),
    change="verl #1",
    if_left="something fails",
    replacement=adds_one,
    applied="now adds 2",
)
BUILD_FIX = BUILD.as_fix()


def test_the_table_holds_every_release_each_fix_names():
    """Editing a release out of known_code.json fails here (the matrix checks the installed release's code)."""
    table = json.loads((ROOT / "npu_shim" / DATA_FILE).read_text(encoding="utf-8"))
    for known in declared_functions():
        named = (*known.missing_in, *known.fixed_in)
        held = {release for release, fingerprint in table["functions"][known.source].items() if fingerprint}
        assert set(named) <= held, (known.fix, sorted(set(named) - held))
        assert set(named) <= set(table["releases"]), known.fix
    assert {known.source for known in declared_functions()} == set(table["functions"]), (
        "one entry per declared function"
    )


def owner_of(known: KnownFunction, tmp_path: Path) -> object:
    """A module or class whose attribute ``known`` looks at is a function of ours, read from a file."""
    path = tmp_path / f"code_{len(list(tmp_path.iterdir()))}.py"
    path.write_text(f"def {known.attribute}(*args):\n    return args\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    owner_name = known.qualname.rpartition(".")[0]
    if owner_name:
        return type(owner_name, (), {known.attribute: namespace[known.attribute]})
    module = ModuleType("verl_module")
    setattr(module, known.attribute, namespace[known.attribute])
    return module


@pytest.mark.parametrize("known", declared_functions(), ids=lambda known: known.fix)
def test_each_releases_code_is_judged_as_its_fix_names_that_release(known, tmp_path, monkeypatch):
    """Code the table holds for a release, judged as at run time: missing only where the fix names the release as
    lacking the change, native only where it names it as having it. A release without the change whose code is the
    same as one with it (or a table entry that takes another release's code) makes one of them judged wrongly."""
    table = known_code()[known.source]
    known = dataclasses.replace(known, needs_nothing=None)  # the code's verdict; what Megatron or MindSpeed add: below
    code = owner_of(known, tmp_path)
    ours = function_fingerprint(vars(code)[known.attribute])
    for release, fingerprint in table.items():
        if fingerprint is None:  # no such function in that release: nothing to judge
            continue
        # the function stands for this release's code: every release with that code gets its fingerprint
        as_release = {
            other: ours if known_print == fingerprint else known_print for other, known_print in table.items()
        }
        monkeypatch.setattr("npu_shim.recognition.known_code", lambda as_release=as_release: {known.source: as_release})
        monkeypatch.setitem(sys.modules, "verl", SimpleNamespace(__version__=release))
        expected = MISSING if release in known.missing_in else NATIVE if release in known.fixed_in else NOT_APPLICABLE
        judged = known.judge(code)
        assert judged.verdict == expected, (release, judged.reason)


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


def test_the_releases_code_without_the_change_is_missing_and_applied_once(verl_module, monkeypatch):
    module = verl_module(OLD)
    shipped = module.build
    judged = BUILD.judge(module)
    assert (judged.verdict, judged.reason) == ("missing", f"{module.__name__}.build (verl 0.7.1's)")
    monkeypatch.setitem(sys.modules, "verl.some", module)  # where the fix reads it, as at run time
    changes = Writer()
    outcome = BUILD_FIX.apply(module, changes)
    assert (outcome.verdict, outcome.reason) == ("applied", f"{module.__name__}.build (verl 0.7.1's) now adds 2")
    assert module.build is adds_one
    assert get_original(module, "build") is shipped, "verl's own, in the one registry"
    assert BUILD.judge(module).verdict == "missing", "the judgement reads verl's own code, through the registry"
    assert BUILD_FIX.apply(module, changes).verdict == "already applied", "decided once, by the fix's apply"
    assert module.build is adds_one
    changes.revert()
    assert module.build is shipped
    assert BUILD.judge(module).verdict == "missing", "reverted: verl's own function, and nothing kept for it"
    assert not was_replaced(module, "build")


def test_a_reverted_rebinding_leaves_nothing_recorded(verl_module, monkeypatch):
    """After a revert the owner is as if never touched: npu_shim's function bound there later (as shared_repatch
    binds a name verl lacks) is npu_shim's own, not a replacement of verl's, and nothing of verl's is kept."""
    module = verl_module(OLD)
    monkeypatch.setitem(sys.modules, "verl.some", module)
    changes = Writer()
    BUILD_FIX.apply(module, changes)
    changes.revert()
    module.build = adds_one
    assert not was_replaced(module, "build")
    assert get_original(module, "build") is adds_one
    assert BUILD.judge(module).reason.endswith("is npu_shim's own: this verl has none of its own")


def test_a_function_bound_by_two_names_is_rebound_under_both(verl_module, monkeypatch):
    """vlm_mask_on_npu: verl's caller imported the function by name; both names get the replacement, and both
    are verl's own again after a revert."""
    defining, caller = verl_module(OLD), verl_module("build = None  # bound below, as `from verl.some import build`\n")
    caller.build = defining.build
    monkeypatch.setitem(sys.modules, "verl.some", defining)
    monkeypatch.setitem(sys.modules, "verl.caller", caller)
    shipped = defining.build
    both = dataclasses.replace(BUILD, bound_in=("verl.caller", "verl.some"))
    changes = Writer()
    assert both.as_fix().apply(defining, changes).reason == f"{caller.__name__}.build (verl 0.7.1's) now adds 2"
    assert (caller.build, defining.build) == (adds_one, adds_one)
    changes.revert()
    assert (caller.build, defining.build) == (shipped, shipped)


def test_a_name_verl_bound_again_gets_the_fix_again_and_the_registry_keeps_verls_own(verl_module, monkeypatch):
    """A function rebound under two names, then verl's own bound again under one of them (its module reloaded): not
    "already applied" (one name is verl's again), but applied again; the registry keeps verl's own function under
    both names, never npu_shim's (the first original wins, whichever names a later application binds over)."""
    defining, caller = verl_module(OLD), verl_module("build = None  # bound below, as `from verl.some import build`\n")
    caller.build = defining.build
    monkeypatch.setitem(sys.modules, "verl.some", defining)
    monkeypatch.setitem(sys.modules, "verl.caller", caller)
    shipped = defining.build
    fix = dataclasses.replace(BUILD, bound_in=("verl.caller", "verl.some")).as_fix()
    changes = Writer()
    assert fix.apply(defining, changes).verdict == "applied"
    caller.build = shipped  # what a reload of the caller does: verl's own name again
    assert fix.apply(defining, changes).verdict == "applied"
    assert (caller.build, defining.build) == (adds_one, adds_one)
    assert (get_original(caller, "build"), get_original(defining, "build")) == (shipped, shipped)
    changes.revert()
    assert (caller.build, defining.build) == (shipped, shipped)


def test_a_module_imported_afresh_is_judged_afresh(verl_module, monkeypatch):
    """verl's own function bound again over npu_shim's (a reload) is verl's: missing, not already applied."""
    module = verl_module(OLD)
    monkeypatch.setitem(sys.modules, "verl.some", module)
    changes = Writer()
    BUILD_FIX.apply(module, changes)
    exec(compile(OLD, module.__file__, "exec"), vars(module))  # what importlib.reload does to the module
    assert BUILD.judge(module).verdict == "missing"
    assert BUILD_FIX.apply(module, changes).verdict == "applied"
    assert module.build is adds_one
    changes.revert()


def test_a_function_the_table_lacks_is_a_verdict_not_an_error(verl_module, monkeypatch):
    """A declaration without an entry in known_code.json (a broken install) is judged unrecognised where the
    version says the change is missing, and not applicable elsewhere: no KeyError reverts the module's fixes."""
    monkeypatch.setattr("npu_shim.recognition.known_code", lambda: {})
    judged = BUILD.judge(verl_module(OLD, "0.7.1"))
    assert judged.verdict == "unrecognised"
    assert "known_code.json has no entry for it" in judged.reason
    assert BUILD.judge(verl_module(OLD, "0.8.0")).verdict == "not applicable"


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
    assert dataclasses.replace(BUILD, needed_on_any_version=True).judge(module).verdict == "unrecognised"


@pytest.mark.parametrize("source", [OLD, PATCHED])
def test_a_fix_can_say_this_verl_needs_nothing_and_that_verl_has_the_change(verl_module, source):
    """moe_layer_offset: the Megatron beside verl takes what verl passes; lm_engine_repatch: verl's layout has it."""
    module = verl_module(source)
    beside = dataclasses.replace(BUILD, needs_nothing=lambda owner: f"{owner.__name__} needs nothing")
    assert (beside.judge(module).verdict, beside.judge(module).reason) == (
        "not applicable",
        f"{module.__name__} needs nothing",
    )
    has_it = dataclasses.replace(BUILD, has_change=lambda owner: "it has it")
    assert (has_it.judge(module).verdict, has_it.judge(module).reason) == ("native", "it has it")
    quiet = dataclasses.replace(BUILD, needs_nothing=lambda owner: "", has_change=lambda owner: "")
    assert (
        quiet.judge(module).verdict == BUILD.judge(module).verdict == ("missing" if source == OLD else "unrecognised")
    )


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


# -- scripts/fingerprints.py, on synthetic wheels: nothing of verl's is downloaded or copied ------------------------

GENERATOR = ROOT / "scripts" / "fingerprints.py"


def module_text(qualnames: list[str], returned: int) -> str:
    """A module defining each ``qualname`` (``f`` or ``Class.method``), each returning ``returned``."""
    classes: dict[str, list[str]] = {}
    for qualname in qualnames:
        owner, _, name = qualname.rpartition(".")
        classes.setdefault(owner, []).append(name)
    text = "".join(f"def {name}(*args):\n    return {returned}\n\n" for name in classes.pop("", []))
    for owner, names in classes.items():
        text += f"class {owner}:\n" + "".join(f"    def {name}(self):\n        return {returned}\n" for name in names)
    return text


def synthetic_wheel(directory: Path, release: str, files: dict[str, str]) -> Path:
    wheel = directory / f"verl-{release}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("verl/__init__.py", f"__version__ = {release!r}\n")
        for member, text in files.items():
            archive.writestr(member, text)
    return wheel


def generate(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATOR), *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_generator_reads_each_wheels_functions_and_names_what_a_release_lacks(tmp_path):
    """Released wheels in, the table out: a wheel without the function's file, or without the function, gives null."""
    files: dict[str, list[str]] = {}
    for known in declared_functions():
        files.setdefault(known.file, []).append(known.qualname)
    wheels = [
        synthetic_wheel(tmp_path, "0.6.0", {}),  # none of the files
        synthetic_wheel(tmp_path, "0.7.1", dict.fromkeys(files, "x = 1\n")),  # the files, none of the functions
        synthetic_wheel(tmp_path, "0.10.0", {member: module_text(names, 1) for member, names in files.items()}),
        synthetic_wheel(tmp_path, "0.9.1", {member: module_text(names, 2) for member, names in files.items()}),
    ]
    table = tmp_path / "known_code.json"
    written = generate(*wheels, "--table", table)
    assert written.returncode == 0, written.stderr
    generated = json.loads(table.read_text())
    assert generated["releases"] == ["0.6.0", "0.7.1", "0.9.1", "0.10.0"], "by version, not by name"
    assert list(generated["functions"]) == list(dict.fromkeys(known.source for known in declared_functions()))
    for source, by_release in generated["functions"].items():
        member, _, qualname = source.partition(":")
        assert by_release["0.6.0"] is None and by_release["0.7.1"] is None, source
        assert by_release["0.9.1"] == source_fingerprint(module_text(files[member], 2), qualname) is not None
        assert by_release["0.10.0"] == source_fingerprint(module_text(files[member], 1), qualname) is not None
        assert by_release["0.9.1"] != by_release["0.10.0"], source
    written_text = table.read_text()
    same = generate(*reversed(wheels), "--check", "--table", table)
    assert same.returncode == 0 and "up to date" in same.stdout, same.stdout + same.stderr
    stale = generate(*wheels[1:], "--check", "--table", table)
    assert stale.returncode == 1 and "out of date" in stale.stdout, "a release missing from the wheels given"
    assert table.read_text() == written_text, "--check writes nothing"
