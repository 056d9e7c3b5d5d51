"""The doctor's own process: the options and the environment as given go to the probe (a fresh interpreter, or a
Ray worker), and what comes back is printed. Everything that judges runs in the probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import npu_shim
from npu_shim.doctor.report import ERROR, Report, blank, with_status


def environment_as_given() -> dict[str, str]:
    """This process's environment without what ``import npu_shim`` added to it."""
    propagation = sys.modules.get("npu_shim.propagation")
    return propagation.environ_as_given() if propagation is not None else dict(os.environ)


def install_source(shim_parent: Path) -> str | None:
    """What to ``pip install`` to get this npu_shim elsewhere: its checkout, or the file or folder pip installed it
    from (PEP 610's direct_url.json); None where neither is known. npu-shim is not on PyPI."""
    if (shim_parent / "pyproject.toml").is_file():
        return str(shim_parent)
    try:
        direct_url = json.loads(metadata.distribution("npu-shim").read_text("direct_url.json") or "null")
    except (metadata.PackageNotFoundError, ValueError):
        return None
    url = urlparse(direct_url.get("url", "")) if isinstance(direct_url, dict) else None
    return unquote(url.path) if url is not None and url.scheme == "file" else None


def probe_options(device: str | None = None, strict: bool = False, probed_in: str = "a fresh interpreter") -> dict:
    """What the probe is told: where this npu_shim is (the probe's way to its report code where none is importable
    there), what to judge for, and this process's working directory (a relative PYTHONPATH entry means it)."""
    shim_parent = Path(npu_shim.__file__).resolve().parent.parent
    try:
        cwd: str | None = os.getcwd()
    except OSError:  # started from a deleted directory
        cwd = None
    return dict(shim_parent=str(shim_parent), device=device, strict=strict, probed_in=probed_in, cwd=cwd,
                install_from=install_source(shim_parent), version=npu_shim.__version__)  # fmt: skip


def probe_in_fresh_interpreter(timeout: float, options: dict[str, Any]) -> dict[str, Any]:
    """The probe's answer from ``sys.executable`` started with the caller's environment, as a worker would be."""
    from npu_shim.doctor import probe

    source = Path(probe.__file__).read_text(encoding="utf-8")
    # From an empty directory, as a worker starts: `python -c` puts its directory first on sys.path, and
    # the caller's (a checkout, a stray verl.py) would otherwise make things importable that workers lack.
    with tempfile.TemporaryDirectory(prefix="npu-shim-doctor-") as neutral:
        try:
            completed = subprocess.run(
                [sys.executable, "-c", source, json.dumps(options)],
                env=environment_as_given(),
                cwd=neutral,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise RuntimeError(f"the probe did not finish within {timeout:g} s") from error
    return probe.last_json_line(completed.stdout, completed.stderr, "the probe", completed.returncode)


def main(
    *,
    as_json: bool = False,
    ray_address: str | None = None,
    use_ray: bool = False,
    timeout: float = 600,
    device: str | None = None,
    strict: bool = False,
) -> tuple[str, int]:
    """The report (text, or one JSON object) and the exit status, from a fresh interpreter or (``use_ray``) a Ray
    worker; ``device``: judge as where verl sees that device (``--device npu`` where an image is built)."""
    from npu_shim.doctor import ray_probe
    from npu_shim.doctor.render import render

    where = ray_probe.where(ray_address) if use_ray else "a fresh interpreter"
    options = probe_options(device, strict, where)
    try:
        if use_ray:
            answer = ray_probe.probe_on_ray(ray_address, timeout, environment_as_given(), options)
        else:
            answer = probe_in_fresh_interpreter(timeout, options)
        if not isinstance(answer, dict) or not isinstance(answer.get("report"), dict):
            raise RuntimeError(f"the probe answered {str(answer)[:200]!r}, not a report")
    except RuntimeError as error:
        answer = {"report": with_status({"probed_in": where}, ERROR, error=str(error))}
    report: Report = {**blank(), **answer["report"], "npu_shim_version": npu_shim.__version__}
    text = answer.get("text")  # none: a report made here, or the lookup only (no npu_shim there, or another release's)
    text = json.dumps(report, indent=2, sort_keys=True) if as_json else text or render(report)
    return text, report["exit_code"]
