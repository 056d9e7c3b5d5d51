"""A child of tests/matrix/test_upstream_fixes.py: ``npu_causal_mask_child.py SEQ_LEN`` (verl #7055).

verl's ``_build_npu_attn_mask`` on a padding mask of ``SEQ_LEN`` tokens: prints one JSON report of the peak resident
memory the call adds (Linux's VmHWM, reset before the call), and the shape, dtype and a digest of the mask it returns.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
from verl.models.mcore import util


def status(key: str) -> int:
    with open("/proc/self/status") as lines:
        return int(next(line for line in lines if line.startswith(key)).split()[1]) * 1024


padding = torch.ones(1, int(sys.argv[1]), dtype=torch.bool)
padding[0, -100:] = False
Path("/proc/self/clear_refs").write_text("5")  # the peak resident size starts again from here
resident = status("VmRSS")
mask = util._build_npu_attn_mask(padding)
report = {
    "peak_bytes": status("VmHWM") - resident,
    "shape": list(mask.shape),
    "dtype": str(mask.dtype),
    "digest": hashlib.sha1(mask.numpy().tobytes()).hexdigest(),
}
print(json.dumps(report))
