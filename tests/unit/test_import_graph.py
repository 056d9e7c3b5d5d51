"""No module of npu_shim, or of its test kit (simulated_npu), imports one that imports it, at module level or inside a
function.

The kit's stand-ins (``kit/simulated_npu/simulated*/``: torch_npu, mindspeed, megatron_adaptor, ...) are top-level
packages where the kit puts them on ``sys.path``: they are read under those names.

Read from the source (every ``import`` statement), not from a run: a cycle through a function-level
import only shows when that function runs. An import of a module's own package is an edge too (``from
npu_shim import VERL_MODULES`` in ``npu_shim.propagation``): where the package's ``__init__`` imports that
module again, at any level, the two depend on each other's order.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import ROOT

KIT = ROOT / "kit" / "simulated_npu"
PACKAGES = (ROOT / "npu_shim", KIT)  # each read under its own name, from the folder that holds it
STAND_IN_ROOTS = sorted(KIT.glob("simulated*"))
# The MindSpeed stand-in keeps real MindSpeed's module names and the way they import each other, a loop included
# (args_utils imports features_manager, whose context-parallel feature imports mindspeed.core.context_parallel,
# whose __init__ imports args_utils; core_r0.16.0): its modules are read but not held to this rule.
MIRRORS_A_LOOP_UPSTREAM = "mindspeed"


def module_names() -> dict[str, Path]:
    names = {}
    for path in (path for package in PACKAGES for path in package.rglob("*.py")):
        holder = next(package.parent for package in PACKAGES if path.is_relative_to(package))
        root = next((stand_ins for stand_ins in STAND_IN_ROOTS if path.is_relative_to(stand_ins)), holder)
        parts = path.relative_to(root).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported_by(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The npu_shim modules ``name`` imports: ``from npu_shim.x import y`` is x.y where y is a module, else x."""

    def known(dotted: str) -> str:
        while dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted

    packages = {module.split(".")[0] for module in modules}
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {known(alias.name) for alias in node.names if alias.name.split(".")[0] in packages}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in packages:
            found |= {known(f"{node.module}.{alias.name}") for alias in node.names}
    return found - {name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each module that reaches itself again, with the way back."""
    found = []
    for start in sorted(graph):
        paths = [[start]]
        seen = set()
        while paths:
            path = paths.pop()
            for other in sorted(graph[path[-1]]):
                if other == start:
                    found.append([*path, start])
                elif other not in seen:
                    seen.add(other)
                    paths.append([*path, other])
    return found


def test_no_module_of_npu_shim_imports_one_that_imports_it():
    modules = module_names()
    graph = {name: imported_by(name, path, modules) for name, path in modules.items()}
    assert graph["npu_shim.catalogue"] >= {"npu_shim.fixes.value_engine", "npu_shim.recognition"}, "the graph is read"
    assert graph["torch_npu._compute"] >= {"torch_npu._tensor", "torch_npu._factories"}, "and the stand-ins' graph"
    assert graph["mindspeed.args_utils"] >= {"mindspeed.features_manager"}, "and MindSpeed's, not held to it"
    assert "npu_shim" in graph["npu_shim.doctor.verl_state"], "and an import of a module's own package"
    assert "simulated_npu" in graph["simulated_npu.pytest_plugin"], "and the kit's own modules"
    assert not any(name.startswith("npu_shim") for name in graph["simulated_npu"]), "the kit needs nothing of the shim"
    held = {
        name: {other for other in imports if other.split(".")[0] != MIRRORS_A_LOOP_UPSTREAM}
        for name, imports in graph.items()
        if name.split(".")[0] != MIRRORS_A_LOOP_UPSTREAM
    }
    assert cycles(held) == []


def test_a_function_level_import_that_closes_a_loop_is_found(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"], ["b", "c", "a", "b"], ["c", "a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_nothing_in_the_shim_knows_the_kit():
    """The shim runs on real NPUs beside a real torch_npu and MindSpeed: it neither imports the kit nor reads its
    marks (the doctor reports torch_npu's version and where MindSpeed came from, which tell a stand-in apart)."""
    shim = [path for path in (ROOT / "npu_shim").rglob("*") if path.suffix in (".py", ".json")]
    assert len(shim) > 20, "the shim's files are read"
    assert [path for path in shim if re.search(r"simulated_npu|\bSIMULATED\b", path.read_text("utf-8"))] == []
