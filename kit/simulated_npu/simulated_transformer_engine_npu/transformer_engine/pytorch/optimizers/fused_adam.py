"""SIMULATED TENPU ``FusedAdam`` (``transformer_engine.pytorch.optimizers.fused_adam``, the path verl registers as a
safe global for ``torch.load``): TE's FusedAdam as Megatron builds it outside precision-aware training.

Adam (``adam_w_mode=True``: decoupled weight decay, Megatron's default; ``False``: L2 added to the gradient), torch's
fused kernels one parameter at a time, the step counted per parameter group in ``group["step"]``, a Python int, as
TE's and apex's do. Refused by name: master weights, low-precision moments, parameter remainders, decoupled
gradients and CUDA-graph (``capturable``) steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class FusedAdam(torch.optim.Optimizer):
    def __init__(  # noqa: PLR0917 - TE's signature
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        adam_w_mode: bool = True,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        capturable: bool = False,
        master_weights: bool = False,
        use_decoupled_grad: bool = False,
        store_param_remainders: bool = False,
        exp_avg_dtype: torch.dtype = torch.float32,
        exp_avg_sq_dtype: torch.dtype = torch.float32,
        master_weight_dtype: torch.dtype = torch.float32,
        **options: Any,
    ) -> None:
        asked = {
            "capturable": capturable,
            "master_weights": master_weights,
            "use_decoupled_grad": use_decoupled_grad,
            "store_param_remainders": store_param_remainders,
            "amsgrad": amsgrad,
            "bias_correction=False": not bias_correction,
            "exp_avg_dtype": exp_avg_dtype != torch.float32,
            "exp_avg_sq_dtype": exp_avg_sq_dtype != torch.float32,
            "master_weight_dtype": master_weight_dtype != torch.float32,
            **options,
        }
        refused = sorted(name for name, value in asked.items() if value)
        if refused:
            raise NotImplementedError(f"simulated TransformerEngineNPU FusedAdam: {', '.join(refused)} not modelled")
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"FusedAdam: invalid lr={lr}, eps={eps}, weight_decay={weight_decay} or betas={betas}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "adam_w_mode": adam_w_mode}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            group["step"] = int(group.get("step", 0)) + 1
            beta1, beta2 = group["betas"]
            kernel = torch._fused_adamw_ if group["adam_w_mode"] else torch._fused_adam_
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                step = torch.tensor(float(group["step"]), device=param.device)
                kernel(
                    [param],
                    [param.grad],
                    [state["exp_avg"]],
                    [state["exp_avg_sq"]],
                    [],
                    [step],
                    amsgrad=False,
                    lr=group["lr"],
                    beta1=beta1,
                    beta2=beta2,
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    maximize=False,
                )
        return loss


class FusedSGD(torch.optim.SGD):
    """Megatron imports it beside ``FusedAdam``: torch's SGD (TE's fused kernel computes the same update)."""
