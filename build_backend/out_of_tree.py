"""The shim's build backend: setuptools' own, run on a copy of the source tree.

Why a wrapper: setuptools writes ``build/`` and ``npu_shim.egg-info`` beside the source it builds and has no setting
for elsewhere, so ``pip install`` fails on a read-only checkout (Docker's ``RUN --mount=type=bind``) and leaves both in
a writable one (where a stale ``build/`` could even put a deleted module into the wheel). PEP 517 leaves a read-only
source tree to the backend. Why setuptools still: the Ascend images have it, so that an offline
``pip install --no-build-isolation --no-index`` builds with the environment's own (a backend they lack could not).
Editable installs point at the checkout itself: setuptools' hooks for them run as they are.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403  (every hook this setuptools has, editable installs' included)


def _skipped(top: bool, names: list[str]) -> set[str]:
    """What the copy leaves out, as no build reads it: bytecode and egg-info anywhere; at the top, tools' folders (.git,
    .cache, .nox, .venv) and an earlier build's output."""
    skipped = {name for name in names if name == "__pycache__" or name.endswith(".egg-info")}
    if top:
        skipped |= {name for name in names if name.startswith(".") or name in ("build", "dist")}
    return skipped


def _out_of_tree(hook: Callable[..., Any]) -> Callable[..., Any]:
    """``hook`` run in a temporary copy of the source tree (the current directory, PEP 517), its paths (PEP 517 passes
    directories as strings, config_settings as a dict) made absolute first."""

    def run(*args: Any, **kwargs: Any) -> Any:
        args = tuple(os.path.abspath(arg) if isinstance(arg, str) else arg for arg in args)
        kwargs = {key: os.path.abspath(value) if isinstance(value, str) else value for key, value in kwargs.items()}
        source = os.getcwd()
        with tempfile.TemporaryDirectory(prefix="npu-shim-build-") as scratch:
            copy = Path(scratch) / "source"
            shutil.copytree(source, copy, symlinks=True, ignore=lambda folder, names: _skipped(folder == source, names))
            os.chdir(copy)
            try:
                return hook(*args, **kwargs)
            finally:
                os.chdir(source)

    return run


get_requires_for_build_wheel = _out_of_tree(build_meta.get_requires_for_build_wheel)
get_requires_for_build_sdist = _out_of_tree(build_meta.get_requires_for_build_sdist)
prepare_metadata_for_build_wheel = _out_of_tree(build_meta.prepare_metadata_for_build_wheel)
build_wheel = _out_of_tree(build_meta.build_wheel)
build_sdist = _out_of_tree(build_meta.build_sdist)
