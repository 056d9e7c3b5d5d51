"""The wheels the conformance layer reads as data, and where it finds them. Standard library only: noxfile.py loads
this file to download them (``nox -s conformance``), the tests to find them."""

from __future__ import annotations

import os
from pathlib import Path

WHEELS_VARIABLE = "NPU_SHIM_CONFORMANCE_WHEELS"
# The images' torch_npu pins (verl's docker/ascend/): the 9.1.0 images', v0.8.0's, v0.7.1's; the kit models the first.
TORCH_NPU = ("2.10.0.post4", "2.9.0.post2", "2.8.0")
VERL = ("0.6.1", "0.7.1", "0.8.0", "0.9.0", "0.9.1")  # the releases whose torch_npu calls are read
# torch_npu's wheels are per interpreter and platform: those of the images' Python 3.11 on x86_64 (read, not run).
PLATFORM = ["--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "--only-binary=:all:"]


def requirements() -> list[str]:
    return [*(f"torch-npu=={version}" for version in TORCH_NPU), *(f"verl=={version}" for version in VERL)]


def wheel(distribution: str, version: str) -> Path:
    """The downloaded wheel of ``distribution`` (as its file name spells it) at ``version``."""
    folder = Path(os.environ.get(WHEELS_VARIABLE, "").strip() or "(unset)")
    found = sorted(folder.glob(f"{distribution}-{version}-*.whl")) if folder.is_dir() else []
    if not found:
        raise FileNotFoundError(
            f"no {distribution} {version} wheel in ${WHEELS_VARIABLE} ({folder}): run this layer as "
            "`nox -s conformance`, which downloads the wheels"
        )
    return found[0]
