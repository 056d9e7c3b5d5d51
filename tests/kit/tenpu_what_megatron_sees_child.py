"""A child of tests/kit/test_transformer_engine_npu.py, in compute mode on ``core_r0.18.0`` with TransformerEngineNPU's
stand-in installed or not (no arguments): prints one JSON report of the Transformer Engine Megatron sees."""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

import torch  # noqa: F401 - the simulated device, as verl's processes import it first
import torch_npu  # noqa: F401

report: dict[str, Any] = {}
try:
    import mindspeed.megatron_adaptor  # noqa: F401 - as verl's engine package does, before Megatron
except ImportError as error:
    report["mindspeed"] = str(error)
import megatron.core.extensions.transformer_engine as te_module  # noqa: E402
import megatron.core.models.gpt.gpt_layer_specs as specs  # noqa: E402
from megatron.core.utils import get_te_version  # noqa: E402

report["have_te"] = te_module.HAVE_TE
report["te_version"] = str(get_te_version())
try:
    report["distribution"] = version("transformer-engine")
except Exception as error:  # its type is the report: PackageNotFoundError without the stand-in
    report["distribution"] = type(error).__name__
report["spec_provider"] = None if specs.TESpecProvider is None else specs.TESpecProvider.__module__
report["norm"] = f"{te_module.TENorm.__module__}.{te_module.TENorm.__qualname__}"
print(json.dumps(report))
