"""The guard against a non-finite loss: the last good state kept, and an iteration undone, retried or
stopped (``optim.on_nan``)."""

from __future__ import annotations

import copy
import math

import torch

from ptyacc.errors import PtyaccError
from ptyacc.optim.groups import ParameterGroup
from ptyacc.quantities.model import PtychoModel
from ptyacc.reconstruction.history import History
from ptyacc.reconstruction.saving import Saver
from ptyacc.results.runlog import RunLog

MAX_ROLLBACKS = 3


class NanGuard:
    """Keeps a copy of the last good state (the start, then the state after each accepted
    iteration); an iteration whose loss is not finite is undone, then retried with half the
    learning rates (``optim.on_nan: rollback``, at most MAX_ROLLBACKS times per run) or the run
    stops with the last good state saved."""

    def __init__(self, model: PtychoModel, groups: list[ParameterGroup], on_nan: str, saver: Saver,
                 log: RunLog) -> None:
        self.model, self.groups, self.on_nan, self.saver, self.log = model, groups, on_nan, saver, log
        self.retries = 0
        self.snapshot()

    def snapshot(self) -> None:
        params = {name: p.detach().clone() for name, p in self._state()}
        self.good = params, [copy.deepcopy(g.optimizer.state_dict()) for g in self.groups]

    def _state(self) -> list[tuple[str, torch.Tensor]]:
        """The parameters, and the buffers a constraint moves (``PtychoModel.moving_buffers``:
        probe centring moves the positions with the probe); the others never change, and copying
        the per-position ones every iteration would cost memory that grows with the scan."""
        moving = self.model.moving_buffers
        return [*self.model.named_parameters(), *((n, b) for n, b in self.model.named_buffers() if n in moving)]

    def accept(self, loss: float, history: History) -> bool:
        """True for a finite loss (its state becomes the last good one unless it is the last
        iteration); False after a rollback (retry the iteration); raises to stop."""
        if math.isfinite(loss):
            if history.done + 1 < history.iterations:
                self.snapshot()
            return True
        bad = [name.removeprefix("quantities.") for name, p in self.model.named_parameters()  # by quantity: object.transmission
               if not torch.isfinite(p).all()] or ["the loss only"]
        self.restore()
        iteration = history.done
        if self.on_nan == "rollback" and self.retries < MAX_ROLLBACKS:
            self.retries += 1
            schedule = self.groups[0].schedule  # shared by every group
            schedule.scale *= 0.5
            self.log.line(f"iteration {iteration}: loss {loss} (non-finite: {', '.join(bad)}); rolled back, "
                          f"learning rates x{schedule.scale:g}")
            return False
        self.saver.save(history)
        where = f"{self.saver.out_dir / 'results.h5'}" if self.saver.write else "memory"
        raise PtyaccError(f"optim: the loss became {loss} at iteration {iteration} (non-finite values in: "
                          f"{', '.join(bad)}); the last good state (after {iteration} iterations) is in {where}. "
                          "Lower optim.lr (Adam's steps) or optim.preconditioned_step and preconditioned_probe_step "
                          "(the preconditioned descent, the default; on a dense scan a larger "
                          "optim.preconditioner_batch_floor may do instead: 0.25 by default on several slices, 0.5 "
                          "in the X-ray near field, off elsewhere), or set optim.on_nan: rollback")

    def restore(self) -> None:
        """Back to the last good state (also after an interrupted iteration, ``ptyacc.reconstruction.interrupt``)."""
        params, states = self.good
        with torch.no_grad():
            for name, p in self._state():
                p.copy_(params[name])
        for group, state in zip(self.groups, states, strict=True):
            group.optimizer.load_state_dict(state)
