"""The ``tune:`` section: what ``ptyacc tune`` searches (any config key, as a range or a list
of choices), how many trials, with which sampler and pruner. The search itself is in
``ptyacc/tune/``; this module only describes and checks it."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union

from ptyacc.config.fields import _f, _require, _suggest
from ptyacc.config.plugins import find_plugin
from ptyacc.errors import ConfigError

# Keys that cannot be searched, and why.
UNTUNABLE = {
    "tune": "it describes the search",
    "output.dir": "each trial writes to its own folder under output.dir/tune/trials",
    "optim.iterations": "tune.iterations sets it for every trial",
    "optim.validation_fraction": "tune.validation_fraction sets it for every trial",
    "runtime.seed": "it chooses the validation positions, which all trials must share to be compared",
}


@dataclass
class TuneParam:
    """One searched key: a range ``{low, high}`` (``log: true`` samples it on a log scale; ``step``
    makes it discrete) or a list of ``choices``."""

    low: float | None = _f(None, "Lowest value of the range.")
    high: float | None = _f(None, "Highest value of the range.")
    log: bool = _f(False, "Sample the range on a logarithmic scale (low > 0).")
    step: float | None = _f(None, "Spacing of the values in the range; null = continuous (integer keys: 1).")
    choices: list[bool | int | float | str] | None = _f(None, "The values to choose from, instead of a range.")

    def _check(self, path: str) -> None:
        ranged = self.low is not None or self.high is not None
        _require(ranged != (self.choices is not None), path, "give either low and high, or choices")
        if self.choices is not None:
            _require(len(self.choices) >= 1, f"{path}.choices", "needs at least one value")
            return
        _require(self.low is not None and self.high is not None, path, "a range needs both low and high")
        _require(self.low < self.high, path, f"low must be < high, got {self.low} and {self.high}")
        _require(not self.log or self.low > 0, f"{path}.log", f"a log scale needs low > 0, got {self.low}")
        _require(self.step is None or self.step > 0, f"{path}.step", f"must be > 0, got {self.step}")
        _require(self.step is None or not self.log, f"{path}.step", "cannot be combined with log: true")


@dataclass
class TuneConfig:
    """`ptyacc tune`: a search over config keys, each trial a short reconstruction scored by its
    validation error (docs/how-to/tune.md, "Tuning defocus, thickness and learning rates")."""

    trials: int = _f(30, "Trials of the study in all (finished or pruned; failed trials are run again). "
                         "Running the command again continues the study up to this number.")
    iterations: int = _f(5, "Iterations of each trial (replaces optim.iterations while tuning).")
    validation_fraction: float = _f(0.05, "Fraction of the positions left out of each trial's fit; their error "
                                          "is the objective (replaces optim.validation_fraction while tuning).")
    sampler: Literal["tpe", "random", "grid"] = _f(
        "tpe", "How trials choose their values: tpe (Optuna's Tree-structured Parzen Estimator), random, or grid "
               "(every combination of the params' choices; needs choices for every key).")
    pruner: Literal["median", "hyperband", "none"] = _f(
        "median", "Stops a trial early when its validation error after an iteration is worse than other trials' "
                  "at the same iteration: median, hyperband, or none.")
    seed: int = _f(0, "Seed of the sampler (process r of several uses seed + r).")
    params: dict[str, TuneParam] = _f(
        factory=dict, doc="The searched keys: any config key (dotted, as for --set) mapped to {low, high, log, step} "
                          "or {choices}.")
    keep_best: int = _f(3, "Run folders kept (under output.dir/tune/trials) for this many best trials; 0 = none.")
    study_name: str = _f("ptyacc", "Name of the study in its storage.")
    heartbeat_s: float = _f(30.0, "Seconds between a running trial's signs of life in the study; a trial silent "
                                  "for twice as long (its process died) is marked failed by another process.")

    def _check(self, path: str) -> None:
        _require(self.trials >= 1, f"{path}.trials", f"must be >= 1, got {self.trials}")
        _require(self.iterations >= 1, f"{path}.iterations", f"must be >= 1, got {self.iterations}")
        _require(0 < self.validation_fraction < 1, f"{path}.validation_fraction",
                 f"must be in (0, 1): the objective is the error of the positions left out, got "
                 f"{self.validation_fraction}")
        _require(self.keep_best >= 0, f"{path}.keep_best", f"must be >= 0, got {self.keep_best}")
        _require(self.heartbeat_s > 0, f"{path}.heartbeat_s", f"must be > 0, got {self.heartbeat_s}")

    def check_params(self, path: str, root: type) -> None:
        """The searched keys against the whole schema ``root`` (the ``Config`` class, whose check
        calls this once every section is built: this module sits below the schema)."""
        for key, param in self.params.items():
            kind = key_type(key, f"{path}.params.{key}", root)
            if param.choices is None and not {int, float} & set(_options(kind)):
                raise ConfigError(f"{path}.params.{key}: {key} is not a number, so it cannot have a range; "
                                  "give choices instead")
            if self.sampler == "grid":
                _require(param.choices is not None, f"{path}.params.{key}", "sampler: grid needs choices for every key")


def key_type(key: str, path: str, root: type) -> Any:
    """The type of the config key ``key`` (dotted, e.g. ``optim.lr.object``) in the schema ``root``
    (the ``Config`` class); a key that does not exist, names a section or cannot be tuned stops
    with ``path`` and the reason."""
    for word, reason in UNTUNABLE.items():
        if key == word or key.startswith(word + "."):
            raise ConfigError(f"{path}: {key} cannot be tuned: {reason}")
    kind: Any = root
    plugins = False  # the last part named ``quantities:``, whose keys are plug-ins' sections
    for depth, part in enumerate(key.split(".")):
        if plugins:
            kind, plugins = find_plugin(part, path).options, False
            continue
        if typing.get_origin(kind) is dict:
            kind = typing.get_args(kind)[1]
            continue
        sections = [a for a in _options(kind) if dataclasses.is_dataclass(a)]
        if not sections:
            raise ConfigError(f"{path}: {'.'.join(key.split('.')[:depth])} is a value, not a section")
        fields = {f.name: f for f in dataclasses.fields(sections[0]) if not f.metadata.get("internal")}
        if part not in fields:
            raise ConfigError(f"{path}: unknown config key{_suggest(part, fields)}")
        kind = typing.get_type_hints(sections[0])[part]
        plugins = bool(fields[part].metadata.get("plugin_sections"))
    if plugins or dataclasses.is_dataclass(kind) or typing.get_origin(kind) is dict:
        raise ConfigError(f"{path}: {key} is a section; name a key inside it")
    return kind


def _options(kind: Any) -> tuple:
    """The types a value of type ``kind`` may have (a union's members, None left out)."""
    if typing.get_origin(kind) in (Union, types.UnionType):
        return tuple(a for a in typing.get_args(kind) if a is not type(None))
    return (kind,)


def is_integer_key(kind: Any) -> bool:
    """True when a range for a key of type ``kind`` must be sampled as integers."""
    options = _options(kind)
    return int in options and float not in options
