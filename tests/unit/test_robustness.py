"""The shim never breaks an interpreter: faults, switches, repeated activation, threads, pickling."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT, clean_env, run_python

DISABLE_HINT = "Set NPU_SHIM_DISABLE=1 to turn the shim off"

# Makes one step of the application raise, in the child, before verl is imported: a part of one fix's record (its
# judgement, or the edits it asks for), or the writer of one kind of edit.
BREAK_STEP = """
import dataclasses
from npu_shim import catalogue, patcher
def _broken(*args, **kwargs):
    raise {fault}("injected fault in {fix}")
if "{part}" == "Writer.export":
    patcher.Writer.export = _broken
else:
    catalogue.FIXES = tuple(
        dataclasses.replace(fix, **{{"{part}": _broken}}) if fix.name == "{fix}" else fix for fix in catalogue.FIXES
    )
"""
STEPS = {
    "shared_repatch": ("shared_repatch", "judge"),
    "value_engine": ("value_engine", "edit"),
    "value_engine_exports": ("value_engine", "Writer.export"),  # after its class was bound and registered
    "lm_engine_repatch": ("lm_engine_repatch", "edit"),  # after value_engine's edits
    "mindspeed_line_repatch": ("mindspeed_line_repatch", "judge"),  # after lm_engine_repatch's
}

STATE = """
import verl.workers.engine as engine
from verl.workers.engine.mindspeed import transformer_impl
print(__import__("json").dumps({
    "value_slots": sorted(engine.EngineRegistry._engines["value_model"]["megatron"]),
    "exports": [n for n in ("MindspeedEngineWithValueHead", "MegatronEngineWithValueHead") if hasattr(engine, n)],
    "all": [n for n in engine.__all__ if "ValueHead" in n],
    "lm_own": sorted(set(transformer_impl.MindspeedEngineWithLMHead.__dict__) & {"__init__", "_init_device_mesh"}),
    "shared": hasattr(transformer_impl, "_mindspeed_repatch"),
}))
"""
UNPATCHED = {"value_slots": ["cuda"], "exports": [], "all": [], "lm_own": ["__init__"], "shared": False}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_fault_at_any_step_leaves_verl_as_it_shipped_with_one_warning(synthetic, run_with, step):
    fix, part = STEPS[step]
    code = "import npu_shim\n" + BREAK_STEP.format(fix=fix, part=part, fault="RuntimeError") + STATE
    run = run_with(code, synthetic("0.7.1"), activation="import", report=False)
    assert run.report == UNPATCHED
    assert run.stderr.count("npu_shim failed while patching verl.workers.engine") == 1
    assert f"injected fault in {fix}" in run.stderr
    assert DISABLE_HINT in run.stderr
    assert "Traceback" not in run.stderr


def test_strict_mode_raises_the_fault(synthetic, run_with):
    code = "import npu_shim\n" + BREAK_STEP.format(fix="value_engine", part="edit", fault="RuntimeError") + STATE
    run = run_with(
        code, synthetic("0.7.1"), activation="import", env={"NPU_SHIM_STRICT": "1"}, report=False, check=False
    )
    assert run.returncode == 1
    assert "RuntimeError: injected fault in value_engine" in run.stderr


def test_a_fault_that_is_not_an_exception_reverts_and_goes_on_up(synthetic, run_with):
    """A KeyboardInterrupt inside a fix (Ctrl-C while verl imports) is the user's: verl's edits so far are reverted,
    nothing is reported as the shim's failure, and the interrupt reaches the code that imported verl."""
    fault = BREAK_STEP.format(fix="value_engine", part="Writer.export", fault="KeyboardInterrupt")
    interrupted = "try:\n    import verl.workers.engine\nexcept KeyboardInterrupt:\n    print('interrupted')\n"
    run = run_with("import npu_shim\n" + fault + interrupted + STATE, synthetic("0.7.1"), activation="import",
                   report=False)  # fmt: skip
    assert run.stdout.splitlines()[0] == "interrupted"
    assert run.report == UNPATCHED
    assert "npu_shim failed" not in run.stderr


