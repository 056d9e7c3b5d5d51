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
``torch.compile``/``torch.jit.script`` made eager, apex's ``FusedAdam`` (MindSpeed's AdamW, the step an int)
and Megatron's device RNG state setter (``tensor_parallel.random._set_cuda_rng_state``: on the NPU's generator, at
once; Megatron's own queues the call for a CUDA that never initialises). These are MA's for the whole process:
MindSpeed's ``repatch`` does not remove them. Not modelled: MA's softmax (Megatron's fused softmax serves only its
local attention; verl's models take TE's) and its TE placeholder modules (the kit installs the TransformerEngineNPU
stand-in beside it, ``transformer_engine``, as the images do).

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
    try:  # the AdamW is the MindSpeed stand-in's; beside real MindSpeed (tests of its source) apex is left alone
        from mindspeed.compute import install_apex_dummy
    except ImportError:
        pass
    else:
        install_apex_dummy(megatron_adaptor=True)
    try:
        from megatron.core.tensor_parallel import random as megatron_random
    except ImportError:  # no Megatron in this environment: nothing of it to adapt
        return
    megatron_random._set_cuda_rng_state = _set_device_rng_state


def _set_device_rng_state(new_state: object, device: object = -1, graph_safe: bool = False) -> None:
    import torch

    torch.npu.set_rng_state(new_state)


_adapt()
