"""SIMULATED ``mindspeed.core.context_parallel.dot_product_attention``: ring attention, without a kernel."""

from __future__ import annotations

from typing import Any


class CPDotProductAttentionImpl:
    """MindSpeed's context-parallel attention (ring attention over the CP group)."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        from mindspeed.features_manager import no_kernel

        no_kernel("npu_ring_attention_update")
