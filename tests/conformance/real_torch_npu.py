"""The images' torch_npu wheels read as data: never imported (their ``_C`` needs CANN), never copied.

What a wheel is asked here: each op's registered schema (the strings ``libtorch_npu.so`` registers with torch's
dispatcher, so the parameter names a keyword call must use), the public op schemas of ``_op_plugin_docs.py``, the
names a module of the package binds (its source parsed, not run), and the meta functions of
``op_plugin/meta/_meta_registrations.py``, compiled alone with the ``@impl`` registration stripped.
"""

from __future__ import annotations

import ast
import copy
import functools
import re
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from wheels import wheel

PACKAGE = "torch_npu"
# What the meta functions call from torch_npu (imported there, not importable here), as a host without an NPU
# answers: SoC 0 (not an Ascend 950, whose torch.compile warning is all it decides), CANN unknown; error codes
# only make messages. A function that needs another such name fails with its name (meta_function).
_META_STAND_INS: dict[str, Any] = {
    "get_soc_version": lambda: 0,
    "get_cann_version": lambda: "",
    "ops_error": lambda *args: "",
    "ErrCode": type("ErrCode", (), {"__getattr__": lambda self, name: name})(),
}
LIBRARY = "torch_npu/lib/libtorch_npu.so"
DOCS = "torch_npu/_op_plugin_docs.py"
META = "torch_npu/op_plugin/meta/_meta_registrations.py"
# A schema string as the dispatcher stores it: ``name(args) -> returns``, NUL-terminated in the library.
# An overload (``npu_hans_encode.out``) names its op too: the default overload is the one kept where both are.
_SCHEMA = re.compile(r"([A-Za-z_]\w*)(\.\w+)?\((.*)\) -> (.+)")
_TOP_LEVEL_COMMA = re.compile(r",(?![^\[(]*[\])])")  # not inside int[2] x=[1, 1] or Tensor(a!)
_DOC_SCHEMA = re.compile(r"torch_npu\.(npu_\w+)\(([^()]*)\) -> ([^\n]+)")


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    default: str | None  # as the schema writes it (``1.``, ``None``, ``""``); None: required
    keyword_only: bool


@dataclass(frozen=True)
class Schema:
    name: str
    parameters: tuple[Parameter, ...]
    returns: tuple[str, ...]


def parse_schema(name: str, arguments: str, returns: str) -> Schema:
    parameters, keyword_only = [], False
    for text in (part.strip() for part in _TOP_LEVEL_COMMA.split(arguments) if part.strip()):
        if text == "*":
            keyword_only = True
            continue
        declaration, _, default = text.partition("=")
        type_, _, parameter = declaration.strip().rpartition(" ")
        parameters.append(Parameter(parameter, type_, default.strip() or None, keyword_only))
    returns = returns.strip()
    outputs = _TOP_LEVEL_COMMA.split(returns[1:-1]) if returns.startswith("(") else [returns]
    return Schema(name, tuple(parameters), tuple(output.strip() for output in outputs))


