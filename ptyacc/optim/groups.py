"""One parameter group per optimised quantity (object, probe, positions, detector, ...): its tensors, its
optimizer (Adam unless the quantity brings its own), its learning rate and schedule, its start iteration,
its projections and its regulariser (``optim.regularize``). Each quantity builds its own groups
(``ptyacc/quantities/``); ``reconstruction/groups.py`` gathers them for a run.

A group that has not started yet is not stepped, but its tensors keep requiring gradients and take part in
every forward (DESIGN rule 2). Projections run identically on every process, whether the group has started
or not, so parameters stay bit-identical.

A regulariser's gradient is added after the exchange between processes (``step`` sees the sum over
processes), on every process alike: it counts once whatever the process count, on every pixel, including
those outside the step's footprint that the exchange does not send.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ptyacc.optim.row_adam import StepContext, TakesStepContext


@dataclass
class LrSchedule:
    """The learning rates' factor: a cosine decay from 1 at the first of ``iterations`` to ``final_fraction`` at the
    last (``optim.lr_final_fraction``), times ``scale`` (halved by each rollback after a non-finite loss,
    ``hooks.NanGuard``). One schedule serves every group."""

    iterations: int
    final_fraction: float
    scale: float = 1.0
    ends_from: int | None = None  # ``finish``: the iteration from which the rates fall to the end early
    ends_from_factor: float = 1.0  # the cosine's factor there

    def factor(self, iteration: int) -> float:
        if self.ends_from is None:
            return self.scale * lr_factor(iteration, self.iterations, self.final_fraction)
        span = self.iterations - 1 - self.ends_from
        along = (iteration - self.ends_from) / span if span > 0 else 1.0
        return self.scale * (self.final_fraction + (self.ends_from_factor - self.final_fraction)
                             * 0.5 * (1.0 + math.cos(math.pi * min(max(along, 0.0), 1.0))))

    def finish(self, iteration: int, iterations: int) -> None:
        """End after ``iterations`` instead: from ``iteration`` on the factor falls along a cosine from what it
        would have been there to ``final_fraction`` at the new last iteration (``reconstruction/convergence.py``)."""
        self.ends_from_factor = lr_factor(iteration, self.iterations, self.final_fraction)
        self.ends_from, self.iterations = iteration, iterations


@dataclass
class ParameterGroup:
    """An optimised quantity. ``after_step`` runs after every step, ``after_iteration`` after
    every iteration (projections onto the allowed set); ``start`` None = never updated.
    ``regularizer(values, grad)`` adds the gradient of a penalty at ``values`` to ``grad`` in
    place, for each tensor, before each update. ``exact_projection`` False: ``after_iteration``
    uses functions (angle, polar) whose last bit may depend on where a value sits in a tensor, so
    copies of a pixel held by several processes (``runtime.shard_object``) are refreshed afterwards.
    ``lateral_blur_px``, ``tv_smoothing``: the lateral blur's sigma and the TV smoothing step in
    ``after_iteration`` (0: none), whose reach around a pixel a process holding a tile of the
    object must hold (``tiles.needs_pixel_ring``). ``constraints`` run after ``after_iteration``
    (``model.recenter``'s, ``recenter.attach_recentring``); ``end_iteration`` runs both."""

    name: str
    params: list[torch.nn.Parameter]
    lr: float
    start: int | None
    after_step: Callable[[], None] | None = None
    after_iteration: Callable[[], None] | None = None
    optimizer: torch.optim.Optimizer | None = field(default=None, repr=False)
    regularizer: Callable[[torch.Tensor, torch.Tensor], None] | None = None
    exact_projection: bool = True
    lateral_blur_px: float = 0.0
    tv_smoothing: float = 0.0
    schedule: LrSchedule = field(default_factory=lambda: LrSchedule(1, 1.0))
    constraints: list[Callable[[], None]] = field(default_factory=list)

    def active(self, iteration: int) -> bool:
        return self.start is not None and iteration >= self.start

    def end_iteration(self) -> None:
        """What follows every iteration: the projection ``after_iteration``, then the ``constraints``."""
        if self.after_iteration is not None:
            self.after_iteration()
        for constraint in self.constraints:
            constraint()

    def step(self, iteration: int, batch: torch.Tensor | None = None) -> None:
        """The update of one step (global batch ``batch``) of ``iteration``, at that iteration's learning
        rate (set also before the group starts, so that checkpoints hold the same rate for every group)."""
        rate = self.lr * self.schedule.factor(iteration)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        if isinstance(self.optimizer, TakesStepContext):
            self.optimizer.context = StepContext(iteration, batch)
        if self.active(iteration):
            if self.regularizer is not None:
                for param in self.params:
                    if param.grad is None:
                        param.grad = torch.zeros_like(param)
                    self.regularizer(param.detach(), param.grad)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


@torch.no_grad()
def clamp(tensor: torch.Tensor, low: float | None, high: float | None) -> None:
    """``tensor`` (any shape) clamped in place to [low, high] (None: unbounded on that side): the projection
    onto a quantity's allowed range, the same bits on every process."""
    tensor.clamp_(low, high)


@torch.no_grad()
def zero_mean(offsets: torch.Tensor) -> None:
    """Position offsets (N, 2) less their mean, in place: a common shift of all positions is the object's shift,
    and with a scan affine it would let the corrections drift together."""
    offsets.sub_(offsets.mean(0))


def lr_factor(iteration: int, iterations: int, final_fraction: float) -> float:
    """Cosine decay from 1 at the first iteration to ``final_fraction`` at the last."""
    if iterations <= 1:
        return 1.0
    return final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + math.cos(math.pi * iteration / (iterations - 1)))


def fast_adam(device: torch.device) -> dict:
    """Adam's fused kernel where this torch has it for the device (CPU and CUDA in torch >= 2.4)."""
    try:
        torch.optim.Adam([torch.zeros(1, device=device, requires_grad=True)], fused=True)
    except (RuntimeError, TypeError, ValueError):
        return {}
    return {"fused": True}
