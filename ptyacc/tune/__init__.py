"""``ptyacc tune``: an Optuna study over config keys whose trials are short reconstructions scored
by their validation error; under ``accelerate launch -m ptyacc.tune`` each process runs its own
trials on its own device, all sharing one study.

- ``command.py``: the verb's command line, for ``ptyacc tune`` and ``python -m ptyacc.tune``
- ``processes.py``: which process this is, and its detachment from the launcher's process group
- ``space.py``: the searched values of a trial, the sampler and the pruner
- ``trial.py``: one trial: its config, its reconstruction, its reports to the pruner
- ``study.py``: the shared study and one process's loop over trials
- ``report.py``: trials.csv, best.yaml, the SQLite copy, the figures, the kept run folders
"""

from ptyacc.tune.study import tune

__all__ = ["tune"]
