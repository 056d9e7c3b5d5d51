"""SIMULATED TENPU ``transformer_engine.pytorch.optimizers``: Megatron imports TE's ``FusedAdam`` and ``FusedSGD``
before apex's, so on a TENPU image these are the optimizers it builds (MindSpeed 0.18's swap optimizer says as much:
"the actual optimizer is TE FusedAdam"). TE's multi-tensor kernels (``multi_tensor_l2norm`` and the rest) are not
modelled: Megatron's gradient clipping then keeps its own implementation."""

from transformer_engine.pytorch.optimizers.fused_adam import FusedAdam, FusedSGD

__all__ = ["FusedAdam", "FusedSGD"]
