"""SIMULATED MegatronAdaptor ("MA", Ascend's top-level ``megatron_adaptor``), from simulated_npu: NOT Ascend's.

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
Megatron's device RNG state setter (``tensor_parallel.random._set_cuda_rng_state``: on the NPU's generator, at
once; Megatron's own queues the call for a CUDA that never initialises), and Apex's weight-gradient extension
``fused_weight_gradient_mlp_cuda`` (:func:`_install_wgrad_fusion`). These are MA's for the whole process:
MindSpeed's ``repatch`` does not remove them. Not modelled: MA's softmax (Megatron's fused softmax serves only its
local attention; verl's models take TE's) and its TE placeholder modules (the kit installs the TransformerEngineNPU
stand-in beside it, ``transformer_engine``, as the images do).

:data:`MEGATRON_FIRST` records the Megatron modules imported before this one (an empty tuple where MA came
first, as MindSpeed's README requires).
"""

from __future__ import annotations

import sys
from typing import Any

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
    # before anything imports Megatron: its tensor_parallel.layers decides at import whether the extension exists
    _install_wgrad_fusion()
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


WGRAD_FUSION = "fused_weight_gradient_mlp_cuda"


def _install_wgrad_fusion() -> None:
    """Apex's ``fused_weight_gradient_mlp_cuda``, where no such module exists: Megatron's gradient-accumulation fusion
    for its own linears (``ColumnParallelLinear``, e.g. a GPT's output layer) needs it at construction.

    Why MA's: MindSpeed ``core_r0.16.0`` made this module itself (its ``requirements_basic``: a ``create_dummy`` patch
    whose ``wgrad_gemm_accum_fp32`` is MindSpeed's ``npu_matmul_add_fp32``, next to Apex's ``FusedAdam``);
    ``core_r0.18.0`` no longer does, and MA took over those basics (MindSpeed's README), as the kit already takes
    ``FusedAdam`` to be MA's. MA's own source is not public: that MA makes this module too is the kit's assumption,
    the one that lets Megatron-Bridge's models (``gradient_accumulation_fusion`` on wherever ``transformer_engine``
    imports, TENPU included) build on that line at all. Real ``core_r0.18.0`` supports it: its own
    ``mindspeed/core/weight_grad_store.py`` imports ``fused_weight_gradient_mlp_cuda`` and calls
    ``wgrad_gemm_accum_fp32`` where ``gradient_accumulation_fusion`` is on, and makes no such module itself.
    """
    import importlib.machinery
    import types
    from importlib.util import find_spec

    if WGRAD_FUSION in sys.modules or find_spec(WGRAD_FUSION) is not None:
        return
    module = types.ModuleType(WGRAD_FUSION, "SIMULATED by simulated_npu's MegatronAdaptor stand-in: not Apex's")
    module.__spec__ = importlib.machinery.ModuleSpec(WGRAD_FUSION, None)
    module.wgrad_gemm_accum_fp32 = _wgrad_gemm_accum_fp32
    module.wgrad_gemm_accum_fp16 = _wgrad_gemm_accum_fp16
    sys.modules[WGRAD_FUSION] = module


def _wgrad_gemm_accum_fp32(total_input: Any, grad_output: Any, main_grad: Any) -> None:
    """``main_grad += grad_output^T @ total_input``, in float32 (Apex's kernel and MindSpeed's ``npu_matmul_add_fp32``
    accumulate the GEMM into the float32 buffer: the bf16 operands are exact in float32 and the sum is not rounded to
    bf16 first). Megatron passes ``[tokens, in]``, ``[tokens, out]`` and the ``[out, in]`` buffer."""
    import torch

    if main_grad.dtype != torch.float32:
        raise RuntimeError(f"simulated {WGRAD_FUSION}.wgrad_gemm_accum_fp32: main_grad is {main_grad.dtype}")
    inputs = total_input.reshape(-1, total_input.shape[-1]).float()
    grads = grad_output.reshape(-1, grad_output.shape[-1]).float()
    main_grad.add_(grads.t().matmul(inputs))


def _wgrad_gemm_accum_fp16(total_input: Any, grad_output: Any, main_grad: Any) -> None:
    """A half-precision ``main_grad`` (Megatron's ``grad_reduce_in_fp32=False``): refused, as MindSpeed's
    ``npu_matmul_add_fp16`` refuses it, never accumulated in another precision."""
    raise NotImplementedError(
        f"simulated {WGRAD_FUSION}.wgrad_gemm_accum_fp16: gradient accumulation fusion into a {main_grad.dtype} "
        "main_grad is not modelled (MindSpeed's npu_matmul_add_fp16 refuses it too)"
    )


def _set_device_rng_state(new_state: object, device: object = -1, graph_safe: bool = False) -> None:
    import torch

    torch.npu.set_rng_state(new_state)


_adapt()
