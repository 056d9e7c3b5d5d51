"""Which torch the SIMULATED torch_npu runs on: the releases its compute mode is tested on, and the version it reports.

Compute mode (:mod:`torch_npu._compute`) builds on torch's private and experimental APIs (the Python backend of
``PrivateUse1``, dispatch-key guards, ``AutocastPrivateUse1``, ``torch._utils._rebuild_*``, op schemas, the alias
bookkeeping of ``torch.utils._python_dispatch``), which change between torch releases without notice. It is tested
on the releases in ``SUPPORTED``: torch 2.10 (verl's newest Ascend images, Python 3.12) and 2.13 (this project's
CPU build, Python 3.11). On another torch ``enable()`` refuses with the reason, unless ``NPU_SHIM_SIM_ANY_TORCH=1``
asks to try it anyway (with a warning).

The refusal is what the user reads last. ``import torch`` loads this stand-in through its ``torch.backends`` entry
point and wraps any ``Exception`` of the stand-in's import in its own ``Failed to load the backend extension``, the
one line logs keep: while torch itself is importing, the refusal is therefore a ``SystemExit`` with the kit's
message (which torch, which ones are supported, the override), which torch does not wrap. An explicit ``import
torch_npu`` after torch gets a ``RuntimeError`` with the same message.

A real torch_npu is built for one torch and says so in its version (``2.6.0.post3`` for torch 2.6.0): the stand-in
reports the installed torch's release, marked as simulated (``2.13.0+simulated``).
"""

from __future__ import annotations

import logging
import os
import sys

SUPPORTED = ((2, 10), (2, 13))  # torch's major and minor releases compute mode is tested on
ANY_TORCH_VARIABLE = "NPU_SHIM_SIM_ANY_TORCH"
MARK = "simulated"


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


def supported_text() -> str:
    """``torch 2.10.x or 2.13.x``."""
    return "torch " + " or ".join(f"{major}.{minor}.x" for major, minor in SUPPORTED)


def torch_is_importing() -> bool:
    """Whether ``import torch`` is still running (this stand-in loaded by its entry point, inside torch's import)."""
    spec = getattr(sys.modules.get("torch"), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


class UnsupportedTorch(RuntimeError):
    """Compute mode asked of a torch it is not tested on."""


def check(torch_version: str) -> None:
    """Refuse a torch outside ``SUPPORTED``, unless ``NPU_SHIM_SIM_ANY_TORCH`` is on (then warn)."""
    if _major_minor(torch_version) in SUPPORTED:
        return
    why = (
        f"the simulated torch_npu's compute mode (simulated_npu) is tested on {supported_text()} and builds on "
        f"torch's private APIs; this is torch {torch_version}"
    )
    if os.environ.get(ANY_TORCH_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on"):
        logging.getLogger("simulated_npu").warning("%s: trying it anyway (%s is on)", why, ANY_TORCH_VARIABLE)
        return
    message = f"{why}. Install {supported_text()}, or set {ANY_TORCH_VARIABLE}=1 to try it on this torch"
    if torch_is_importing():
        raise SystemExit(message)  # torch would wrap any Exception in a message of its own
    raise UnsupportedTorch(message)
