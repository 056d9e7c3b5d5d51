"""SIMULATED ``mindspeed.core.optimizer.adamw``: the optimizer MindSpeed gives Megatron as apex's ``FusedAdam``.

MindSpeed's always-on ``requirements_basic`` (``--optimizer-selection fused_adamw``, the default) makes
``apex.optimizers.FusedAdam`` importable as its own ``AdamW`` (:func:`mindspeed.compute.install_apex_dummy`),
so Megatron takes its Apex branch (``USING_APEX_OPTIMIZER``; the distributed optimizer's ``HAVE_APEX_OR_TE``).
Written from what that class does on the lines read (``2.1.0_core_r0.12.1``, ``2.3.0_core_r0.12.1``,
``core_r0.16.0``, master), never copied: Adam with decoupled weight decay (``torch._fused_adamw_``, one
parameter at a time), and, unlike torch's, the step counted **per parameter group** in ``group["step"]``:
an int64 tensor on the device on the ``*_core_r0.12.1`` lines, a Python int on ``core_r0.16.0`` and master.
An optimizer that has not stepped has no ``step`` anywhere, and Megatron's Apex branch expects just that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class AdamW(torch.optim.Optimizer):
    def __init__(  # noqa: PLR0917 - torch's AdamW signature, which Megatron calls
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        adam_w_mode: bool = True,
        *,
        maximize: bool = False,
        capturable: bool = False,
    ) -> None:
        # megatron-core 0.18 passes apex's `capturable` (its optimizer_cuda_graph, off under verl)
        if capturable:
            raise NotImplementedError("simulated MindSpeed AdamW: capturable (CUDA-graph) steps are not modelled")
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"AdamW: invalid lr={lr}, eps={eps}, weight_decay={weight_decay} or betas={betas}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad}
        super().__init__(params, {**defaults, "maximize": maximize})

    def _next_step(self, group: dict[str, Any]) -> torch.Tensor:
        count = int(group["step"]) + 1 if "step" in group else 1
        step = torch.tensor(count, dtype=torch.int64, device=torch.device("npu", torch.npu.current_device()))
        from mindspeed import lines

        group["step"] = step if lines.current().adam_step_on_device else count
        return step

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            step = self._next_step(group)
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    if group["amsgrad"]:
                        state["max_exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                torch._fused_adamw_(
                    [param],
                    [param.grad],
                    [state["exp_avg"]],
                    [state["exp_avg_sq"]],
                    [state["max_exp_avg_sq"]] if group["amsgrad"] else [],
                    [step],
                    amsgrad=group["amsgrad"],
                    lr=group["lr"],
                    beta1=beta1,
                    beta2=beta2,
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    maximize=group["maximize"],
                )
        return loss
