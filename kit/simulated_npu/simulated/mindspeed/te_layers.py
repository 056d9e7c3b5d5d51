"""SIMULATED MindSpeed's stand-ins for Transformer Engine's layers (compute mode; see :mod:`mindspeed.compute`).

Megatron-native underneath, with TE's parameter names; imported only in compute mode (it imports Megatron).
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.core.tensor_parallel.layers import ColumnParallelLinear
from megatron.core.transformer.dot_product_attention import DotProductAttention

from mindspeed.compute import fusion_attention


class TELayerNormColumnParallelLinear(ColumnParallelLinear):
    """A norm then Megatron's column-parallel linear, with TE's names: ``layer_norm_weight`` (``_bias``).

    As MindSpeed's ``TELayerNormColumnParallelLinear`` (``mindspeed/te/pytorch/module/
    layernorm_column_parallel_linear.py``, ``MindSpeedTELayerNormColumnParallelLinear`` on
    ``2.3.0_core_r0.12.1``), whose parameter names mbridge's weight mapping relies on; on that line without
    the linear's bias (``lines.Line.te_linear_drops_bias``), as MindSpeed's there.
    """

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        config: Any,
        init_method: Any,
        gather_output: bool,
        bias: bool,
        skip_bias_add: bool,
        is_expert: bool = False,
        skip_weight_param_allocation: bool = False,
        tp_comm_buffer_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        options = {name: kwargs[name] for name in ("tp_group", "stride") if name in kwargs}
        super().__init__(
            input_size,
            output_size,
            config=config,
            init_method=init_method,
            bias=bias,
            gather_output=gather_output,
            skip_bias_add=skip_bias_add,
            is_expert=is_expert,
            skip_weight_param_allocation=skip_weight_param_allocation,
            **options,
        )
        if config.layernorm_zero_centered_gamma:
            raise NotImplementedError("simulated MindSpeed: zero-centred layer-norm gamma is not modelled")
        self.normalization = config.normalization
        self.eps = config.layernorm_epsilon
        device = "cpu" if config.use_cpu_initialization else torch.cuda.current_device()
        self.layer_norm_weight = torch.nn.Parameter(torch.ones(input_size, dtype=config.params_dtype, device=device))
        self.layer_norm_weight.sequence_parallel = config.sequence_parallel
        self.layer_norm_bias: torch.nn.Parameter | None = None
        if self.normalization == "LayerNorm":
            self.layer_norm_bias = torch.nn.Parameter(torch.zeros(input_size, dtype=config.params_dtype, device=device))
            self.layer_norm_bias.sequence_parallel = config.sequence_parallel

    def forward(self, input_: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        from mindspeed import lines

        if lines.current().te_linear_drops_bias and not self.skip_bias_add:
            # 2.3.0_core_r0.12.1: the bias is neither added nor handed back (lines.Line.te_linear_drops_bias)
            self.skip_bias_add = True
            try:
                return self._norm_then_linear(input_, *args, **kwargs)[0], None
            finally:
                self.skip_bias_add = False
        return self._norm_then_linear(input_, *args, **kwargs)

    def _norm_then_linear(self, input_: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        shape = (input_.shape[-1],)
        if self.normalization == "RMSNorm":
            normed = torch.nn.functional.rms_norm(input_, shape, self.layer_norm_weight, self.eps)
        else:
            normed = torch.nn.functional.layer_norm(
                input_, shape, self.layer_norm_weight, self.layer_norm_bias, self.eps
            )
        return super().forward(normed, *args, **kwargs)


class TEDotProductAttention(DotProductAttention):
    """MindSpeed's own TE attention (``core_r0.16.0``: ``mindspeed/te/pytorch/attention/dot_product_attention``):
    fusion attention in a class of its own, so patching ``DotProductAttention.forward`` does not reach it. At CP > 1
    MindSpeed's context-parallel class takes its place (``mindspeed.core.context_parallel``)."""

    def forward(  # noqa: PLR0917 - Megatron's DotProductAttention.forward signature
        self,
        query: Any,
        key: Any,
        value: Any,
        attention_mask: Any,
        attn_mask_type: Any = None,
        attention_bias: Any = None,
        packed_seq_params: Any = None,
        **kwargs: Any,
    ) -> Any:
        return fusion_attention(
            self, query, key, value, attention_mask, attn_mask_type, attention_bias, packed_seq_params
        )
