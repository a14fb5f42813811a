"""The validation error: a seeded fraction of the positions, spread over the scan, is left out
of the fit (``optim.validation_fraction``); after each iteration the model predicts their
patterns and the run's own loss per pattern against them is the validation error. For the
Poisson loss, its deviance terms (``store.poisson_deviance_sums``): the loss less the counts' own loss of
predicting themselves, which the loss leaves out, summed in float64 and without the loss's floor
of 0.01 counts; half the deviance per pattern, 0 for a perfect model and never negative, where
the bare loss is a large negative number whose float32 sum would keep little of the difference.
Unlike the training loss it does not reward fitting the noise of the fitted patterns, so runs
with more modes, slices or larger steps can be compared by it (``ptyacc tune`` minimises it)."""

from __future__ import annotations

import math

import numpy as np
import torch

from ptyacc.data.store import PatternStore, ShardPlan, poisson_deviance_sums, spatial_bisection
from ptyacc.errors import ConfigError
from ptyacc.quantities.model import PtychoModel

CHUNK = 64  # validation patterns per forward call


def validation_positions(positions_A: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices (V,) int64 of the positions (N, 2) left out of the fit: V = round(fraction N)
    (at least one for a fraction > 0), one drawn at random (``seed``) from each of V spatially
    compact groups of the scan, so that they cover the whole field rather than one corner."""
    n = len(positions_A)
    count = max(round(fraction * n), 1) if fraction > 0 else 0
    if count == 0:
        return np.empty(0, dtype=np.int64)
    if count >= n - 1:
        raise ConfigError(f"optim.validation_fraction: {fraction} of {n} positions leaves {n - count} to fit; "
                          "use a smaller fraction")
    groups, _ = spatial_bisection(np.asarray(positions_A, dtype=np.float64), count)
    rng = np.random.default_rng([seed, 0x7A11D])  # a stream of its own: the batch order uses [seed, epoch]
    return np.sort(np.array([rng.choice(group) for group in groups], dtype=np.int64))


class ValidationHook:
    """After each iteration: the loss per pattern (``loss``: the run's loss function) of the
    model's prediction for the validation positions, appended to ``history.validation``. Every
    process evaluates the validation positions of its share (``ShardPlan.evaluation_share``) and
    the sums are added over the processes, so all processes record the same value."""

    def __init__(self, model: PtychoModel, store: PatternStore, plan: ShardPlan, held_out: np.ndarray, loss: str,
                 accelerator) -> None:
        self.model, self.store, self.loss, self.accelerator = model, store, loss, accelerator
        self.count = len(held_out)
        mine = np.intersect1d(held_out, plan.evaluation_share(len(model.positions_px)))
        self.mine = torch.as_tensor(mine, dtype=torch.long, device=accelerator.device)

    def __call__(self, history) -> None:
        # a run resumed from a checkpoint has no validation errors for the iterations before it
        history.validation += [math.nan] * (history.done - 1 - len(history.validation))
        history.validation.append(self.error())

    @torch.no_grad()
    def error(self) -> float:
        """The validation error of the model as it is now: summed loss (Poisson: its deviance terms)
        / number of validation positions."""
        if self.loss == "poisson":
            total = poisson_deviance_sums(self.model, self.store, self.mine, CHUNK)[0]
        else:
            total = torch.zeros((), dtype=torch.float64, device=self.accelerator.device)
            for start in range(0, len(self.mine), CHUNK):
                part = self.mine[start:start + CHUNK]
                total += self.model(part, self.store.measured(part), self.loss).double()
        if self.accelerator.num_processes > 1:
            total = self.accelerator.reduce(total, reduction="sum")
        return float(total) / self.count
