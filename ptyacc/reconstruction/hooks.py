"""What happens at the end of an iteration, one small hook each: the run.log line (``LogLine``, which
lives with run.log in results/runlog.py), the progress
bar, the sync check, checkpoints (``WallClock`` says when a timed one is due), intermediate saves
(``iteration_hooks`` picks them from the config). The loop calls them in order; each decides for
itself whether this iteration is its turn.
The record they read is ``history.History``; the guard against a non-finite loss is ``guard.NanGuard``."""

from __future__ import annotations

import contextlib
import sys
import time

from ptyacc.config import Config
from ptyacc.data import PtychoData
from ptyacc.optim.groups import ParameterGroup
from ptyacc.reconstruction.distributed import check_in_sync
from ptyacc.reconstruction.history import History
from ptyacc.reconstruction.interrupt import agreed_max
from ptyacc.reconstruction.saving import Saver
from ptyacc.results.runlog import LogLine, RunLog
from ptyacc.watch.progress import in_notebook, progress_bar


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


class WallClock:
    """Every ``minutes`` of wall time (0: never) a checkpoint is due; ``due`` is called after
    each iteration on every process and answers the same on all of them (the main process's
    clock decides)."""

    def __init__(self, accelerator, minutes: float) -> None:
        self.accelerator, self.seconds = accelerator, minutes * 60
        self.last = time.monotonic()

    def due(self) -> bool:
        if not self.seconds:
            return False
        now = time.monotonic()
        mine = int(now - self.last >= self.seconds) if self.accelerator.is_main_process else 0
        due = bool(agreed_max(self.accelerator, mine)) if self.accelerator.num_processes > 1 else bool(mine)
        if due:
            self.last = now
        return due


class Checkpoints:
    """A resumable checkpoint every ``every`` iterations (0: never) and after the last one, and
    whenever ``clock`` says one is due (``output.checkpoint_minutes``)."""

    def __init__(self, saver: Saver, groups: list[ParameterGroup], every: int, clock: WallClock) -> None:
        self.saver, self.groups, self.every, self.clock = saver, groups, every, clock

    def __call__(self, history: History) -> None:
        due = self.clock.due() and history.done < history.iterations
        if due or self.every and (history.done % self.every == 0 or history.done == history.iterations):
            self.saver.checkpoint(self.groups, history.loss, history.seconds)


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
    hooks = []
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
    hooks.insert(0, LogLine(log, started))  # the run.log line comes first
    return hooks
