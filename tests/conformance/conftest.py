"""The torch_npu wheel each parametrised check reads, opened once per session."""

from __future__ import annotations

import pytest
from real_torch_npu import Wheel, opened
from wheels import TORCH_NPU


@pytest.fixture(scope="session", params=TORCH_NPU)
def real(request: pytest.FixtureRequest) -> Wheel:
    return opened(request.param)
