"""MegatronAdaptor before Megatron (issue 34), with real megatron-core and the kit's MegatronAdaptor stand-in.

Processes that never import verl, as vLLM's subprocesses and a test file that imports ``megatron.core`` first:
with the checkout on PYTHONPATH the stand-in (which records the Megatron modules imported before it,
``MEGATRON_FIRST``) comes first; without the shim it does not come at all; without MegatronAdaptor installed
the shim changes nothing. The fast checks (switch, broken MegatronAdaptor, strict mode, late activation) are in
``tests/unit/test_megatron_first.py``; a Ray worker in ``tests/ray/test_megatron_adaptor_ray.py``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run_in_session, run_python_file

from simulated_npu import MEGATRON_ADAPTOR_DIR, simulated_npu_env

# No verl is imported: once beside Megatron 0.18 (MegatronAdaptor's line) and once beside 0.16.1 (on verl 0.7.1).
MEGATRON = importlib.metadata.version("megatron-core")
pytestmark = pytest.mark.skipif(
    not (MEGATRON.startswith("0.18.") or (MEGATRON == "0.16.1" and os.environ.get("NPU_SHIM_TEST_VERL") == "0.7.1")),
    reason="no verl involved: once beside megatron-core 0.18 and once beside 0.16.1",
)

# After a process's imports: the stand-in's record, whether it came before megatron in sys.modules' order, verl.
IMPORTS = Path(__file__).with_name("megatron_imports_child.py")  # its arguments: the modules to import first


def environment(shim: bool, adaptor: bool = True, compute: bool = False) -> dict[str, str]:
    """The kit's simulated NPU on the MindSpeed line with MegatronAdaptor (or without it), the checkout or not."""
    env = simulated_npu_env(
        {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")},
        mindspeed_line="core_r0.18.0",
        megatron_adaptor=adaptor,
        compute=compute,
    )
    if shim:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env["PYTHONPATH"]])
    return env


@pytest.mark.parametrize("compute", [False, True])  # in compute mode the stand-in imports Megatron itself
def test_a_script_that_imports_megatron_core_first_gets_megatron_adaptor_first(tmp_path, compute):
    assert MEGATRON_ADAPTOR_DIR in environment(shim=True)["PYTHONPATH"]
    loaded = run_python_file(IMPORTS, environment(shim=True, compute=compute), "megatron.core", cwd=tmp_path).report
    assert (loaded["adaptor_loaded"], loaded["simulated"], loaded["megatron_first"]) == (True, True, [])
    assert loaded["megatron_core"] and not loaded["verl"]
    # One megatron package, with its own loader (megatron-core's is a namespace package), however it was imported
    assert (loaded["one_megatron"], loaded["megatron_loader"]) == (True, "NamespaceLoader")
    without = run_python_file(IMPORTS, environment(shim=False, compute=compute), "megatron.core", cwd=tmp_path).report
    assert (without["adaptor_loaded"], without["megatron_core"]) == (False, True)


@pytest.mark.parametrize("shim", [True, False])
def test_a_multiprocessing_spawn_child_that_imports_megatron_gets_megatron_adaptor_first(tmp_path, shim):
    """The parent imports nothing of Megatron or MegatronAdaptor; its spawned child imports Megatron."""
    script = Path(__file__).with_name("megatron_spawn_child.py")
    completed = run_in_session([sys.executable, str(script)], environment(shim=shim), tmp_path, 300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    loaded = completed.report
    assert (loaded["verl"], loaded["parent_imported"]) == (False, [])
    if shim:
        assert (loaded["adaptor_loaded"], loaded["megatron_first"]) == (True, [])
    else:
        assert loaded["adaptor_loaded"] is False


def test_without_megatron_adaptor_installed_megatron_imports_exactly_as_before(tmp_path):
    """npu_shim's only trace is its sitecustomize and the watcher it handed over to (which found no MegatronAdaptor),
    with the package and its settings; with MegatronAdaptor installed it imports it."""
    first = ["megatron.core"]
    with_adaptor = run_python_file(IMPORTS, environment(shim=True), *first, cwd=tmp_path).report
    assert with_adaptor["megatron_first"] == []
    with_shim = run_python_file(IMPORTS, environment(shim=True, adaptor=False), *first, cwd=tmp_path).report
    without = run_python_file(IMPORTS, environment(shim=False, adaptor=False), *first, cwd=tmp_path).report
    assert not with_shim["adaptor_loaded"] and with_shim["megatron_core"]
    assert set(with_shim["modules"]) ^ set(without["modules"]) == {
        "sitecustomize",
        "npu_shim",
        "npu_shim.settings",
        "npu_shim.watcher",
    }
    assert with_shim["meta_path"] == ["npu_shim.watcher", *without["meta_path"]]  # in the bootstrap's place


def test_the_stand_in_records_megatron_first_where_it_came_late(tmp_path):
    """The record the tests above read is not always empty: imported after Megatron, it names Megatron's modules."""
    first = ["megatron.core", "megatron_adaptor"]
    loaded = run_python_file(IMPORTS, environment(shim=False), *first, cwd=tmp_path).report
    assert "megatron.core" in loaded["megatron_first"]
    assert json.dumps(loaded["megatron_first"])  # plain names