@pytest.mark.parametrize(
    ("failure", "advice"),
    [
        ("raise ImportError('synthetic: wrapt fails to import')", DISABLE_HINT),
        (  # not installed at all, as on a bare checkout route
            "raise ModuleNotFoundError(\"No module named 'wrapt'\", name='wrapt')",
            "Install wrapt where verl runs (pip install wrapt), or set NPU_SHIM_DISABLE=1",
        ),
    ],
    ids=["broken", "not installed"],
)
def test_a_wrapt_it_cannot_import_is_reported_once_and_verl_imports(synthetic, run_with, tmp_path, failure, advice):
    blocker = tmp_path / "no-wrapt"
    blocker.mkdir()
    (blocker / "wrapt.py").write_text(failure + "\n")
    code = f"import sys; sys.path.insert(0, {str(blocker)!r})\nimport npu_shim\n" + STATE
    run = run_with(code, synthetic("0.7.1"), activation="import", report=False)
    assert run.report == UNPATCHED
    assert run.stderr.count("npu_shim could not load its import hook") == 1
    assert advice in run.stderr


def test_disable_installs_nothing(synthetic, run_with):
    code = "import json, sys\nfrom npu_shim.settings import WAITING\n"
    code += "print(json.dumps([hasattr(f, WAITING) for f in sys.meta_path]))\n"
    run = run_with(code, synthetic("0.7.1"), env={"NPU_SHIM_DISABLE": "1"})
    finders = json.loads(run.stdout.strip().splitlines()[0])
    assert not any(finders), "npu_shim's watcher is in sys.meta_path"
    run = run_with("import verl.workers.engine\n", synthetic("0.7.1"), env={"NPU_SHIM_DISABLE": "1"})
    assert run.report["value_model"] == {
        "error": "Unknown device: npu for model_type: value_model and backend: megatron"
    }
    assert run.report["activated_via"] is None
    assert "wrapt" not in run.report["loaded"]


@pytest.mark.parametrize("value", ["perhaps", "", "  "], ids=["word", "empty", "blank"])
@pytest.mark.parametrize("variable", ["NPU_SHIM_DISABLE", "NPU_SHIM_STRICT", "NPU_SHIM_PROPAGATE"])
def test_a_bad_switch_value_warns_and_keeps_the_default(synthetic, run_with, variable, value):
    run = run_with("import verl.workers.engine\n", synthetic("0.7.1"), env={variable: value})
    assert f"{variable}={value!r} is not a boolean" in run.stderr
    assert run.stderr.count("is not a boolean") == 1
    assert run.report["value_model"]["shim"] is True  # the defaults: enabled, not strict


@pytest.mark.parametrize("value", ["", " "], ids=["empty", "blank"])
def test_an_empty_propagate_switch_keeps_propagating(tmp_path, value):
    code = f"import os, sys; sys.path.insert(0, {str(ROOT)!r}); import npu_shim; print(os.environ['PYTHONPATH'])"
    run = run_python(code, clean_env(["/first"], NPU_SHIM_PROPAGATE=value), cwd=tmp_path)
    assert run.stdout.strip() == os.pathsep.join([str(ROOT), "/first"])
    assert f"NPU_SHIM_PROPAGATE={value!r} is not a boolean" in run.stderr


def test_any_number_of_activations_inject_once(synthetic, run_with):
    code = """
    import importlib, npu_shim
    importlib.reload(npu_shim)
    npu_shim.activate("import")
    import verl.workers.engine as engine
    import npu_shim.hook as hook
    hook.register()
    hook.on_module_imported(engine)  # a second application finds its own work done
    importlib.reload(npu_shim)
    print(__import__("json").dumps({
        "slots": sorted(engine.EngineRegistry._engines["value_model"]["megatron"]),
        "all": [n for n in engine.__all__ if "ValueHead" in n],
        "verdicts": [o.verdict for o in hook.outcomes],
    }))
    """
    run = run_with(code, synthetic("0.7.1"))
    state = json.loads(run.stdout.strip().splitlines()[-2])
    assert state == {
        "slots": ["cuda", "npu"],
        "all": ["MindspeedEngineWithValueHead", "MegatronEngineWithValueHead"],
        # the critic's forward_step of a synthetic tree is no release's; the next has nothing to do
        # where the shim bound its own _mindspeed_repatch; the tree's verl.utils.device has no get_npu_versions
        "verdicts": ["already applied"] * 3 + ["not applicable"] * 3,
    }
    assert run.report["activated_via"] == "sitecustomize"


