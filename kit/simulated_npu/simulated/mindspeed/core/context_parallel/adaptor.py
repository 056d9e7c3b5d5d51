"""SIMULATED ``mindspeed.core.context_parallel.adaptor``: Megatron's attention class at CP >= 2."""

from __future__ import annotations

from megatron.core.transformer import dot_product_attention

from mindspeed.core.context_parallel.dot_product_attention import CPDotProductAttentionImpl


class MindSpeedCPDotProductAttention(CPDotProductAttentionImpl, dot_product_attention.DotProductAttention):
    """Megatron's ``DotProductAttention`` with MindSpeed's ring attention ``forward``."""
