"""A child of tests/kit/test_torch_version.py: the simulated torch_npu imported on the torch version argv[1] names.

torch's backend autoload is off in its environment, so that torch is imported first and its version set before the
stand-in torch_npu reads it; prints one JSON report: the outcome of ``import torch_npu`` and what it reports.
"""

from __future__ import annotations

import json
import sys

import torch

torch.__version__ = sys.argv[1]  # the torch this child pretends to be
report: dict[str, object] = {"torch": str(torch.__version__)}
try:
    import torch_npu
except RuntimeError as error:
    report["import"] = ["RuntimeError", str(error)]
else:
    report["import"] = ["ran", torch_npu.__version__]
    report["computes"] = float((torch.ones(2, device="npu") * 3).sum().cpu())
print(json.dumps(report))
