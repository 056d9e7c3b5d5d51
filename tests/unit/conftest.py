"""Fixtures for tests on synthetic verl layouts (see synthetic_verl.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import ROOT, Run, clean_env, run_python, shim_source
from synthetic_verl import write_layout

# Imported by the child before anything else when a test activates the shim by `import npu_shim`.
IMPORT_FROM_CHECKOUT = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"

# Appended to a child's code: one JSON line describing what verl's registry resolves and what the shim did.
REPORT = """
import json as _json, sys as _sys
def _resolve(model_type):
    from verl.workers.engine import EngineRegistry
    try:
        cls = EngineRegistry.get_engine_cls(model_type, "megatron")
    except AssertionError as error:
        return {"error": str(error)}
    return {"name": cls.__name__, "module": cls.__module__, "shim": getattr(cls, "__npu_shim__", False),
            "bases": [base.__name__ for base in cls.__mro__[1:3]]}
_hook = _sys.modules.get("npu_shim.hook")
print(_json.dumps({
    "value_model": _resolve("value_model"),
    "language_model": _resolve("language_model"),
    "outcomes": {o.fix: [o.verdict, o.reason] for o in (_hook.outcomes if _hook else [])},
    "activated_via": _sys.modules["npu_shim"].activated_via() if "npu_shim" in _sys.modules else None,
    "loaded": sorted(m for m in ("wrapt", "npu_shim", "npu_shim.hook") if m in _sys.modules),
}))
"""

Runner = Callable[..., Run]


@pytest.fixture
def synthetic(tmp_path: Path) -> Callable[..., Path]:
    def make(layout: str, *, with_mindspeed: bool = True) -> Path:
        return write_layout(tmp_path / f"verl-{layout}", layout, with_mindspeed=with_mindspeed)

    return make


@pytest.fixture
def run_with(tmp_path: Path) -> Runner:
    """Run code in a fresh interpreter over a synthetic verl tree, with the shim activated as asked.

    ``activation``: ``"sitecustomize"`` (checkout on PYTHONPATH), ``"import"`` (code
    is expected to ``import npu_shim`` itself; the checkout is put on sys.path),
    or ``"none"``.
    """

    def run(
        code: str,
        tree: Path,
        activation: str = "sitecustomize",
        env: dict[str, str] | None = None,
        report: bool = True,
        check: bool = True,
        args: tuple[str, ...] = (),
    ) -> Run:
        pythonpath: list[os.PathLike[str] | str] = [tree]
        prefix = ""
        if activation == "sitecustomize":
            pythonpath.insert(0, ROOT)
        elif activation == "import":
            prefix = IMPORT_FROM_CHECKOUT
        elif activation != "none":
            raise ValueError(activation)
        source = prefix + textwrap.dedent(code) + (REPORT if report else "")
        return run_python(source, clean_env(pythonpath, **(env or {})), cwd=tmp_path, check=check, args=args)

    return run


@pytest.fixture(scope="session")
def installed_shim(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh venv (no pip, nothing else in it) with npu_shim pip-installed: (its python, its site-packages)."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", purelib, str(shim_source(venv.parent))],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return python, Path(purelib)


@pytest.fixture
def site(installed_shim: tuple[Path, Path]) -> Path:
    """The site-packages directory of the installed shim (for the doctor's tests)."""
    return installed_shim[1]
