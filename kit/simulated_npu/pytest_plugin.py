"""pytest fixtures for the simulated NPU: ``pytest_plugins = ["simulated_npu.pytest_plugin"]``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import simulated_npu as testing


@pytest.fixture
def simulated_npu() -> None:
    """This process sees a simulated Ascend NPU (verl must not have been imported without it)."""
    testing.simulate_npu()


@pytest.fixture
def repatch_calls(simulated_npu: None) -> Iterator[list[dict[str, Any]]]:
    """The stand-in MindSpeed ``repatch`` calls made during the test (emptied before it).

    The stand-in starts the test as in a fresh process and is put back that way after it."""
    calls = testing.repatch_calls()
    calls.clear()
    line = testing.mindspeed_line()  # a test may simulate another line: the next one starts on this one
    testing.fresh_mindspeed(line)
    yield calls
    testing.fresh_mindspeed(line)