def test_eight_threads_importing_verl_at_once_give_one_injection(synthetic, run_with):
    code = """
    import threading
    barrier = threading.Barrier(8)
    errors = []
    def worker():
        barrier.wait()
        try:
            import verl.workers.engine
        except BaseException as error:
            errors.append(repr(error))
    threads = [threading.Thread(target=worker) for _ in range(8)]
    [t.start() for t in threads]; [t.join() for t in threads]
    import verl.workers.engine as engine
    print(__import__("json").dumps({"errors": errors,
        "slots": sorted(engine.EngineRegistry._engines["value_model"]["megatron"]),
        "all": [n for n in engine.__all__ if n == "MindspeedEngineWithValueHead"]}))
    """
    run = run_with(code, synthetic("0.7.1"))
    state = json.loads(run.stdout.strip().splitlines()[-2])
    assert state == {"errors": [], "slots": ["cuda", "npu"], "all": ["MindspeedEngineWithValueHead"]}
    assert run.report["outcomes"]["value_engine"][0] == "applied"


FIX_THAT_IMPORTS = """
import importlib, json, sys, types
from npu_shim import catalogue, hook
from npu_shim.patcher import APPLIED, Outcome

def fix(name, watches, imports=""):
    def apply(module, changes):
        if imports:  # the other module's hook runs inside this fix, in this thread
            importlib.import_module(imports)
        changes.bind(module, "fixed_by", name, ours=False)
        return Outcome(name, APPLIED, "by " + name)
    return types.SimpleNamespace(name=name, watches=watches, known=(), apply=apply)

catalogue.FIXES = (fix("first", "watched_first", imports="watched_second"), fix("second", "watched_second"))
hook.register()
import watched_first
print(json.dumps({
    "outcomes": [[o.fix, o.verdict] for o in hook.outcomes],
    "fixed": [sys.modules[m].fixed_by for m in ("watched_first", "watched_second")],
}))
"""


def test_a_fix_that_imports_a_watched_module_runs_that_modules_fixes_too(tmp_path):
    # Under a lock held over the fixes, the second module's hook would wait for the first's forever.
    for name in ("watched_first", "watched_second"):
        (tmp_path / f"{name}.py").write_text("")
    code = f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(tmp_path)!r}]\n" + FIX_THAT_IMPORTS
    run = run_python(code, clean_env(), cwd=tmp_path, timeout=60)
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {
        "outcomes": [["first", "applied"], ["second", "applied"]],
        "fixed": ["first", "second"],
    }


def test_sixteen_interpreters_started_at_once_all_resolve_the_engine(synthetic, tmp_path):
    tree = synthetic("0.7.1")
    code = (
        "from verl.workers.engine import EngineRegistry\n"
        "print(EngineRegistry.get_engine_cls('value_model', 'megatron').__name__)\n"
    )
    env = clean_env([ROOT, tree])
    children = [
        subprocess.Popen([sys.executable, "-c", code], env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        for _ in range(16)
    ]
    try:
        names = [child.communicate(timeout=120)[0].strip() for child in children]
    finally:  # none left running if one of them hangs
        for child in children:
            child.kill()
            child.wait()
    assert names == ["MindspeedEngineWithValueHead"] * 16
    assert [child.returncode for child in children] == [0] * 16


def test_the_engine_class_pickles_by_reference_into_a_fresh_interpreter(synthetic, run_with, tmp_path):
    tree = synthetic("0.7.1")
    pickled = tmp_path / "engine_class.pickle"
    dump = f"""
    import pickle
    from verl.workers.engine import EngineRegistry
    open({str(pickled)!r}, "wb").write(pickle.dumps(EngineRegistry.get_engine_cls("value_model", "megatron")))
    """
    run_with(dump, tree, report=False)
    load = f"""
    import pickle, sys
    cls = pickle.loads(open({str(pickled)!r}, "rb").read())
    from verl.workers.engine import EngineRegistry
    print(__import__("json").dumps([cls.__module__, cls.__qualname__,
        cls is EngineRegistry._engines["value_model"]["megatron"]["npu"]]))
    """
    loaded = json.loads(run_with(load, tree).stdout.strip().splitlines()[-2])
    assert loaded == ["verl.workers.engine.mindspeed.transformer_impl", "MindspeedEngineWithValueHead", True]


def test_verl_files_are_never_written(synthetic, run_with):
    tree = synthetic("0.7.1")

    def snapshot() -> dict[str, bytes]:
        return {
            str(path.relative_to(tree)): path.read_bytes()
            for path in sorted(tree.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts
        }

    before = snapshot()
    run_with("import verl.workers.engine\n", tree)
    assert snapshot() == before
