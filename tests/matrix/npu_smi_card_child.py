"""A child of tests/matrix/test_npu_smi_card.py: ``npu_smi_card_child.py CASES`` (verl #6762, the card-1 probe).

For each case of the JSON object ``CASES`` (a name: the variables to set, ``null`` to unset), in this one process:
the rollout's IPC decision asked 20 times through verl's own ``is_support_ipc``, bound by name as the rollout binds
it (0.9.x's runs the platform's ``is_ipc_supported``). Prints one JSON report: per case the first answer (or the error
verl raised), whether all 20 agreed, the ``npu-smi`` calls made (the kit's log), the shim's warnings and its card.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

from verl.utils.device import is_support_ipc

CHECKS = 20  # a rollout's start and 19 weight syncs
warnings: list[str] = []


class Warnings(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        warnings.append(record.getMessage())


logging.getLogger("npu_shim").addHandler(Warnings(logging.WARNING))
shim = sys.modules.get("npu_shim.fixes.npu_smi_card")
log = Path(os.environ["NPU_SHIM_SIM_NPU_SMI_LOG"])
report: dict = {"shim": shim is not None, "cases": {}}
for name, variables in json.loads(sys.argv[1]).items():
    for variable, value in variables.items():
        os.environ.pop(variable, None) if value is None else os.environ.__setitem__(variable, value)
    if shim is not None:
        shim.decision.cache_clear()  # decide again for this case
    log.write_text("")
    warnings.clear()
    answers: list = []
    for _ in range(CHECKS):
        try:
            answers.append(is_support_ipc())
        except Exception as error:  # verl's own error: the case's answer, once
            answers.append(f"{type(error).__name__}: {error}")
            break
    report["cases"][name] = {
        "answer": answers[0],
        "agreed": len(answers) == CHECKS and len(set(map(str, answers))) == 1,
        "calls": log.read_text().splitlines(),
        "warnings": list(warnings),
        "card": shim.decision().card if shim is not None and isinstance(answers[0], bool) else None,
        "npu_smi_found": shutil.which("npu-smi") is not None,
    }
print(json.dumps(report))
