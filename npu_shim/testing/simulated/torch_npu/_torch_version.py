"""Which torch the SIMULATED torch_npu runs on: the range its compute mode is tested on, and the version it reports.

Compute mode (:mod:`torch_npu._compute`) builds on torch's private and experimental APIs (the Python backend of
``PrivateUse1``, dispatch-key guards, ``AutocastPrivateUse1``, ``torch._utils._rebuild_*``, op schemas, the alias
bookkeeping of ``torch.utils._python_dispatch``), which change between torch releases without notice. It is tested
on torch 2.13 only: on another torch ``enable()`` refuses with the reason, unless ``NPU_SHIM_SIM_ANY_TORCH=1`` asks
to try it anyway (with a warning).

A real torch_npu is built for one torch and says so in its version (``2.6.0.post3`` for torch 2.6.0): the stand-in
reports the installed torch's release, marked as simulated (``2.13.0+npu_shim.simulated``).
"""

from __future__ import annotations

import logging
import os

TESTED = (2, 13)  # torch's major and minor release
ANY_TORCH_VARIABLE = "NPU_SHIM_SIM_ANY_TORCH"
MARK = "npu_shim.simulated"


def release(torch_version: str) -> str:
    """torch's release without its local part: ``2.13.0+cpu`` is ``2.13.0``."""
    return str(torch_version).partition("+")[0]


def simulated_version(torch_version: str) -> str:
    return f"{release(torch_version)}+{MARK}"


def _major_minor(torch_version: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in release(torch_version).split(".")[:2])
    except ValueError:  # a version we cannot read is no tested one
        return None


def check(torch_version: str) -> None:
    """Refuse a torch outside the tested range, unless ``NPU_SHIM_SIM_ANY_TORCH`` is on (then warn)."""
    if _major_minor(torch_version) == TESTED:
        return
    tested = ".".join(map(str, TESTED))
    why = (
        f"the simulated torch_npu's compute mode (npu_shim.testing) is tested on torch {tested}.x and builds on "
        f"torch's private APIs; this is torch {torch_version}"
    )
    if os.environ.get(ANY_TORCH_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on"):
        logging.getLogger("npu_shim").warning("%s: trying it anyway (%s is on)", why, ANY_TORCH_VARIABLE)
        return
    raise RuntimeError(f"{why}. Install torch {tested}.x, or set {ANY_TORCH_VARIABLE}=1 to try it on this torch")
