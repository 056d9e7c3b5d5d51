"""What a function's code does, as one hash: to recognise verl's own code exactly, not by its names.

Bytecode changes with every Python minor version, so a fingerprint is only
comparable with one taken by the same minor version (the tables that use it are
keyed by ``sys.version_info[:2]``). Left out: where the code lives (file, line
numbers, position tables), and the ``__future__`` flags of its module, which do
not change what this code does. ``scripts/fingerprints.py`` computes the
fingerprints of released verl files without importing them.
"""

from __future__ import annotations

import hashlib
import sys
from types import CodeType
from typing import Any

# CO_OPTIMIZED ... CO_ASYNC_GENERATOR: how the code runs. Higher bits are __future__ flags.
_BEHAVIOUR_FLAGS = 0x3FF


def _constant(value: object) -> object:
    if isinstance(value, CodeType):
        return ("code", code_fingerprint(value))
    if isinstance(value, tuple):
        return ("tuple", tuple(_constant(item) for item in value))
    if isinstance(value, frozenset):  # iteration order depends on string hashing: sort
        return ("frozenset", tuple(sorted(repr(_constant(item)) for item in value)))
    return (type(value).__name__, repr(value))


def code_fingerprint(code: CodeType) -> str:
    """A hex digest of ``code``'s bytecode, constants (nested code included), names and signature."""
    parts = (
        code.co_code,
        tuple(_constant(value) for value in code.co_consts),
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
        code.co_argcount,
        code.co_posonlyargcount,
        code.co_kwonlyargcount,
        code.co_flags & _BEHAVIOUR_FLAGS,
        getattr(code, "co_exceptiontable", b""),  # 3.11+
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def find_code(code: CodeType, *qualname: str) -> CodeType | None:
    """The code object nested in ``code`` (a module's) under ``qualname``, e.g. ``("SomeClass", "__init__")``."""
    for name in qualname:
        code = next((c for c in code.co_consts if isinstance(c, CodeType) and c.co_name == name), None)
        if code is None:
            return None
    return code


# Per Python minor version: fingerprint -> the verl releases that ship that code.
KnownCode = dict[tuple[int, int], dict[str, str]]


def known_release(function: Any, table: KnownCode) -> str | None:
    """The releases whose code ``function`` is exactly, for this Python, or None (also for a non-function)."""
    code = getattr(function, "__code__", None)
    if not isinstance(code, CodeType):
        return None
    return table.get(sys.version_info[:2], {}).get(code_fingerprint(code))
