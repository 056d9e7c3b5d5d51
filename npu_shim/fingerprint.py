"""Recognising one exact release's function in the verl that is imported.

A fix that replaces or drops verl's own code must act only on code it knows:
the very function a release shipped, not one a user or a later verl edited. A
fingerprint covers what the function does (its bytecode, constants, names and
arguments, nested code included) and nothing of where it lies (file, line
numbers). Bytecode differs between Python minor versions, so each known
function has one fingerprint per version; ``tools/fingerprint.py`` prints them.
"""

from __future__ import annotations

import hashlib
import sys
from types import CodeType
from typing import Any


def fingerprint(code: CodeType) -> str:
    digest = hashlib.sha256()
    _feed(digest, code)
    return digest.hexdigest()[:16]


def _feed(digest: Any, code: CodeType) -> None:
    for part in (code.co_argcount, code.co_kwonlyargcount, code.co_names, code.co_varnames, code.co_freevars):
        digest.update(repr(part).encode())
    digest.update(code.co_code)
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            _feed(digest, constant)
        else:
            digest.update(repr(constant).encode())


def matches(function: Any, known: dict[tuple[int, int], frozenset[str]]) -> bool:
    """Whether ``function`` is, for this interpreter's Python version, one of the ``known`` fingerprints."""
    code = getattr(function, "__code__", None)
    return isinstance(code, CodeType) and fingerprint(code) in known.get(sys.version_info[:2], frozenset())
