"""A child of tests/matrix/test_megatron_adaptor_first.py (no arguments): a parent that imports nothing of Megatron
starts a ``multiprocessing`` spawn child that imports ``megatron.core``; prints the child's JSON report: the
MegatronAdaptor stand-in loaded and its record, verl, and what of Megatron or MegatronAdaptor the parent had imported.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from typing import Any


def child(queue: Any) -> None:
    import megatron.core  # noqa: F401 - what the spawned child does

    adaptor = sys.modules.get("megatron_adaptor")
    queue.put(
        {
            "adaptor_loaded": adaptor is not None,
            "megatron_first": getattr(adaptor, "MEGATRON_FIRST", None),
            "verl": any(name.partition(".")[0] == "verl" for name in sys.modules),
            "parent_imported": [name for name in PARENT if name.partition(".")[0] in ("megatron", "megatron_adaptor")],
        }
    )


PARENT = list(sys.modules)
if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    print(json.dumps(queue.get(timeout=300)))
    process.join(60)
