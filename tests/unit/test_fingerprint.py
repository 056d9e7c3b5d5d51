"""A fingerprint tells code apart by what it does, nested code included (npu_shim.fingerprint)."""

from __future__ import annotations

from types import CodeType

import pytest

from npu_shim.fingerprint import code_fingerprint, find_code

# Pairs of modules whose function ``f`` differs only inside a nested code object, which keeps its name:
# a fingerprint that took nested code by its name alone would call each pair the same code.
NESTED = {
    "comprehension": ("def f(xs):\n    return [x + 1 for x in xs]\n", "def f(xs):\n    return [x + 2 for x in xs]\n"),
    "lambda": ("def f():\n    return lambda x: x * 2\n", "def f():\n    return lambda x: x * 3\n"),
    "inner function": (
        "def f():\n    def g(x):\n        return x - 1\n    return g\n",
        "def f():\n    def g(x):\n        return x + 1\n    return g\n",
    ),
    "two levels down": (
        "def f():\n    def g(xs):\n        return [x for x in xs if x]\n    return g\n",
        "def f():\n    def g(xs):\n        return [x for x in xs if not x]\n    return g\n",
    ),
}


def function_code(source: str, filename: str = "<verl>") -> CodeType:
    code = find_code(compile(source, filename, "exec"), "f")
    assert code is not None
    return code


@pytest.mark.parametrize("kind", list(NESTED))
def test_functions_that_differ_only_inside_nested_code_fingerprint_differently(kind):
    first, second = (function_code(source) for source in NESTED[kind])
    assert first.co_code == second.co_code, "the outer bytecode is the same: only the nested code differs"
    assert code_fingerprint(first) != code_fingerprint(second)


@pytest.mark.parametrize("kind", list(NESTED))
def test_the_same_nested_code_elsewhere_fingerprints_the_same(kind):
    """Where the code lives (file, lines) is no part of it: the tables must recognise a release's function."""
    source = NESTED[kind][0]
    moved = function_code("\n\n# a comment above\n" + source, "/elsewhere/verl.py")
    assert code_fingerprint(function_code(source)) == code_fingerprint(moved)
