"""``npu-shim doctor``: will new interpreters and Ray workers started from here get the shim?

It judges the environment it was started in, not the one ``import npu_shim`` made: ``probe`` runs in a fresh
interpreter with that environment as given (``--ray``: ``ray_probe``, a task in a worker of a running cluster) and
reports (``verl_state``, ``mindspeed_state``, ``bridge_state``); here ``routes`` judges how the shim got there and
``render`` writes text. The statuses and exit codes: docs/usage.md; the report and its JSON: ``report``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import npu_shim
from npu_shim.doctor.report import ERROR, PROBLEM, Report


def environment_as_given() -> dict[str, str]:
    """This process's environment without what ``import npu_shim`` added to it."""
    propagation = sys.modules.get("npu_shim.propagation")
    return propagation.environ_as_given() if propagation is not None else dict(os.environ)


def shim_parent() -> str:  # the directory that holds this npu_shim: the probe's way to its report code
    return str(Path(npu_shim.__file__).resolve().parent.parent)


def probe_in_fresh_interpreter(timeout: float, device: str | None = None) -> dict[str, Any]:
    """The probe's report from ``sys.executable`` started with the caller's environment, as a worker would be."""
    from npu_shim.doctor import probe

    source = Path(probe.__file__).read_text(encoding="utf-8")
    # From an empty directory, as a worker starts: `python -c` puts its directory first on sys.path, and
    # the caller's (a checkout, a stray verl.py) would otherwise make things importable that workers lack.
    with tempfile.TemporaryDirectory(prefix="npu-shim-doctor-") as neutral:
        try:
            completed = subprocess.run(
                [sys.executable, "-c", source, shim_parent(), device or ""],
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


def collect(
    ray_address: str | None = None, use_ray: bool = False, timeout: float = 600, device: str | None = None
) -> Report:
    """The report from a fresh interpreter or (``use_ray``) a Ray worker; ``device``: judge as where verl sees that
    device (``--device npu`` where an image is built), whatever device the probe sees."""
    from npu_shim.doctor import ray_probe, routes

    where = ray_probe.where(ray_address) if use_ray else "a fresh interpreter"
    try:
        if use_ray:
            probed, where = ray_probe.probe_on_ray(ray_address, timeout, shim_parent(), environment_as_given(), device)
        else:
            probed = probe_in_fresh_interpreter(timeout, device)
        report = Report.from_json(probed)
    except RuntimeError as error:
        report = Report(ERROR, error=str(error))
    except ValueError as error:  # the npu_shim the probe imported there writes another report than this one reads
        report = Report(ERROR, error=f"the probe's report is not one npu_shim {npu_shim.__version__} reads: {error}")
    report = replace(report, npu_shim_version=npu_shim.__version__, probed_in=where)
    if report.probe is None:  # no probe: nothing more to judge
        return report
    if report.shim is None:  # the probe ran but could not load npu_shim's report code there
        fails = (report.assumed_device or report.device) == "npu" and not report.value_model_megatron_resolves
        return replace(report, status=PROBLEM if fails else ERROR, error=report.probe.report_error)
    return replace(report, routes=routes.judge(report))


def main(as_json: bool = False, **options: Any) -> tuple[str, int]:
    """The report (text, or one JSON object) and the exit status; ``options``: :func:`collect`'s."""
    from npu_shim.doctor.render import render

    report = collect(**options)
    text = json.dumps(report.to_json(), indent=2, sort_keys=True) if as_json else render(report)
    return text, report.exit_code
