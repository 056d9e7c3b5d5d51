"""SIMULATED MegatronAdaptor ("MA", Ascend's top-level ``megatron_adaptor``), from npu_shim.testing: NOT Ascend's.

MindSpeed ``core_r0.17.0`` and ``core_r0.18.0`` are three layers: MegatronAdaptor, TransformerEngineNPU, MindSpeed
(its README: install them in that order, all three required; load MA before Megatron). Their
``mindspeed/__init__.py`` is ``import megatron_adaptor``, so without MA ``import mindspeed`` fails, and verl's
guarded ``from mindspeed.megatron_adaptor import repatch`` leaves ``repatch = None``: every MindSpeed patch off.
The kit puts this package on the path only for those lines (``simulated_npu_env(megatron_adaptor=False)`` leaves
it out, to show that failure).

What MindSpeed's README says MA does: RNG, softmax, device detection and Transformer Engine placeholder modules,
the basics MindSpeed 0.18 no longer does itself. Modelled here, at import and in compute mode only (as the kit's
other basics; default mode builds no model): ``torch_npu.contrib.transfer_to_npu`` (CUDA calls go to the NPU),
``torch.compile``/``torch.jit.script`` made eager, and apex's ``FusedAdam`` (MindSpeed's AdamW, the step an int)
for Megatron's default optimizer. These are MA's for the whole process: MindSpeed's ``repatch`` does not remove
them. Megatron's RNG state setter, TE version and TE layers stay with the MindSpeed stand-in's basic features
(``mindspeed.compute``), as on the other lines; TransformerEngineNPU is modelled there too, at Megatron's level
(docs/mindspeed-lines.md says what is and is not modelled).

:data:`MEGATRON_FIRST` records the Megatron modules imported before this one (an empty tuple where MA came
first, as MindSpeed's README requires).
"""

from __future__ import annotations

import sys

SIMULATED = True
MEGATRON_FIRST = tuple(sorted(name for name in sys.modules if name == "megatron" or name.startswith("megatron.")))


def _eager(*args: object, **kwargs: object) -> object:
    """``torch.compile(fn)`` or ``torch.compile(**options)(fn)``: ``fn`` itself (no Inductor on an NPU)."""
    if args and callable(args[0]):
        return args[0]
    return lambda function: function


def _adapt() -> None:
    import torch
    import torch_npu

    compute = getattr(torch_npu, "_compute", None)
    if compute is None or not compute.enabled():
        return
    from torch_npu.contrib import transfer_to_npu  # noqa: F401

    torch.compile = _eager
    torch.jit.script = _eager
    from mindspeed.compute import install_apex_dummy

    install_apex_dummy(megatron_adaptor=True)


_adapt()
