"""What a function's code says, as one hash of its syntax tree, to recognise verl's own code exactly on every Python:
of live functions, from their source files (``scripts/fingerprints.py``: of released verl files, without importing).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
from collections.abc import Mapping
from types import CodeType
from typing import Any

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# Type hints (of arguments, returns, annotated assignments) and type comments: no part of what the code does (a fork
# that adds hints is still verl's code). Positions, comments and layout are not in the tree at all.
_ANNOTATIONS = frozenset({"annotation", "returns", "type_comment"})


def _kept(node: ast.AST, name: str, field: Any) -> Any:
    if name in _ANNOTATIONS:
        return None
    if name == "body" and isinstance(node, _DEFINITIONS) and ast.get_docstring(node, clean=False) is not None:
        return field[1:]
    if name == "values" and isinstance(node, ast.JoinedStr):
        # some 3.12 releases (3.12.1 here) put an empty Constant after a replacement field in a format spec
        return [part for part in field if not (isinstance(part, ast.Constant) and part.value == "")]
    return field


def _canonical(value: Any) -> Any:
    if isinstance(value, ast.AST):
        fields = ((name, _kept(value, name, field)) for name, field in ast.iter_fields(value))
        return (
            type(value).__name__,
            # a field some Python version adds empty (type_params=[] on 3.12, kind=None) is hashed only with a value
            tuple((name, _canonical(field)) for name, field in fields if field not in (None, [])),
        )
    if isinstance(value, list):
        return tuple(_canonical(item) for item in value)
    return (type(value).__name__, repr(value))  # a constant: str, bytes, int, float, complex, bool, Ellipsis


def node_fingerprint(node: ast.AST) -> str:
    """A hex digest of ``node``'s syntax tree, without what :func:`_kept` and :func:`_canonical` leave out."""
    return hashlib.sha256(repr(_canonical(node)).encode()).hexdigest()[:32]


def source_fingerprint(source: str, qualname: str) -> str | None:
    """The fingerprint of the function (or class) ``qualname`` (``"SomeClass.__init__"``) defined at the top of a
    module's ``source``, or None where it defines no such function."""
    node: ast.AST | None = ast.parse(source)
    for name in qualname.split("."):
        body = getattr(node, "body", [])
        node = next((n for n in body if isinstance(n, _DEFINITIONS) and n.name == name), None)
        if node is None:
            return None
    return node_fingerprint(node)


def function_fingerprint(function: Any) -> str | None:
    """The fingerprint of a live function's definition, read from its source file; None without one."""
    # A decorated definition is read as the wheel has it, decorators included: getsource unwraps a
    # functools.wraps wrapper itself, but lru_cache, staticmethod and classmethod objects are no functions.
    try:
        function = inspect.unwrap(function)
    except ValueError:  # a cycle of __wrapped__
        return None
    if not inspect.isfunction(function):
        return None
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):  # no source file: a .pyc-only install, or code made at run time
        return None
    if source[:1].isspace():  # a method: parse it as the body of a block, so strings keep their indentation
        source = "if True:\n" + source
    try:
        tree = ast.parse(source)
    except SyntaxError:  # the file changed on disk since it was imported
        return None
    node = tree.body[0]
    if isinstance(node, ast.If):
        node = node.body[0]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    return node_fingerprint(node)


def parameters(function: Any) -> Mapping[str, inspect.Parameter]:
    """The parameters ``function`` takes, by name; none where it has no signature Python can read (None, a builtin)."""
    try:
        return inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}


def uses(code: Any, name: str) -> bool:
    """Whether ``code`` (a code object, or a function's or method's; or code nested in it) uses ``name``: as a global,
    an attribute, a variable or a constant. Anything without code uses nothing."""
    code = getattr(getattr(code, "__func__", code), "__code__", code)
    if not isinstance(code, CodeType):
        return False
    if name in code.co_names or name in code.co_varnames:
        return True
    return any(
        uses(constant, name) or constant == name or (isinstance(constant, tuple) and name in constant)
        for constant in code.co_consts
    )
