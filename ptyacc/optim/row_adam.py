"""What an optimizer's step may read beyond the gradient (``StepContext``), and ``RowAdam``: Adam
for a quantity with one row per position, which steps only the rows of the step's batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepContext:
    """What a step's update may need beyond the gradient: its ``iteration`` and its global ``batch``."""

    iteration: int
    batch: torch.Tensor | None = None


class TakesStepContext:
    """An optimizer whose step reads its ``StepContext``, which ``ParameterGroup.step`` sets before it."""

    context = StepContext(-1)


class RowAdam(TakesStepContext, torch.optim.Optimizer):
    """Adam for parameters (N, ...) with a row per position: a step updates only the rows of its
    global batch (the ``context``'s; every row without one), each row with its own moments and
    step count, as if every position had its own Adam stepped at each visit.

    Plain Adam moves every row at every step by its momentum, though only the batch's rows have
    a gradient: a position's weight took about a dozen steps per iteration on one gradient, and a
    varying probe's weights on a sparse scan ran away (a loss 10 times its value after two
    iterations, at steps that suit a dense scan)."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros(len(param), dtype=torch.float64, device=param.device)
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                rows = self.context.batch
                rows = torch.arange(len(param), device=param.device) if rows is None else rows.to(param.device)
                grad = param.grad[rows]
                count = state["step"][rows] + 1
                state["step"][rows] = count
                avg = state["exp_avg"][rows].mul_(beta1).add_(grad, alpha=1 - beta1)
                avg_sq = state["exp_avg_sq"][rows].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                state["exp_avg"][rows], state["exp_avg_sq"][rows] = avg, avg_sq
                shape = (-1,) + (1,) * (param.dim() - 1)
                correction1 = (1 - beta1 ** count).to(param.dtype).reshape(shape)
                correction2 = (1 - beta2 ** count).to(param.dtype).reshape(shape)
                denominator = (avg_sq / correction2).sqrt_().add_(group["eps"])
                param[rows] -= group["lr"] * (avg / correction1) / denominator