class Wheel:
    """One torch_npu wheel, opened as a zip archive."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.version = path.name.split("-")[1]

    def text(self, member: str) -> str:
        return self.zip.read(member).decode()

    @cached_property
    def library(self) -> bytes:
        return self.zip.read(LIBRARY)

    def in_extension(self, name: str) -> bool:
        """Whether the C extension's library holds ``name`` as the end of a string, as pybind registers a class's or
        an attribute's name (the linker shares one string's tail between several, so not always a whole string)."""
        return name.encode() + b"\x00" in self.library

    @cached_property
    def schemas(self) -> dict[str, Schema]:
        """Every op the library registers, by name (the first registration of each: overloads are not exported)."""
        found: dict[str, Schema] = {}
        data = self.library
        # from each " -> " to the NULs around it: one pattern run over 90 MB of machine code takes seconds
        position = data.find(b") -> ")
        while position >= 0:
            start, end = data.rfind(b"\x00", 0, position) + 1, data.find(b"\x00", position)
            if match := _SCHEMA.fullmatch(data[start:end].decode(errors="replace")):
                name, overload, arguments, returns = match.groups()
                if overload is None or name not in found:
                    found[name] = parse_schema(name, arguments, returns)
            position = data.find(b") -> ", end)
        return found

    @cached_property
    def documented(self) -> dict[str, Schema]:
        """The public ops' schemas as ``_op_plugin_docs.py`` documents them."""
        found: dict[str, Schema] = {}
        for name, arguments, returns in _DOC_SCHEMA.findall(self.text(DOCS)):
            found.setdefault(name, parse_schema(name, arguments, returns))
        return found

    @cached_property
    def python_files(self) -> dict[str, str]:
        """Module name -> source, for every Python file of the package."""
        modules = {}
        for member in self.zip.namelist():
            if member.startswith(f"{PACKAGE}/") and member.endswith(".py"):
                module = member.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                modules[module] = member
        return modules

    def submodules(self, module: str) -> set[str]:
        """The modules and packages directly under ``module`` (extension modules too: ``_C``)."""
        prefix = module.replace(".", "/") + "/"
        found = set()
        for member in self.zip.namelist():
            if member.startswith(prefix):
                head = member[len(prefix) :].split("/")[0]
                found.add(head.split(".")[0])
        return {name for name in found if name.isidentifier()}

    @cached_property
    def from_outside(self) -> dict[str, set[str]]:
        """Module -> names the package's files set on it or read from it (``torch_npu.X = ...``, ``setattr(torch_npu,
        "X", ...)``, ``torch_npu.hifloat8``): what a module holds once imported that its own source does not bind,
        as the C extension's dtypes and the ops exported at import."""
        found: dict[str, set[str]] = {}
        for member in self.python_files.values():
            source = self.text(member)
            if "torch_npu" not in source:
                continue
            for node in ast.walk(parsed(source)):
                path = dotted(node) if isinstance(node, ast.Attribute) else None
                if path and path.startswith(f"{PACKAGE}."):
                    owner, _, name = path.rpartition(".")
                    found.setdefault(owner, set()).add(name)
                if isinstance(node, ast.Call) and dotted(node.func) == "setattr" and len(node.args) >= 2:
                    owner, name = dotted(node.args[0]), node.args[1]
                    if owner and owner.startswith(PACKAGE) and isinstance(name, ast.Constant):
                        found.setdefault(owner, set()).add(str(name.value))
        return found

    def names(self, module: str) -> set[str]:
        """What ``module`` holds once imported, as far as the package's Python source says: its own module-level
        bindings and ``__all__``, its submodules, what other files set on it; for ``torch_npu`` itself, also
        every registered op (exported from ``torch.ops.npu`` at import)."""
        return self._names(module, frozenset())

    def _names(self, module: str, seen: frozenset[str]) -> set[str]:
        found = set(self.submodules(module)) | self.from_outside.get(module, set())
        member = self.python_files.get(module)
        if member is not None:
            tree = parsed(self.text(member))
            found |= _bound_names(tree)
            package = module if member.endswith("/__init__.py") else module.rpartition(".")[0]
            for source in _star_imports(tree, package) - seen - {module}:  # what ``from .x import *`` brings
                found |= {name for name in self._names(source, seen | {module}) if not name.startswith("_")}
        if module == PACKAGE:
            found |= set(self.schemas)
        return found

    @cached_property
    def _meta_source(self) -> ast.Module:
        return parsed(self.text(META))

    @functools.cache  # noqa: B019 - a few wheels a session, each kept for the session anyway
    def meta_function(self, op: str) -> Callable[..., Any]:
        """The meta function registered for ``op``, compiled with the module-level functions it calls, without its
        registration decorator and without the module's imports (torch_npu's among them): torch, math and warnings
        are given, as the module imports them."""
        tree = self._meta_source
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        registered = [node for node in functions.values() if op in _registered_ops(node)]
        if len(registered) != 1:
            raise LookupError(f"{self.path.name}: {len(registered)} meta functions registered for {op}")
        needed, queue = {}, [registered[0]]
        while queue:
            node = queue.pop()
            if node.name in needed:
                continue
            needed[node.name] = node
            called = {name.id for name in ast.walk(node) if isinstance(name, ast.Name)}
            queue.extend(functions[name] for name in called & functions.keys())
        constants = [node for node in tree.body if isinstance(node, ast.Assign) and _is_literal(node.value)]
        needed = {name: copy.deepcopy(node) for name, node in needed.items()}  # the shared tree keeps its decorators
        for node in needed.values():
            node.decorator_list = []
        module = ast.Module(body=[*constants, *needed.values()], type_ignores=[])
        import math

        namespace: dict[str, Any] = {"torch": torch, "math": math, "warnings": warnings}
        known = set(namespace) | {node.targets[0].id for node in constants if isinstance(node.targets[0], ast.Name)}
        referenced = {name.id for node in needed.values() for name in ast.walk(node) if isinstance(name, ast.Name)}
        imported = {
            alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names
        }
        for name in (referenced & imported) - known - needed.keys():
            if name not in _META_STAND_INS:
                raise LookupError(f"{self.path.name}: the meta function of {op} calls {name}, which has no stand-in")
            namespace[name] = _META_STAND_INS[name]
        exec(compile(module, f"{self.path.name}/{META}", "exec"), namespace)  # the wheel's own meta functions, as data
        return namespace[registered[0].name]


@functools.cache
def opened(version: str) -> Wheel:
    """The downloaded torch_npu wheel of ``version``, opened once a session."""
    return Wheel(wheel("torch_npu", version))


def parsed(source: str) -> ast.Module:
    """The module's syntax tree; an empty one for a file of another Python's syntax."""
    try:
        with warnings.catch_warnings():  # the wheel's invalid escapes are its own business
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.11 words them so
            return ast.parse(source)
    except SyntaxError:  # a file of another Python's syntax binds nothing we can read
        return ast.Module(body=[], type_ignores=[])


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _bound_names(tree: ast.Module) -> set[str]:
    """Module-level bindings (conditional ones too: either branch may run) and the names ``__all__`` lists; not what
    a function or class body binds."""
    found: set[str] = set()
    statements = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*"}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                found |= {name.id for name in ast.walk(target) if isinstance(name, ast.Name)}
                if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(node.value, ast.List):
                    found |= {item.value for item in node.value.elts if isinstance(item, ast.Constant)}
        else:  # if, try, with, for: their blocks bind at module level too
            for field in ("body", "orelse", "finalbody", "handlers"):
                statements.extend(getattr(node, field, []))
    return found


def _star_imports(tree: ast.Module, package: str) -> set[str]:
    """The modules a module's top level imports everything from (``from .memory import *``), by full name."""
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            found.add(".".join(part for part in (base, node.module or "") if part))
    return found


def _registered_ops(node: ast.FunctionDef) -> set[str]:
    """The ops an ``@impl(m, "op")`` decorator registers ``node`` for."""
    return {
        decorator.args[1].value
        for decorator in node.decorator_list
        if isinstance(decorator, ast.Call)
        and len(decorator.args) == 2
        and isinstance(decorator.args[1], ast.Constant)
        and dotted(decorator.args[0]) == "m"
    }


def _is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True
