"""``doctor --ray [ADDRESS]``: the probe as a task in a worker of a running Ray cluster (it starts none). Ray's client
retries a connection it cannot make for minutes and ignores SIGTERM meanwhile, so it runs in a child interpreter of its
own session, which the doctor ends whole at ``--timeout`` or when it is interrupted itself."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from npu_shim.doctor import probe

CLIENT = """
import json, sys
options = json.loads(sys.argv[1])
sys.path.insert(0, options["shim_parent"])
from npu_shim.doctor.ray_probe import connect_and_probe
print(json.dumps(connect_and_probe({address!r}, {deadline!r}, {timeout!r}, options)))
"""
GRACE = 2.0  # seconds the client keeps, of the doctor's timeout, to say why it had no answer
# What the doctor takes instead of the `--address` flag of Ray's own advice (ray.init reads RAY_ADDRESS for "auto").
ADVICE = (
    "Name the cluster to probe: npu-shim doctor --ray ADDRESS (or RAY_ADDRESS=ADDRESS with --ray alone), "
    "or start one here: ray start --head."
)


def _with_our_advice(error: BaseException) -> str:  # Ray's message, without its advice for its own command line
    sentences = re.split(r"(?<=\.) +", str(error))
    kept = [sentence for sentence in sentences if "--address" not in sentence]
    return str(error) if len(kept) == len(sentences) else " ".join([*kept, ADVICE])


def connect_and_probe(address: str | None, deadline: float, timeout: float, options: dict[str, Any]) -> dict[str, Any]:
    """In the client interpreter: the probe's answer from a Ray worker by ``deadline``, or ``{"error": "..."}``."""
    try:
        import ray
        from ray.exceptions import GetTimeoutError
    except ImportError as error:
        return {"error": f"ray is not importable here ({error})"}
    # pickled by value, not in sys.modules: the worker needs no npu_shim to run it
    namespace: dict[str, Any] = {"__name__": "npu_shim_doctor_probe"}
    exec(compile(Path(probe.__file__).read_text(encoding="utf-8"), probe.__file__, "exec"), namespace)
    task = ray.remote(num_cpus=0, max_retries=0)(namespace["probe"])
    try:
        context = ray.init(address=address or "auto", log_to_driver=False, logging_level="ERROR")
    except Exception as error:  # ConnectionError when nothing runs there (when Ray gives up at all)
        return {"error": f"could not connect to a Ray cluster at {address or 'auto'}: {_with_our_advice(error)}"}
    # "auto" names no cluster: the report names the one Ray connected to
    info = getattr(context, "address_info", None)
    resolved = (info.get("gcs_address") or info.get("address")) if isinstance(info, dict) else None
    try:
        reference = task.remote({**options, "probed_in": where(resolved or address)})
        try:
            return ray.get(reference, timeout=max(deadline - time.time(), 0.1))
        except GetTimeoutError:
            ray.cancel(reference, force=True)
            return {"error": f"the Ray task did not answer within {timeout:g} s"}
        except Exception as error:  # the task itself failed in the worker
            return {"error": f"the Ray task failed: {type(error).__name__}: {error}"}
    finally:
        ray.shutdown()


class _Interrupted(Exception):  # not InterruptedError: the selectors under communicate() swallow that one
    pass


def probe_on_ray(address: str | None, timeout: float, env: dict[str, str], options: dict[str, Any]) -> dict[str, Any]:
    """The probe's answer from a Ray worker within ``timeout`` s; else RuntimeError."""
    deadline = time.time() + timeout - GRACE
    code = CLIENT.format(address=address, deadline=deadline, timeout=timeout)
    client = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(options)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def interrupted(signum: int, frame: Any) -> None:  # SIGTERM and SIGINT end the client, not the doctor alone
        raise _Interrupted(signal.Signals(signum).name)

    previous = {}
    try:
        with contextlib.suppress(ValueError):  # not the main thread: a library caller keeps its own handlers
            previous = {signum: signal.signal(signum, interrupted) for signum in (signal.SIGTERM, signal.SIGINT)}
        stdout, stderr = client.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"no answer from {where(address)} within {timeout:g} s (connecting included)") from None
    except _Interrupted as signal_name:
        raise RuntimeError(f"interrupted by {signal_name} while waiting for {where(address)}") from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(client.pid, signal.SIGKILL)
        client.wait()
    answer = probe.last_json_line(stdout, stderr, "the Ray client", client.returncode)
    if "error" in answer:
        raise RuntimeError(answer["error"])
    return answer


def where(address: str | None) -> str:  # the cluster Ray connected to, or the one asked for
    return f"a Ray worker of the cluster at {address or os.environ.get('RAY_ADDRESS') or 'auto'}"
