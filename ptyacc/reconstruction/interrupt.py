"""Interrupted runs keep their work: SIGINT (Ctrl-C) and SIGTERM (a batch system's time limit)
during the iterations are remembered, not acted on at once. The loop asks ``Interrupt.requested``
in every step, once its gradient is computed and before the update (which would be undone);
all processes agree on the answer (one max-reduce of a flag every few steps on several
processes), so they stop in the same step. The engine then undoes the unfinished
iteration (its state returns to the end of the last whole one, which ``NanGuard`` keeps), writes
a checkpoint and results.h5, and raises ``Interrupted``: the CLI prints what was kept and the
exact ``--resume`` command and exits 128 + the signal (130 for SIGINT, 143 for SIGTERM). A
second Ctrl-C stops at once (Python's KeyboardInterrupt).

``agreed_max`` is that agreement, also used by ``hooks.WallClock`` for the periodic checkpoint
of ``output.checkpoint_minutes`` (a checkpoint with the object split is a collective).
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from typing import TYPE_CHECKING

import torch

from ptyacc.errors import PtyaccError
from ptyacc.reconstruction.checkpoint import checkpoint_folder

if TYPE_CHECKING:
    from ptyacc.reconstruction.guard import NanGuard
    from ptyacc.reconstruction.history import History
    from ptyacc.reconstruction.saving import Saver

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(PtyaccError):
    """The run was stopped by a signal after saving its work; ``exit_code`` is 128 + signal."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


AGREE_EVERY_STEPS = 8


class Interrupt:
    """Remembers SIGINT/SIGTERM while active (a context manager; main thread only, elsewhere it
    does nothing). ``accelerator``: whose processes must agree (None: this process alone, as a
    tune study's between its trials). ``says``: what happens next, in the line a signal prints."""

    def __init__(self, accelerator, says: str = "finishing the current step, then saving") -> None:
        self.accelerator, self.says = accelerator, says
        self.signum = 0
        self.active = False  # between __enter__ and __exit__; outside, nothing is asked (no collective)
        self.previous: dict[int, object] = {}

    def __enter__(self) -> Interrupt:
        self.active = True
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self.previous[signum] = signal.signal(signum, self._remember)
        return self

    def __exit__(self, *exc) -> None:
        self.active = False
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()

    def _remember(self, signum: int, frame) -> None:
        self.signum = signum
        # a second Ctrl-C (or SIGTERM) stops at once
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
        if self.accelerator is None or self.accelerator.is_main_process:
            print(f"\nptyacc: {signal.Signals(signum).name} received: {self.says} (send it again to stop at once)",
                  file=sys.stderr, flush=True)

    def requested(self, step: int = 0, last: bool = True) -> int:
        """The signal number any process received (0: none), the same on every process. Several
        processes agree (one all-reduce, which waits for the slowest and syncs a GPU) only at every
        ``AGREE_EVERY_STEPS``-th ``step`` of an iteration and at its ``last`` one; a stop is then at
        most that many steps late, and the state kept is the last whole iteration either way."""
        if self.accelerator is None or self.accelerator.num_processes == 1 or not self.active:
            return self.signum
        if not last and (step + 1) % AGREE_EVERY_STEPS:
            return 0
        return agreed_max(self.accelerator, self.signum)


def keep_work(signum: int, saver: Saver, guard: NanGuard, groups: list, history: History) -> Interrupted:
    """After a step interrupted by ``signum``: the state back to the end of the last whole
    iteration (``guard``'s copy), a checkpoint and results.h5 of it (main process), and the
    Interrupted error that says what was kept and how to continue."""
    guard.restore()
    saver.checkpoint(groups, history.loss, history.seconds)
    saver.save(history, figures=saver.config.output.figures and history.done > 0)
    name, done = signal.Signals(signum).name, history.done
    world = saver.accelerator.num_processes
    if not saver.writes:
        kept = (f"process {saver.accelerator.process_index}: the main process keeps the work"
                if saver.write else "nothing written (write=False)")
        return Interrupted(f"interrupted by {name} after iteration {done}: {kept}", signum)
    checkpoint = checkpoint_folder(saver.out_dir) / f"ckpt_{done:06d}.pt"
    return Interrupted(f"interrupted by {name} during iteration {done + 1} of {history.iterations}: kept the state "
                       f"after iteration {done} in {checkpoint} and {saver.out_dir / 'results.h5'} (the unfinished "
                       f"iteration is redone on resuming); continue with: {resume_command(world)}", signum)


def agreed_max(accelerator, value: int) -> int:
    """The largest of the processes' ``value``s (one all-reduce of one number)."""
    flag = torch.tensor([value], dtype=torch.int64, device=accelerator.device)
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return int(flag.item())


def resume_command(world_size: int) -> str:
    """This run's command line, with --resume (and without --overwrite)."""
    args = [a for a in sys.argv[1:] if a not in ("--overwrite", "--resume")] + ["--resume"]
    if world_size > 1:
        return "accelerate launch <the same launch options> -m ptyacc.run " + shlex.join(args)
    if sys.argv[0].endswith(("ptyacc/run.py", "ptyacc.run")):
        return f"{sys.executable} -m ptyacc.run " + shlex.join(args)
    return "ptyacc " + shlex.join(args)
