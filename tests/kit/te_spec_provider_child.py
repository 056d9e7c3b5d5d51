"""A child of tests/kit/test_compute_mode.py, in compute mode (no arguments): prints one JSON report.

Megatron's TE spec provider across two ``repatch`` calls (verl's engines, one process): whether its home module
keeps Megatron's class, and whether the GPT layer spec with Transformer Engine still builds.
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import Any

import torch  # noqa: F401 - the simulated device, as verl's processes import it first
import torch_npu  # noqa: F401

# MindSpeed's adaptor before Megatron's specs, as verl's engine package imports them
# isort: split
import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)

# isort: split
from megatron.core.models.gpt import gpt_layer_specs

report: dict[str, Any] = {}
try:
    import megatron.core.extensions.transformer_engine_spec_provider as provider
except ModuleNotFoundError:  # megatron-core 0.12: no provider; its specs bind the TE layers themselves
    provider = None
megatron_class = getattr(provider, "TESpecProvider", None)
report["megatron"] = importlib.metadata.version("megatron-core")
report["specs_bound_at_import"] = None if getattr(gpt_layer_specs, "TESpecProvider", None) is None else "a class"
for _ in range(2):  # verl's engines: one repatch each, in one process
    megatron_adaptor.repatch({"use_flash_attn": True})
report["home_keeps_megatrons_class"] = getattr(provider, "TESpecProvider", None) is megatron_class
try:
    spec = gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    report["te_spec"] = type(spec).__name__
except TypeError as error:
    report["te_spec"] = f"TypeError: {error}"
print(json.dumps(report))
