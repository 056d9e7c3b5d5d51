"""A child of tests/matrix/test_upstream_fixes.py: ``fault_in_fix_child.py CHECKOUT``, on the simulated NPU.

``import npu_shim`` from the checkout ``CHECKOUT``, with ``vlm_mask_on_npu``'s ``apply`` replaced by one that makes a
partial edit and then raises; then verl's engine package and model_forward. Prints one JSON report: the module of
``util.build_vlm_attn_mask_thd`` (the partial edit undone or not) and the shim's verdicts.
"""

from __future__ import annotations

import json
import sys
from typing import Any

sys.path.insert(0, sys.argv[1])
import npu_shim  # noqa: F401 - activates the shim
import npu_shim.fixes.vlm_mask_on_npu as target


def broken(module: Any, changes: Any) -> None:  # a partial edit, then a fault
    changes.setattr(sys.modules["verl.models.mcore.util"], "build_vlm_attn_mask_thd", None)
    raise RuntimeError("injected fault in vlm_mask_on_npu")


target.apply = broken
import verl.workers.engine  # noqa: E402, F401
from verl.models.mcore import model_forward, util  # noqa: E402, F401

report = {
    "util_function": util.build_vlm_attn_mask_thd.__module__,
    "outcomes": {o.fix: o.verdict for o in sys.modules["npu_shim.hook"].outcomes},
}
print(json.dumps(report))
