"""The ``torch_npu.*`` and ``torch.npu.*`` names verl and MindSpeed use, read from their source as data: verl's wheels
(downloaded --no-deps, never installed) and MindSpeed's source at ``tests/mindspeed_source.py``'s pins."""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from real_torch_npu import dotted, parsed

# torch_npu's packages whose attributes callers reach through them (torch_npu.npu.mstx, torch_npu.utils.X): named to
# their third part; any other torch_npu.X.Y is an attribute of X (a tensor class's method, a dtype's field).
PACKAGES = ("npu", "contrib", "utils", "profiler", "_C")
# MindSpeed's MindSpore backend: run under MindSpore, never beside torch, so never on the kit's paths.
NOT_TORCH = "mindspeed/mindspore/"


@dataclass
class Scan:
    """What verl and MindSpeed use: each name and the files (``<wheel or tree>:<path>``) that use it; for each op of
    ``calls``, the keywords its direct calls (``torch_npu.<op>(...)``) pass and the constants they pass, as
    ``(keyword or position, value)``."""

    names: dict[str, set[str]] = field(default_factory=dict)
    keywords: dict[str, set[str]] = field(default_factory=dict)
    constants: dict[str, set[tuple[str | int, object]]] = field(default_factory=dict)


def names(tree: ast.Module) -> set[str]:
    """``torch_npu.X`` (``torch_npu.<package>.X``) and ``torch.npu.X`` as attributes or ``from`` imports."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch_npu":
            found |= {f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"}
        parts = (dotted(node) or "").split(".") if isinstance(node, ast.Attribute) else []
        if parts[:1] == ["torch_npu"] and len(parts) >= 2:
            found.add(".".join(parts[: 3 if parts[1] in PACKAGES and len(parts) >= 3 else 2]))
        elif parts[:2] == ["torch", "npu"] and len(parts) >= 3:
            found.add(".".join(parts[:3]))
    return found


def _sources_in_wheel(path: Path) -> Iterator[tuple[str, str]]:
    with zipfile.ZipFile(path) as wheel:
        for member in wheel.namelist():
            if member.endswith(".py"):
                yield member, wheel.read(member).decode(errors="replace")


def _sources_in_tree(root: Path) -> Iterator[tuple[str, str]]:
    for path in sorted((root / "mindspeed").rglob("*.py")):
        member = path.relative_to(root).as_posix()
        if not member.startswith(NOT_TORCH):
            yield member, path.read_text(errors="replace")


def _record_calls(tree: ast.Module, calls: tuple[str, ...], scan: Scan) -> None:
    for node in ast.walk(tree):
        called = (dotted(node.func) or "") if isinstance(node, ast.Call) else ""
        op = called.removeprefix("torch_npu.")  # torch_npu's own, not MindSpeed's wrappers of the same names
        if called.startswith("torch_npu.") and op in calls:
            scan.keywords.setdefault(op, set()).update(keyword.arg for keyword in node.keywords if keyword.arg)
            given = [*enumerate(node.args), *((keyword.arg, keyword.value) for keyword in node.keywords)]
            constants = {(where, value.value) for where, value in given if isinstance(value, ast.Constant)}
            scan.constants.setdefault(op, set()).update(constants)


def used(verl_wheels: list[Path], mindspeed_trees: list[Path], calls: tuple[str, ...] = ()) -> Scan:
    """Read every Python file of the wheels and trees once."""
    scan = Scan()
    for path in [*verl_wheels, *mindspeed_trees]:
        sources = _sources_in_wheel(path) if path.suffix == ".whl" else _sources_in_tree(path)
        for member, source in sources:
            if "torch_npu" in source or "torch.npu" in source:  # most files name neither: not parsed
                tree = parsed(source)
                for name in names(tree):
                    scan.names.setdefault(name, set()).add(f"{path.name}:{member}")
                _record_calls(tree, calls, scan)
    return scan
