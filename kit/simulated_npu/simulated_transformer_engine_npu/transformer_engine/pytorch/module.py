"""SIMULATED TENPU layers: TE's ``Linear``, ``LayerNormLinear``, ``LayerNorm`` and ``RMSNorm``, as Megatron calls them.

TE's parallel linears do their own tensor-parallel communication, which Megatron's ``TE*ParallelLinear`` wrappers
leave to them: ``parallel_mode="column"`` keeps ``out_features / tp_size`` rows of the weight and takes the whole
input (gathered along the sequence under sequence parallelism, else copied, its gradient all-reduced);
``"row"`` keeps ``in_features / tp_size`` columns and sums the partial outputs across the group (reduce-scattered
along the sequence under sequence parallelism), adding the bias once, after. Here that communication is
Megatron's own autograd mappings over the tensor-parallel group Megatron hands in; the arithmetic is torch's.
Parameters carry Megatron's tensor-parallel attributes, which its gradient norm and checkpoints read, and TE's
names (``layer_norm_weight``), which bridges' weight maps read.

Weight-gradient fusion (``fuse_wgrad_accumulation=True``, what Megatron passes as ``gradient_accumulation_fusion``;
Megatron-Bridge turns it on wherever ``transformer_engine.pytorch`` imports, TENPU included) is modelled as TE
documents it: see :class:`_LinearWithMainGrad`.

Refused, by name: options that would change what is computed and that the kit does not model (userbuffer overlap,
delayed weight gradients, zero-centred gamma, FP8).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

# Options that change how, not what, is computed
_NEUTRAL = {"ub_name", "rng_tracker_name", "symmetric_ar_type"}


def _refuse(layer: str, options: dict[str, Any]) -> None:
    """Options the kit does not model are refused when they ask for something (``False``/``None`` is TE's default)."""
    asked = sorted(name for name, value in options.items() if value and name not in _NEUTRAL)
    if asked:
        raise NotImplementedError(f"simulated TransformerEngineNPU {layer}: {', '.join(asked)} not modelled")


class _LinearWithMainGrad(torch.autograd.Function):
    """``F.linear`` whose weight gradient goes into ``weight.main_grad`` (TE's ``fuse_wgrad_accumulation``).

    What it models (TE's documented semantics, which Megatron's DDP relies on): the weight is assumed to carry
    ``main_grad``, a preallocated buffer (Megatron's DDP makes it a view of its float32 gradient buffer), and the weight
    gradient is accumulated into it in float32, never rounded to the parameters' dtype first (TE's GEMM accumulates into
    the buffer; MindSpeed's own TE linear before TENPU, ``npu_matmul_add_fp32``, the same); with ``overwrite_main_grad``
    set on the weight it replaces the buffer's content instead (Megatron FSDP). Where the weight has
    ``grad_added_to_main_grad`` (DDP sets it on every trainable parameter) it is set ``True`` and autograd gets a dummy
    weight gradient, so that the DDP hook on the weight's gradient accumulator still runs (it skips the addition and
    clears ``.grad``); zeros, so that code that does add it (``zero_out_wgrad``) adds nothing. Without that attribute
    no weight gradient is returned. The forward is ``F.linear`` itself (bias included where it is), bit for bit the
    unfused layer's; input and bias gradients are autograd's as for ``F.linear``.

    Refused, by name, rather than computed otherwise: a weight without ``main_grad`` (no DDP around the model), and a
    ``main_grad`` of another dtype than float32 (TE's handling of a low-precision buffer is not modelled).
    """

    @staticmethod
    def forward(ctx: Any, inp: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(inp, weight)
        ctx.has_bias = bias is not None
        return F.linear(inp, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        inp, weight = ctx.saved_tensors
        grad_input = grad_out.matmul(weight) if ctx.needs_input_grad[0] else None
        grad_bias = (
            grad_out.reshape(-1, grad_out.shape[-1]).sum(dim=0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        )
        grad_weight = None
        if ctx.needs_input_grad[1]:
            main_grad = getattr(weight, "main_grad", None)
            if main_grad is None:
                raise NotImplementedError(
                    "simulated TransformerEngineNPU: fuse_wgrad_accumulation needs weight.main_grad (Megatron's DDP "
                    "gives every trainable parameter one); a weight without it is not modelled"
                )
            if main_grad.dtype != torch.float32:
                raise NotImplementedError(
                    f"simulated TransformerEngineNPU: fuse_wgrad_accumulation into a {main_grad.dtype} main_grad is "
                    "not modelled (float32 only: Megatron's grad_reduce_in_fp32, verl's default)"
                )
            # [tokens, out]^T @ [tokens, in] in float32: bf16 inputs are exact in float32, the sum is not rounded
            wgrad = grad_out.reshape(-1, grad_out.shape[-1]).float().t().matmul(inp.reshape(-1, inp.shape[-1]).float())
            if getattr(weight, "overwrite_main_grad", False):
                main_grad.copy_(wgrad)
            else:
                main_grad.add_(wgrad)
            if hasattr(weight, "grad_added_to_main_grad"):
                weight.grad_added_to_main_grad = True
                grad_weight = torch.zeros_like(weight)
        return grad_input, grad_weight, grad_bias


def _device(device: Any) -> torch.device:
    if device is None:
        return torch.device("npu", torch.npu.current_device())
    return torch.device(device) if not isinstance(device, int) else torch.device("npu", device)


def _mark_parallel(parameter: torch.nn.Parameter, dim: int) -> None:
    parameter.tensor_model_parallel = True
    parameter.partition_dim = dim
    parameter.partition_stride = 1


class Linear(torch.nn.Module):
    def __init__(  # noqa: PLR0917 - TE's signature
        self,
        in_features: int,
        out_features: int,
        sequence_parallel: bool = False,
        fuse_wgrad_accumulation: bool = False,
        tp_group: Any = None,
        tp_size: int = 1,
        get_rng_state_tracker: Any = None,
        init_method: Any = None,
        bias: bool = True,
        return_bias: bool = False,
        params_dtype: torch.dtype | None = None,
        parallel_mode: str | None = None,
        device: Any = None,
        **options: Any,
    ) -> None:
        super().__init__()
        _refuse(type(self).__name__, options)
        # read back by Megatron (its TE fused-op MLP asks linear_fc1.fuse_wgrad_accumulation)
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        if parallel_mode not in (None, "column", "row"):
            raise ValueError(f"parallel_mode={parallel_mode!r}: TE's are None, 'column' and 'row'")
        self.in_features, self.out_features = in_features, out_features
        self.parallel_mode = parallel_mode
        self.tp_group = tp_group
        self.tp_size = tp_size if parallel_mode else 1
        self.tp_rank = torch.distributed.get_rank(tp_group) if self.tp_size > 1 and tp_group is not None else 0
        self.sequence_parallel = sequence_parallel and self.tp_size > 1
        self.return_bias = return_bias
        self.use_bias = bias
        local_out = out_features // self.tp_size if parallel_mode == "column" else out_features
        local_in = in_features // self.tp_size if parallel_mode == "row" else in_features
        dtype = params_dtype or torch.get_default_dtype()
        place = _device(device)
        self.weight = torch.nn.Parameter(torch.empty(local_out, local_in, dtype=dtype, device=place))
        self.bias = torch.nn.Parameter(torch.zeros(local_out, dtype=dtype, device=place)) if bias else None
        if place.type != "meta" and init_method is not None:
            if get_rng_state_tracker is not None and parallel_mode is not None:
                tracker = options.get("rng_tracker_name")
                with get_rng_state_tracker().fork(*([tracker] if tracker else [])):
                    init_method(self.weight)
            else:
                init_method(self.weight)
        if parallel_mode == "column":
            _mark_parallel(self.weight, 0)
            if self.bias is not None:
                _mark_parallel(self.bias, 0)
        elif parallel_mode == "row":
            _mark_parallel(self.weight, 1)
            if self.bias is not None:
                self.bias.sequence_parallel = sequence_parallel  # summed over the sequence's shards

    def set_tensor_parallel_group(self, tp_group: Any) -> None:
        self.tp_group = tp_group

    def _input(self, inp: torch.Tensor) -> torch.Tensor:
        if self.parallel_mode != "column" or self.tp_size == 1:
            return inp
        from megatron.core.tensor_parallel import mappings

        if self.sequence_parallel:
            return mappings.gather_from_sequence_parallel_region(inp, group=self.tp_group)
        return mappings.copy_to_tensor_model_parallel_region(inp, group=self.tp_group)

    def _output(self, out: torch.Tensor) -> torch.Tensor:
        if self.parallel_mode != "row" or self.tp_size == 1:
            return out
        from megatron.core.tensor_parallel import mappings

        if self.sequence_parallel:
            return mappings.reduce_scatter_to_sequence_parallel_region(out, group=self.tp_group)
        return mappings.reduce_from_tensor_model_parallel_region(out, group=self.tp_group)

    def forward(self, inp: torch.Tensor, is_first_microbatch: bool | None = None) -> Any:
        add_bias_here = self.bias is not None and not self.return_bias
        row = self.parallel_mode == "row"
        bias = self.bias if add_bias_here and not row else None
        if self.fuse_wgrad_accumulation and torch.is_grad_enabled() and self.weight.requires_grad:
            out = _LinearWithMainGrad.apply(self._input(inp), self.weight, bias)
        else:
            out = F.linear(self._input(inp), self.weight, bias)
        out = self._output(out)
        if add_bias_here and row:
            out = out + self.bias
        if self.return_bias:
            return out, self.bias
        return out


def _norm(kind: str, inp: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    shape = (inp.shape[-1],)
    if kind == "RMSNorm":
        return F.rms_norm(inp, shape, weight, eps)
    return F.layer_norm(inp, shape, weight, bias, eps)


class LayerNormLinear(Linear):
    """A norm of the local input, then :class:`Linear` (TE's ``LayerNormLinear``; parameters ``layer_norm_weight``,
    ``layer_norm_bias`` for ``LayerNorm``, ``weight``, ``bias``)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        eps: float = 1e-5,
        *,
        normalization: str = "LayerNorm",
        return_layernorm_output: bool = False,
        zero_centered_gamma: bool = False,
        **linear: Any,
    ) -> None:
        _refuse(
            type(self).__name__,
            {"return_layernorm_output": return_layernorm_output, "zero_centered_gamma": zero_centered_gamma},
        )
        if normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError(f"normalization={normalization!r}: TE's are 'LayerNorm' and 'RMSNorm'")
        super().__init__(in_features, out_features, **linear)
        self.normalization, self.eps = normalization, eps
        dtype, place = self.weight.dtype, self.weight.device
        self.layer_norm_weight = torch.nn.Parameter(torch.ones(in_features, dtype=dtype, device=place))
        self.layer_norm_weight.sequence_parallel = self.sequence_parallel
        self.layer_norm_bias = None
        if normalization == "LayerNorm":
            self.layer_norm_bias = torch.nn.Parameter(torch.zeros(in_features, dtype=dtype, device=place))
            self.layer_norm_bias.sequence_parallel = self.sequence_parallel

    def forward(self, inp: torch.Tensor, is_first_microbatch: bool | None = None) -> Any:
        normed = _norm(self.normalization, inp, self.layer_norm_weight, self.layer_norm_bias, self.eps)
        return super().forward(normed, is_first_microbatch)


class _Norm(torch.nn.Module):
    kind = ""

    def __init__(
        self,
        normalized_shape: int,
        eps: float = 1e-5,
        *,
        sequence_parallel: bool = False,
        params_dtype: torch.dtype | None = None,
        zero_centered_gamma: bool = False,
        device: Any = None,
        **options: Any,
    ) -> None:
        super().__init__()
        _refuse(type(self).__name__, {"zero_centered_gamma": zero_centered_gamma, **options})
        self.eps = eps
        self.sequence_parallel = sequence_parallel
        dtype, place = params_dtype or torch.get_default_dtype(), _device(device)
        self.weight = torch.nn.Parameter(torch.ones(normalized_shape, dtype=dtype, device=place))
        self.weight.sequence_parallel = sequence_parallel
        self.bias = None
        if self.kind == "LayerNorm":
            self.bias = torch.nn.Parameter(torch.zeros(normalized_shape, dtype=dtype, device=place))
            self.bias.sequence_parallel = sequence_parallel

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        return _norm(self.kind, inp, self.weight, self.bias, self.eps)


class LayerNorm(_Norm):
    kind = "LayerNorm"


class RMSNorm(_Norm):
    kind = "RMSNorm"


class GroupedLinear(torch.nn.Module):
    """Megatron subclasses it at import (``TEGroupedLinear``, for MoE experts); building one is not modelled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("simulated TransformerEngineNPU: GroupedLinear (MoE experts) is not modelled")
