"""SIMULATED ``mindspeed.core.context_parallel.dot_product_attention``: MindSpeed's context-parallel attention.

As MindSpeed's ``CPDotProductAttentionImpl`` behaves (both lines read: ``2.3.0_core_r0.12.1``, ``core_r0.16.0``):

- built as MindSpeed builds it: Megatron's ``DotProductAttention.__init__`` refuses a context-parallel size
  above 1 ("only supported by TEDotProductAttention"), so the size is set to 1 while it runs and put back;
- its forward, at CP >= 2, is ring attention over the CP group (:mod:`.ring_context_parallel`), with the ring
  MindSpeed built when Megatron's parallel state was initialised; without that ring (``repatch`` came after
  the parallel state) it fails as MindSpeed's does, at the first forward: ``AssertionError: Context parallel
  ranks for ring intra window not initialized``.

Outside compute mode (the kit's default) nothing runs on the device: the forward raises as a kernel does.
"""

from __future__ import annotations

from typing import Any


class CPDotProductAttentionImpl:
    """MindSpeed's context-parallel attention (ring attention over the CP group)."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        context_parallel_size = config.context_parallel_size
        config.context_parallel_size = 1
        try:
            super().__init__(config, *args, **kwargs)
        finally:
            config.context_parallel_size = context_parallel_size

    def forward(  # noqa: PLR0917 - Megatron's DotProductAttention.forward signature
        self,
        query: Any,
        key: Any,
        value: Any,
        attention_mask: Any,
        attn_mask_type: Any = None,
        attention_bias: Any = None,
        packed_seq_params: Any = None,
    ) -> Any:
        from megatron.core import parallel_state

        from mindspeed import compute
        from mindspeed.args_utils import get_full_args
        from mindspeed.core.context_parallel import model_parallel_utils
        from mindspeed.features_manager import no_kernel

        if not compute.compute_mode():
            no_kernel("npu_fusion_attention")
        if attention_bias is not None:
            raise NotImplementedError("simulated MindSpeed CP attention: attention_bias is not supported")
        if parallel_state.get_context_parallel_world_size() < 2:
            return compute.fusion_attention(
                self, query, key, value, attention_mask, attn_mask_type, packed_seq_params=packed_seq_params
            )
        args = get_full_args()
        if getattr(args, "context_parallel_algo", "megatron_cp_algo") != "megatron_cp_algo":
            raise NotImplementedError(f"simulated MindSpeed: context_parallel_algo={args.context_parallel_algo!r}")
        if getattr(args, "attention_mask_type", "causal") != "causal":
            raise NotImplementedError("simulated MindSpeed: ring attention with the 'general' mask type")
        if packed_seq_params is None:
            raise NotImplementedError("simulated MindSpeed: ring attention over unpacked (SBH) inputs")
        if self.attention_dropout.p > 0:
            raise NotImplementedError("simulated MindSpeed: ring attention with dropout")
        # the same checks, in the same order, as MindSpeed's getters
        inner = model_parallel_utils.get_ring_ranks_for_intra_window()
        outer = model_parallel_utils.get_ring_ranks_for_inter_window_kv()
        model_parallel_utils.get_ring_ranks_for_inter_window_dkv()
        if len(inner) > 1:
            raise NotImplementedError("simulated MindSpeed: double ring attention (cp_window_size > 1)")
        from mindspeed.core.context_parallel.ring_context_parallel import ringattn_context_parallel

        group = parallel_state.get_context_parallel_group()
        return ringattn_context_parallel(
            query,
            key,
            value,
            ring_ranks=outer,
            group=group,
            packed_seq_params=packed_seq_params,
            softmax_scale=self.softmax_scale,
        )
