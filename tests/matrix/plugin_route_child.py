"""A child of tests/matrix/test_plugin_route.py: ``plugin_route_child.py [ray]``: prints one JSON report.

Imports verl and its engine package as a worker does, in this process or (``ray``) in the worker of a local Ray
cluster: which route activated npu_shim, where it came from, what its fixes did, and the Megatron critic's engine.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def report() -> dict[str, Any]:
    import verl  # noqa: F401  (verl >= 0.9.0 loads the verl.plugins entry points here)
    from verl.workers.engine import EngineRegistry

    try:
        engine = EngineRegistry.get_engine_cls("value_model", "megatron").__name__
    except AssertionError as error:
        engine = f"AssertionError: {error}"
    shim, hook = sys.modules.get("npu_shim"), sys.modules.get("npu_shim.hook")
    return {
        "via": shim.activated_via() if shim is not None else None,
        "origin": getattr(shim, "__file__", None),
        "outcomes": {outcome.fix: outcome.verdict for outcome in hook.outcomes} if hook is not None else None,
        "engine": engine,
    }


if sys.argv[1:] == ["ray"]:
    import ray

    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        result = ray.get(ray.remote(num_cpus=1)(report).remote(), timeout=300)
        result["driver_imported_npu_shim"] = "npu_shim" in sys.modules
    finally:
        ray.shutdown()
else:
    result = report()
print(json.dumps(result))
