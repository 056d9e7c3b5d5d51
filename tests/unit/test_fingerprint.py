"""A fingerprint tells code apart by what it says, on any Python (npu_shim.fingerprint)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from helpers import ROOT, clean_env, pyenv_python

from npu_shim.fingerprint import function_fingerprint, source_fingerprint
from npu_shim.recognition import KnownFunction

# Pairs of modules whose function ``f`` differs only inside nested code, which keeps its name.
NESTED = {
    "comprehension": ("def f(xs):\n    return [x + 1 for x in xs]\n", "def f(xs):\n    return [x + 2 for x in xs]\n"),
    "lambda": ("def f():\n    return lambda x: x * 2\n", "def f():\n    return lambda x: x * 3\n"),
    "inner function": (
        "def f():\n    def g(x):\n        return x - 1\n    return g\n",
        "def f():\n    def g(x):\n        return x + 1\n    return g\n",
    ),
    "one constant": (
        'def f(config):\n    config["use_flash_attn"] = True\n',
        'def f(config):\n    config["use_flash_attn"] = False\n',
    ),
    "f-string": ('def f(x):\n    return f"{x!r}"\n', 'def f(x):\n    return f"{x!s}"\n'),
    # falsy values are code too: only the empty fields a Python version adds are left out
    "falsy constant": ("def f(x):\n    return x or 0\n", "def f(x):\n    return x or False\n"),
    "empty string": ('def f(x):\n    return x or ""\n', "def f(x):\n    return x or 0.0\n"),
}


@pytest.mark.parametrize("kind", list(NESTED))
def test_functions_that_differ_anywhere_inside_fingerprint_differently(kind):
    first, second = (source_fingerprint(source, "f") for source in NESTED[kind])
    assert first is not None and second is not None
    assert first != second


FUNCTION = '''
def f(xs, *, scale: int = 2):
    """A docstring."""
    total = 0  # a comment
    for x in xs:
        total += x * scale
    return total
'''
# The same code, placed, commented, documented and laid out otherwise.
SAME_CODE = '''


# a comment above
def f(xs, *, scale: int=2):
    """Another docstring, which does not change what the code does."""
    total = 0
    for x in xs: total += (x * scale)
    return total
'''


def test_where_the_code_lives_and_how_it_is_laid_out_are_no_part_of_it():
    assert source_fingerprint(FUNCTION, "f") == source_fingerprint(SAME_CODE, "f")
    assert source_fingerprint(FUNCTION, "g") is None


LIVE = '''
import functools


def logged(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)

    return wrapper


class Engine:
    def forward_step(self, batch):
        text = """
not indented like the method
        """
        return [text, *batch]

    @functools.lru_cache
    def decorated(self):
        return f"{self!r:>{10}}"

    @staticmethod
    def helper(x):
        return x * 2

    @classmethod
    def build(cls):
        return cls()

    @logged
    def wrapped(self):
        return self


def module_level(x):
    return x
'''
LIVE_FUNCTIONS = ["Engine.forward_step", "Engine.decorated", "Engine.helper", "Engine.build", "Engine.wrapped"]


@pytest.mark.parametrize("qualname", [*LIVE_FUNCTIONS, "module_level"])
def test_a_live_function_is_judged_as_its_definition_in_the_file(tmp_path, monkeypatch, qualname):
    """What a fix reads off verl at run time (its owner's attribute, as ``judge`` takes it, decorated or not) is
    what scripts/fingerprints.py reads from the wheel: a decorated verl method is recognised, not unrecognised."""
    path = tmp_path / "live_module.py"
    path.write_text(LIVE)
    module = ModuleType("live_module")
    exec(compile(LIVE, str(path), "exec"), vars(module))
    owner_name, _, _ = qualname.rpartition(".")
    owner = getattr(module, owner_name) if owner_name else module
    known = KnownFunction(
        fix="some_fix",
        source=f"live_module.py:{qualname}",
        missing_in=("0.7.1",),
        fixed_in=(),
        change="verl #1",
        if_left="something fails",
    )
    table = {known.source: {"0.7.1": source_fingerprint(LIVE, qualname)}}
    monkeypatch.setattr("npu_shim.recognition.known_code", lambda: table)
    assert table[known.source]["0.7.1"] is not None
    judged = known.judge(owner)
    assert judged.verdict == "missing", judged.reason
    assert judged.reason.endswith("(verl 0.7.1's)")


def test_a_function_without_a_source_file_has_no_fingerprint():
    namespace: dict = {}
    exec(compile(FUNCTION, "<made at run time>", "exec"), namespace)
    assert function_fingerprint(namespace["f"]) is None
    assert function_fingerprint(len) is None
    assert function_fingerprint(None) is None


# Syntax whose tree some Python minor version spells differently, or adds fields to.
SYNTAX = """
async def everything(a, /, b: "int" = 1, *args, c, d=None, **kwargs) -> dict[str, int]:
    width = 8
    label = f"{a!r:<{width}} [{b}:{c}]: {d=}" f"{'nested'!s}" rf"\\d{{{a}}}"
    if (n := len(args)) > 2:
        pass
    match kwargs:
        case {"x": [1, 2, *rest]} if rest:
            return {"rest": len(rest)}
        case _:
            pass
    async with a as b, c:
        async for item in b:
            await {k: v for k, v in item}.get(a)
    try:
        raise ValueError(label)
    except* ValueError:
        pass
    return {"n": n, "lambda": (lambda *xs, **kw: (xs, kw))(1)}
"""
SYNTAX_310 = SYNTAX.replace("    except* ValueError:", "    except ValueError:")  # except* is 3.11+
FINGERPRINT_ALL = """
import ast, json, sys
sys.path.insert(0, {root!r})
from npu_shim.fingerprint import node_fingerprint
result = {{}}
for path in json.load(sys.stdin):
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            result[f"{{path}}:{{node.lineno}}:{{node.name}}"] = node_fingerprint(node)
print(json.dumps(result))
"""


def fingerprints_under(version: str, paths: list[Path]) -> dict[str, str]:
    completed = subprocess.run(
        [str(pyenv_python(version)), "-c", FINGERPRINT_ALL.format(root=str(ROOT))],
        input=json.dumps([str(path) for path in paths]),
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(completed.stdout)


def test_every_supported_python_gives_the_same_fingerprints(tmp_path):
    """One table serves every Python: npu_shim's own functions and syntax trees that differ by version."""
    syntax = tmp_path / "syntax.py"
    syntax.write_text(textwrap.dedent(SYNTAX_310))
    paths = [*sorted((ROOT / "npu_shim").rglob("*.py")), syntax]
    by_version = {version: fingerprints_under(version, paths) for version in ("3.10.13", "3.11.7", "3.12.1", "3.13.0")}
    reference = by_version["3.10.13"]
    assert len(reference) > 200, "npu_shim's own functions and the syntax sample"
    for version, fingerprints in by_version.items():
        assert fingerprints == reference, version
    except_star = tmp_path / "except_star.py"
    except_star.write_text(textwrap.dedent(SYNTAX))
    later = {version: fingerprints_under(version, [except_star]) for version in ("3.11.7", "3.12.1", "3.13.0")}
    assert len({json.dumps(list(fingerprints.values())) for fingerprints in later.values()}) == 1
