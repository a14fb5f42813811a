"""What happens at the end of an iteration, one small hook each: the run.log line, the progress
bar, the sync check, checkpoints, intermediate saves (``iteration_hooks`` picks them from the
config); and the guard that undoes an iteration whose loss is not finite. The loop calls them in
order; each decides for itself whether this iteration is its turn."""

from __future__ import annotations

import contextlib
import copy
import math
import sys
import time
from dataclasses import dataclass, field

import torch

from ptyacc.config import Config
from ptyacc.data import PtychoData
from ptyacc.errors import PtyaccError
from ptyacc.reconstruction.distributed import check_in_sync
from ptyacc.reconstruction.exchange import Traffic
from ptyacc.reconstruction.groups import ParameterGroup
from ptyacc.reconstruction.interrupt import WallClock
from ptyacc.reconstruction.model import PtychoModel
from ptyacc.reconstruction.saving import Saver
from ptyacc.results.runlog import RunLog
from ptyacc.watch.progress import in_notebook, progress_bar

MAX_ROLLBACKS = 3


@dataclass
class History:
    """The iterations done so far: loss (mean per pattern over all processes), seconds, the
    exchange's traffic of each iteration of this launch (None for one process), and the
    validation error (``ptyacc/validation.py``; None without validation positions)."""

    iterations: int  # planned
    loss: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    traffic: list[Traffic] | None = None
    validation: list[float] | None = None
    done: int = 0  # iterations done: len(loss)

    def record(self, loss: float, seconds: float, traffic: Traffic | None) -> None:
        self.loss.append(loss)
        self.seconds.append(seconds)
        self.done = len(self.loss)
        if traffic is not None:
            self.traffic.append(traffic)

    def resume(self, loss: list[float], seconds: list[float]) -> None:
        """Continue after the iterations of a checkpoint, whose losses and times are these."""
        self.loss, self.seconds, self.done = list(loss), list(seconds), len(loss)


class LogLine:
    """One run.log line per iteration: loss, time, and what the exchange moved; after the last
    iteration, the run's summary (seconds since ``started``, a ``time.perf_counter`` reading)."""

    def __init__(self, log: RunLog, started: float) -> None:
        self.log, self.started = log, started

    def __call__(self, history: History) -> None:
        comm = ""
        if history.traffic:
            t = history.traffic[-1]
            split = ", ".join(f"{kind} {count / 2**20:.2f}" for kind, count in t.bytes.items())
            comm = (f", exchanged {t.total_bytes / 2**20:.2f} MiB ({split}) in {t.calls} collectives, "
                    f"waiting {t.wait_s:.3f} s ({t.wait_s / max(history.seconds[-1], 1e-12):.0%})")
        valid = f", validation error {history.validation[-1]:.6g}" if history.validation else ""
        lines = [f"iteration {history.done}/{history.iterations}: loss {history.loss[-1]:.6g}{valid}, "
                 f"{history.seconds[-1]:.3f} s{comm}"]
        if history.done == history.iterations:
            lines += self._summary(history)
        for line in lines:
            self.log.line(line)

    def _summary(self, history: History) -> list[str]:
        wall = time.perf_counter() - self.started
        lines = [f"done: {history.done} iterations in {wall:.1f} s, final loss {history.loss[-1]:.6g}"]
        traffic = history.traffic or []
        if traffic:
            per_iteration = sum(t.total_bytes for t in traffic) / len(traffic) / 2**20
            waiting = sum(t.wait_s for t in traffic) / sum(history.seconds[-len(traffic):])
            lines.append(f"communication: {per_iteration:.2f} MiB exchanged per iteration, {waiting:.0%} of the "
                         "iteration time spent waiting")
        return lines


