"""A child of tests/matrix/test_upstream_fixes.py: ``import_order_child.py CHECKOUT MODULE...``.

Imports each ``MODULE`` in the order given; ``npu_shim`` among them (from the checkout ``CHECKOUT``, put on sys.path
just then) activates the shim there. Prints the shim's verdicts as JSON.
"""

from __future__ import annotations

import importlib
import json
import sys

for name in sys.argv[2:]:
    if name == "npu_shim":
        sys.path.insert(0, sys.argv[1])
    importlib.import_module(name)
hook = sys.modules["npu_shim.hook"]
print(json.dumps({o.fix: o.verdict for o in hook.outcomes}))
