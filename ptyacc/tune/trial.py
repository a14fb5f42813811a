"""One trial: the run's config with the trial's values, a short reconstruction in its own folder
on this process's device, and its validation error after every iteration handed to the pruner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptyacc.config import Config, with_values


def trial_config(config: Config, values: dict[str, Any], run_dir: Path) -> Config:
    """The config of a trial: ``config`` with the trial's ``values``, tune.iterations iterations,
    tune.validation_fraction of the positions left out, writing results.h5 and run.log (no
    figures, checkpoints or progress bar) to ``run_dir``."""
    return with_values(config, {**values, "optim.iterations": config.tune.iterations,
                                 "optim.validation_fraction": config.tune.validation_fraction,
                                 "output.dir": str(run_dir.resolve()), "output.figures": False,
                                 "output.checkpoint_every": 0, "output.save_every": 0, "runtime.progress": False})


class PrunerReport:
    """After each iteration: the validation error to the trial (step = iteration, from 0); stops
    the run with ``optuna.TrialPruned`` when the pruner says so."""

    def __init__(self, trial) -> None:
        self.trial = trial

    def __call__(self, history) -> None:
        import optuna

        self.trial.report(history.validation[-1], history.done - 1)
        if self.trial.should_prune():
            raise optuna.TrialPruned(f"pruned after iteration {history.done}")


class LoadedOnce:
    """The dataset of one process's trials: read by its first trial and handed to the next ones
    when no searched key changes what is read (no ``data.*`` or ``experiment.*`` key, no
    simulated data, which depends on the model's keys, and no ``model.init_from``, whose
    positions replace the data's)."""

    def __init__(self, config: Config) -> None:
        self.reusable = (config.data.simulate is None and config.model.init_from is None
                         and not any(key.split(".")[0] in ("data", "experiment") for key in config.tune.params))
        self.data = None

    def keep(self, data) -> None:
        if self.reusable and self.data is None:
            self.data = data


def run_trial(config: Config, trial, loaded: LoadedOnce | None = None) -> float:
    """Reconstruct with the trial's ``config`` (``trial_config``) as one process (with the data
    ``loaded`` already, if any); its validation error after the last iteration."""
    from ptyacc.reconstruction.engine import Reconstructor
    from ptyacc.results.outdir import hold_output_dir

    with hold_output_dir(Path(config.output.dir), main=True):
        run = Reconstructor(config, write=True, overwrite=True)
        run.build(loaded.data if loaded is not None else None)
        if loaded is not None:
            loaded.keep(run.data)
        run.hooks.append(PrunerReport(trial))
        run.run()
        run.finish()
    return run.history.validation[-1]
