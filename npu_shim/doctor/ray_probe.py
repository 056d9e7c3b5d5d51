"""``doctor --ray [ADDRESS]``: run the probe as a task in a worker of a running Ray cluster.

That worker was started by the cluster, with the cluster's environment: the
question users really have is whether *those* processes get the shim. Nothing
is started: ``ray.init`` connects to the cluster at ADDRESS (default ``auto``,
i.e. ``RAY_ADDRESS`` or a cluster started on this machine by ``ray start``), and
the answer is awaited for a bounded time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from npu_shim.doctor import probe


def _probe_function() -> Any:
    """The probe as a function pickled by value: the worker needs no npu_shim to run it."""
    source = Path(probe.__file__).read_text(encoding="utf-8")
    namespace: dict[str, Any] = {"__name__": "npu_shim_doctor_probe"}  # not in sys.modules: by value
    exec(compile(source, probe.__file__, "exec"), namespace)
    return namespace["probe"]


def probe_on_ray(address: str | None, timeout: float, shim_parent: str) -> dict[str, Any]:
    """The probe's report from a Ray worker; raises RuntimeError with a readable message when there is none."""
    try:
        import ray
        from ray.exceptions import GetTimeoutError
    except ImportError as error:
        raise RuntimeError(f"ray is not importable here ({error})") from error
    task = ray.remote(num_cpus=0, max_retries=0)(_probe_function())
    try:
        ray.init(address=address or "auto", log_to_driver=False, logging_level="ERROR")
    except Exception as error:  # ConnectionError when nothing runs there
        raise RuntimeError(f"could not connect to a Ray cluster at {address or 'auto'}: {error}") from error
    try:
        reference = task.remote(shim_parent)
        try:
            return ray.get(reference, timeout=timeout)
        except GetTimeoutError as error:
            ray.cancel(reference, force=True)
            raise RuntimeError(f"the Ray task did not answer within {timeout:g} s") from error
        except Exception as error:  # the task itself failed in the worker
            raise RuntimeError(f"the Ray task failed: {type(error).__name__}: {error}") from error
    finally:
        ray.shutdown()


def where(address: str | None) -> str:
    return f"a Ray worker of the cluster at {address or os.environ.get('RAY_ADDRESS') or 'auto'}"
