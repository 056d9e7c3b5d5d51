"""Where the conformance layer finds its data: ``nox -s conformance`` downloads the wheels and names their folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

WHEELS_VARIABLE = "NPU_SHIM_CONFORMANCE_WHEELS"
# The images' torch_npu pins (verl's docker/ascend/): the 9.1.0 images', v0.8.0's, v0.7.1's; the kit models the first.
TORCH_NPU = ("2.10.0.post4", "2.9.0.post2", "2.8.0")
VERL = ("0.6.1", "0.7.1", "0.8.0", "0.9.0", "0.9.1")


def wheel_folder() -> Path:
    given = os.environ.get(WHEELS_VARIABLE, "").strip()
    if not given:
        pytest.fail(f"{WHEELS_VARIABLE} is not set: run this layer as `nox -s conformance`, which downloads the wheels")
    return Path(given)


def wheel(distribution: str, version: str) -> Path:
    found = sorted(wheel_folder().glob(f"{distribution}-{version}-*.whl"))
    if not found:
        pytest.fail(f"no {distribution} {version} wheel in {wheel_folder()} (nox -s conformance downloads it)")
    return found[0]
