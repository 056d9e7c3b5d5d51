"""The torch_npu wheel each parametrised check reads, opened once per session."""

from __future__ import annotations

import pytest
from real_torch_npu import Wheel
from wheels import TORCH_NPU, wheel


@pytest.fixture(scope="session", params=TORCH_NPU)
def real(request: pytest.FixtureRequest) -> Wheel:
    return Wheel(wheel("torch_npu", request.param))
