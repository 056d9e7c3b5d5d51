"""Having this file here puts tests/ on sys.path, so test modules can import ``helpers``.

It also guards the pytest process itself: importing npu_shim's modules by their full names
(the kit, the fixes' constants) must leave it as it was, so no test may leave the shim
activated here or ``PYTHONPATH`` changed. Tests activate the shim in child interpreters.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


def _shim_state() -> tuple[str | None, str | None]:
    shim = sys.modules.get("npu_shim")
    return (shim.activated_via() if shim is not None else None), os.environ.get("PYTHONPATH")


@pytest.fixture(autouse=True)
def _the_test_process_stays_unpatched() -> Iterator[None]:
    before = _shim_state()
    yield
    after = _shim_state()
    assert after == before, f"the test left the shim activated in the pytest process: {before} -> {after}"
