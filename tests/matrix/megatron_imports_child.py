"""A child of tests/matrix/test_megatron_adaptor_first.py: ``megatron_imports_child.py MODULE...``.

Imports each ``MODULE`` in turn (``megatron.core``, then ``megatron_adaptor`` where the test says), as a script that
never imports verl, then prints one JSON report: the MegatronAdaptor stand-in's record, whether it and verl were
loaded, every module in ``sys.modules``, the finders in ``sys.meta_path``, and Megatron's loader.
"""

from __future__ import annotations

import importlib
import json
import sys

for name in sys.argv[1:]:
    importlib.import_module(name)
adaptor = sys.modules.get("megatron_adaptor")
names = list(sys.modules)
report = {
    "adaptor_loaded": adaptor is not None,
    "simulated": getattr(adaptor, "SIMULATED", False),
    "megatron_first": getattr(adaptor, "MEGATRON_FIRST", None),
    "megatron_core": "megatron.core" in sys.modules,
    "verl": any(name.partition(".")[0] == "verl" for name in names),
    "modules": sorted(names),
    "meta_path": [getattr(finder, "__name__", type(finder).__name__) for finder in sys.meta_path],
    "megatron_loader": type(sys.modules["megatron"].__spec__.loader).__name__ if "megatron" in sys.modules else None,
    "one_megatron": "megatron.core" not in sys.modules or sys.modules["megatron"].core is sys.modules["megatron.core"],
}
print(json.dumps(report))
