"""Test helper: ``python tune_worker.py CONFIG --die-rank R`` runs ``ptyacc tune CONFIG`` as the
process of rank RANK (from the environment, as a launcher would set it); the process of rank R
kills itself (SIGKILL) in the middle of its second trial, after that trial's second iteration."""

import argparse
import os
import signal
import sys

from ptyacc.commands.cli import main
from ptyacc.tune import trial as trial_module


def main_with_death() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--die-rank", type=int, default=None)
    args = parser.parse_args()
    report = trial_module.PrunerReport.__call__
    rank = int(os.environ.get("RANK", "0"))  # read now: ptyacc tune removes the launcher's variables
    started = []

    def dying_report(self, history):
        if history.done == 1:
            started.append(self.trial.number)
        if rank == args.die_rank and len(started) == 2 and history.done == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return report(self, history)

    trial_module.PrunerReport.__call__ = dying_report
    return main(["tune", args.config])


if __name__ == "__main__":
    sys.exit(main_with_death())
