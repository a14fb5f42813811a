"""What a trial tries: its values of the searched keys (``tune.params``), drawn by the sampler,
and the pruner that stops it early; both from Optuna, made from the ``tune`` section."""

from __future__ import annotations

import math
from typing import Any

from ptyacc.config.schema import Config
from ptyacc.config.tune import TuneConfig, is_integer_key, key_type


def suggest(trial, tune: TuneConfig) -> dict[str, Any]:
    """The trial's value of every searched key (an ``optuna.Trial``'s suggestions, by key name)."""
    values = {}
    for key, param in tune.params.items():
        if param.choices is not None:
            values[key] = trial.suggest_categorical(key, param.choices)
        elif is_integer_key(key_type(key, f"tune.params.{key}", Config)):
            values[key] = trial.suggest_int(key, math.ceil(param.low), math.floor(param.high),
                                            step=max(round(param.step or 1), 1), log=param.log)
        else:
            values[key] = trial.suggest_float(key, param.low, param.high, step=param.step, log=param.log)
    return values


def make_sampler(tune: TuneConfig, rank: int):
    """The sampler of ``tune.sampler``, seeded ``tune.seed + rank``: processes that share a study
    must not draw the same values."""
    import optuna

    seed = tune.seed + rank
    if tune.sampler == "grid":
        class Grid(optuna.samplers.GridSampler):
            """Optuna's grid search without its ``study.stop()`` after the last point, which works
            only inside ``study.optimize``; ptyacc's loop stops at the grid's size (``grid_size``)."""

            def after_trial(self, *args) -> None:
                pass

        return Grid({key: p.choices for key, p in tune.params.items()}, seed=seed)
    if tune.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def make_pruner(tune: TuneConfig):
    """The pruner of ``tune.pruner``; it sees the validation error after every iteration (steps
    0 .. tune.iterations - 1). The median pruner waits for 5 finished trials and stops a trial
    only in the second half of its iterations: early errors mostly say how large the steps are
    (a larger learning rate falls faster, not further), so pruning on them favours large steps."""
    import optuna

    if tune.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=tune.iterations // 2)
    if tune.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=tune.iterations)
    return optuna.pruners.NopPruner()


def grid_size(tune: TuneConfig) -> int | None:
    """The number of combinations of a grid search (None for the other samplers)."""
    return math.prod(len(p.choices) for p in tune.params.values()) if tune.sampler == "grid" else None
