"""What a study leaves in ``output.dir/tune/`` besides its journal: trials.csv, best.yaml (the
best trial's whole config, runnable with ``ptyacc run``), study.db (an SQLite copy of the study
for ``optuna-dashboard sqlite:///study.db``), figures, and the run folders of the best trials
only. Written by the main process when its trials are done (or on Ctrl-C)."""

from __future__ import annotations

import csv
import io
import shutil
import sys
import warnings
from pathlib import Path

from ptyacc.config import Config
from ptyacc.errors import OutputError
from ptyacc.results.outdir import atomic_write, write_text
from ptyacc.tune.trial import trial_config

FIGURES = {  # file name: Optuna's matplotlib plot that draws it
    "history.png": "plot_optimization_history",
    "importances.png": "plot_param_importances",
    "objective_vs_params.png": "plot_slice",
}


def write_reports(study, config: Config, tune_dir: Path) -> None:
    """All of the above, from the study as it is now."""
    trials = study.get_trials(deepcopy=False)
    write_text(tune_dir / "trials.csv", trials_csv(trials, list(config.tune.params)))
    best = _best(study)
    if best is not None:
        best_config = trial_config(config, best.params, tune_dir / "best")
        best_config.output.figures = config.output.figures
        best_config.runtime.progress = config.runtime.progress
        header = (f"# the best trial ({best.number}) of {tune_dir}: validation error {best.value:.8g}; "
                  f"`ptyacc run best.yaml` repeats it (raise optim.iterations for the full reconstruction)\n")
        write_text(tune_dir / "best.yaml", header + best_config.to_yaml())
    keep_best_runs(study, config.tune.keep_best)
    copy_to_sqlite(study, tune_dir / "study.db")
    if config.output.figures:
        save_figures(study, tune_dir)


def trials_csv(trials: list, keys: list[str]) -> str:
    """One row per trial: number, state, value, process, seconds, params.<key>..., error."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["number", "state", "value", "process", "seconds", *(f"params.{k}" for k in keys), "error"])
    for t in trials:
        seconds = t.user_attrs.get("seconds")
        writer.writerow([t.number, t.state.name, "" if t.value is None else repr(t.value), t.user_attrs.get("process", ""),
                         "" if seconds is None else f"{seconds:.3f}", *(t.params.get(k, "") for k in keys),
                         t.user_attrs.get("error", "")])
    return out.getvalue()


def keep_best_runs(study, keep: int) -> None:
    """Delete the run folders of all finished trials but the ``keep`` best complete ones."""
    import optuna

    State = optuna.trial.TrialState
    ended = [t for t in study.get_trials(deepcopy=False) if t.state != State.RUNNING and "run_dir" in t.user_attrs]
    complete = sorted((t for t in ended if t.state == State.COMPLETE), key=lambda t: t.value)
    kept = {t.number for t in complete[:keep]}
    for t in ended:
        if t.number not in kept:
            shutil.rmtree(t.user_attrs["run_dir"], ignore_errors=True)


def copy_to_sqlite(study, path: Path) -> None:
    """The study copied into an SQLite file (replaced as a whole, so a reader never sees half)."""
    import optuna

    with atomic_write(path, advice="free space; the study itself is safe in study.journal") as tmp:
        optuna.copy_study(from_study_name=study.study_name, from_storage=study._storage,
                          to_storage=f"sqlite:///{tmp}")


def save_figures(study, tune_dir: Path) -> None:
    """The optimization history, the parameters' importances and the objective against each
    parameter; a figure Optuna cannot draw yet (too few trials) is left out with a message."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as plots

    for name, plot in FIGURES.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
                axes = getattr(plots, plot)(study)
            figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
            figure.savefig(tune_dir / name, dpi=120, bbox_inches="tight")
            plt.close(figure)
        except (ValueError, RuntimeError, ZeroDivisionError, OutputError) as exc:
            print(f"ptyacc tune: {name} not drawn ({exc})", file=sys.stderr)


def _best(study):
    """The best complete trial, or None."""
    try:
        return study.best_trial
    except ValueError:  # no complete trial yet
        return None

