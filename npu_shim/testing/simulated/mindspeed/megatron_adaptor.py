"""SIMULATED ``mindspeed.megatron_adaptor``, from npu_shim.testing: ``repatch`` records, patches nothing.

Each call is appended to :data:`calls` with a shallow copy of the config and
whether Megatron's parallel state was already initialised (the real repatch must
come before it). With ``NPU_SHIM_SIM_REPATCH_LOG=<file>`` each call is also
appended to that file as a JSON line, for calls made in other processes.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

SIMULATED = True
calls: list[dict[str, Any]] = []


def repatch(config: dict[str, Any]) -> None:
    parallel_state = sys.modules.get("megatron.core.parallel_state")
    record = {
        "config": dict(config),
        "parallel_state_initialized": bool(parallel_state and parallel_state.model_parallel_is_initialized()),
        "pid": os.getpid(),
    }
    calls.append(record)
    log = os.environ.get("NPU_SHIM_SIM_REPATCH_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write(json.dumps(record, default=str) + "\n")
