"""Every ``auto`` of a run's config resolved in one place, once, before the model is built
(``resolve_autos``, called by the engine's build between the data's statistics and ``build_model``):

- the keys the config and the data decide: the loss, ``optim.regularize``'s priors, the object's and
  the probe's optimizer and step, Adam's beta2 (``multislice_auto``: ``data_autos``, ``AutoPriors``);
- the model's: ``model.probe_variation_smoothing_A``, with ``model.probe_variation`` on, twice the
  median distance between neighbouring positions (``variation_smoothing``), and ``model.probe_mode_power``
  with several probe modes (``ModelConfig.further_mode_power``);
- and, recorded as they were resolved before (the accelerator, the threads and the patterns come
  first): ``runtime.device``, ``runtime.backend`` (``distributed.make_accelerator``; "none" for a
  single process, which has no process group), ``runtime.threads`` (``threads.set_threads``) and
  ``data.hold`` (``data/hold.py``; "device" or "host" for patterns given in memory).

The model, its quantities and its groups receive the run's config with numbers in place of the
auto keys they read, and ``AutoPriors``; results.h5's attribute ``auto_values`` and run.log's line
"auto: ..." name every key this resolved. Where the config was given numbers, nothing is named.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data import PtychoData
from ptyacc.physics.footprint import median_neighbour_distance
from ptyacc.reconstruction.multislice_auto import AutoPriors, auto_values, data_autos


@dataclass(frozen=True)
class ResolvedAutos:
    """What ``resolve_autos`` found: the run's ``config`` with numbers in place of auto, the ``priors``
    the groups take, ``values`` {key: value} of every key resolved (results.h5's ``auto_values``),
    ``notes`` for the terminal and run.log, and ``log_notes`` for run.log only."""

    config: Config
    priors: AutoPriors
    values: dict[str, float | int | str]
    notes: list[str]
    log_notes: list[str]


def variation_smoothing(config: Config, positions_px: np.ndarray, dx_A: float) -> dict[str, float]:
    """{"model.probe_variation_smoothing_A": twice the median distance between neighbouring positions
    (N, 2) px, in Å}, for a run with ``model.probe_variation`` and the smoothing auto; else empty. The
    positions are taken as the model holds them (float32), so that the eigen-probes' weights are
    smoothed over the same distance as when the quantity measured it itself."""
    model = config.model
    if model.probe_variation == 0 or model.probe_variation_smoothing_A != "auto":
        return {}
    sigma_px = 2 * median_neighbour_distance(np.asarray(positions_px, dtype=np.float32))
    return {"model.probe_variation_smoothing_A": sigma_px * dx_A}


def runtime_values(config: Config, accelerator, data: PtychoData, store) -> dict[str, int | str]:
    """{key: value} of ``runtime.device``, ``runtime.backend``, ``runtime.threads`` and ``data.hold``
    where given as auto: what this process runs with (``store``: its ``pattern_store``)."""
    runtime, chosen = config.runtime, {}
    if runtime.device == "auto":
        chosen["runtime.device"] = accelerator.device.type
    if runtime.backend == "auto":
        chosen["runtime.backend"] = getattr(accelerator.state, "backend", None) or "none"
    if runtime.threads == "auto":
        chosen["runtime.threads"] = torch.get_num_threads()
    if config.data.hold == "auto":
        chosen["data.hold"] = data.hold.mode if data.hold is not None else (
            "device" if store.holds_on_device else "host")
    return chosen


def resolve_autos(config: Config, data: PtychoData, positions_px: np.ndarray, runtime: dict[str, int | str],
                  counts: bool, peak_counts: float, mean_counts: float, mean_pattern: torch.Tensor | None
                  ) -> ResolvedAutos:
    """Every auto of ``config`` for this run (module docstring), from the ``data``, the scan's
    ``positions_px`` (N, 2) in the object's pixels, ``runtime`` (``runtime_values``) and the patterns'
    statistics agreed by every process (whether they are ``counts``, the brightest pixel of the mean
    pattern, the mean counts per pattern and the mean pattern (K, K) or None: ``data_autos``'s)."""
    smoothing = variation_smoothing(config, positions_px, data.dx_A)  # first: the demo's data walk
    config, chosen, notes, log_notes = data_autos(config, counts, peak_counts, mean_counts, data, mean_pattern)
    model = dict(smoothing)  # the model's keys
    if config.model.probe_modes > 1 and config.model.probe_mode_power == "auto":
        model["model.probe_mode_power"] = config.model.further_mode_power()
    if model:
        config = dataclasses.replace(config, model=dataclasses.replace(
            config.model, **{key.removeprefix("model."): value for key, value in model.items()}))
    priors = AutoPriors.of(config)
    values = {**auto_values(config), **chosen, **model, **runtime}
    said = ", ".join(f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}"
                     for key, value in sorted(values.items()))
    return ResolvedAutos(config, priors, values, priors.notes + notes,
                         [*priors.log_notes, *log_notes, *([f"auto: {said}"] if said else [])])