class ProgressBar:
    """A progress bar on the main process, in terminals and notebooks only (not in log files)."""

    def __init__(self, total: int, initial: int, patterns: int) -> None:
        self.bar = progress_bar(total=total, initial=initial, desc="ptyacc", unit="it", dynamic_ncols=True)
        self.patterns = patterns

    @classmethod
    def wanted(cls, accelerator, enabled: bool) -> bool:
        return accelerator.is_main_process and enabled and (sys.stderr.isatty() or in_notebook())

    def __call__(self, history: History) -> None:
        rate = self.patterns / max(history.seconds[-1], 1e-9)
        self.bar.set_postfix(loss=f"{history.loss[-1]:.5g}", patterns_per_s=f"{rate:.0f}")
        self.bar.update(1)
        if history.done == history.iterations:
            self.bar.close()


class SyncCheck:
    """Several processes: after the last iteration, and every ``every`` iterations if ``every``
    is not 0, stop if the processes' parameters are not bit-identical."""

    def __init__(self, accelerator, model, every: int) -> None:
        self.accelerator, self.model, self.every = accelerator, model, every

    def __call__(self, history: History) -> None:
        if (self.every and history.done % self.every == 0) or history.done == history.iterations:
            check_in_sync(self.accelerator, self.model, history.done - 1)


class Checkpoints:
    """A resumable checkpoint every ``every`` iterations (0: never) and after the last one, and
    whenever ``clock`` says one is due (``output.checkpoint_minutes``)."""

    def __init__(self, saver: Saver, groups: list[ParameterGroup], every: int, clock: WallClock) -> None:
        self.saver, self.groups, self.every, self.clock = saver, groups, every, clock

    def __call__(self, history: History) -> None:
        due = self.clock.due() and history.done < history.iterations
        if due or self.every and (history.done % self.every == 0 or history.done == history.iterations):
            self.saver.checkpoint([g.optimizer for g in self.groups], history.loss, history.seconds)


class IntermediateSaves:
    """results.h5 every ``every`` iterations before the end (the end is saved anyway)."""

    def __init__(self, saver: Saver, every: int) -> None:
        self.saver, self.every = saver, every

    def __call__(self, history: History) -> None:
        if history.done % self.every == 0 and history.done < history.iterations:
            self.saver.save(history)


def iteration_hooks(config: Config, accelerator, log: RunLog, saver: Saver, groups: list[ParameterGroup], wrapped,
                    history: History, data: PtychoData, started: float,
                    closing: contextlib.ExitStack | None = None) -> list:
    """What runs after every iteration, in this order: the run.log line, then what ``config``
    asks for. ``wrapped``: the model as prepared (DDP for several processes), whose parameters
    the sync check compares; ``started``: the run's start (``time.perf_counter``); ``closing``:
    closes what a hook holds open (the trackers) at the run's end; None: a run that writes nothing."""
    hooks = [LogLine(log, started)]
    if ProgressBar.wanted(accelerator, config.runtime.progress):
        hooks.append(ProgressBar(config.optim.iterations, history.done, data.n_patterns))
    if accelerator.num_processes > 1:
        hooks.append(SyncCheck(accelerator, wrapped, config.runtime.check_sync_every))
    if config.output.checkpoint_every or config.output.checkpoint_minutes:
        hooks.append(Checkpoints(saver, groups, config.output.checkpoint_every,
                                 WallClock(accelerator, config.output.checkpoint_minutes)))
    if config.output.save_every:
        hooks.append(IntermediateSaves(saver, config.output.save_every))
    if config.output.trackers and closing is not None:
        from ptyacc.watch.trackers import Trackers  # imported only for a run with trackers

        hooks.append(closing.enter_context(Trackers(config, accelerator, saver, groups)))
    return hooks


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
        bad = [name for name, p in self.model.named_parameters() if not torch.isfinite(p).all()] or ["the loss only"]
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
                          "Lower optim.lr, or set optim.on_nan: rollback")

    def restore(self) -> None:
        """Back to the last good state (also after an interrupted iteration, ``ptyacc.reconstruction.interrupt``)."""
        params, states = self.good
        with torch.no_grad():
            for name, p in self._state():
                p.copy_(params[name])
        for group, state in zip(self.groups, states, strict=True):
            group.optimizer.load_state_dict(state)
