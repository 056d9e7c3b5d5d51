"""A child of tests/matrix/test_upstream_fixes.py: ``fault_in_fix_child.py CHECKOUT``, on the simulated NPU.

``import npu_shim`` from the checkout ``CHECKOUT``, with ``vlm_mask_on_npu``'s edits replaced by a real edit of
verl's util module, then one that raises; then verl's engine package and model_forward. Prints one JSON report: the
module of ``util.build_vlm_attn_mask_thd`` (the partial edit undone or not) and the shim's verdicts.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

sys.path.insert(0, sys.argv[1])
import npu_shim  # noqa: F401 - activates the shim
from npu_shim import catalogue


def partial_then_fault(module: Any, writer: Any) -> None:  # a partial edit (written, then reverted), then a fault
    writer.bind(sys.modules["verl.models.mcore.util"], "build_vlm_attn_mask_thd", lambda *args, **kwargs: None)
    raise RuntimeError("injected fault in vlm_mask_on_npu")


catalogue.FIXES = tuple(
    dataclasses.replace(fix, edit=partial_then_fault) if fix.name == "vlm_mask_on_npu" else fix
    for fix in catalogue.FIXES
)
import verl.workers.engine  # noqa: E402, F401
from verl.models.mcore import model_forward, util  # noqa: E402, F401

report = {
    "util_function": util.build_vlm_attn_mask_thd.__module__,
    "outcomes": {o.fix: o.verdict for o in sys.modules["npu_shim.hook"].outcomes},
}
print(json.dumps(report))
