"""Every ``auto`` of a run's config resolved in one place, once, before the model is built
(``resolve_autos``, called by the engine's build between the data's statistics and ``build_model``):

- the keys the config and the data decide: the loss, ``optim.regularize``'s priors, the object's and
  the probe's optimizer and step, Adam's beta2 (``optim/autos.py``: ``data_autos``, ``AutoPriors``);
- the model's: ``model.probe_variation_smoothing_A``, with ``model.probe_variation`` on, twice the
  median distance between neighbouring positions, with free eigen-probes at least 3 Å (``variation_smoothing``),
  ``model.probe_variation_eigen`` (``variation_eigen``), and ``model.probe_mode_power``
  with several probe modes (``ModelConfig.further_mode_power``);
- the initial probe's ``model.probe_aperture_edge``: measured where the mean pattern shows an even
  bright-field disk of the semi-angle, else soft (``data/aperture_edge.py``'s rule); ``build_model``
  is handed the aperture read (``ResolvedAutos.aperture``);
- ``data.transform.upsample``, which the load took from the config alone (``config.resolved_upsample``: 2
  where a tilt acts on several slices), named here with the terminal's line where it is not 1;
- ``optim.iterations: auto``, the ceiling and the stop rule's gain (``convergence.resolved_iterations``);
- and, recorded as they were resolved before (the accelerator, the threads and the patterns come
  first): ``runtime.device``, ``runtime.backend`` (``distributed.make_accelerator``; "none" for a
  single process, which has no process group), ``runtime.threads`` (``threads.set_threads``),
  ``data.hold`` (``data/hold.py``; "device" or "host" for patterns given in memory), ``optim.batch_size``
  (``batch_auto.py``: the batches are drawn before the statistics) and the calibration autos, which
  transform the patterns as they are read (``data/autocalibration.py``'s ``AutoCalibration``, the load's
  ``PtychoData.autocalibration``, puts them in the config and names them):
  ``experiment.scan_rotation_deg``, ``experiment.defocus_A`` (with the C12 the parallax set),
  ``data.transform.orientation`` (its transpose, flip_y and flip_x), ``data.transform.descan_model``,
  and ``data.bad_pixels`` and ``data.transform.descan``, named by the number of pixels left out and
  the largest shift (px) taken out; those two keep their auto in the config, whose other values
  have no number (the mask and the shifts are the data's, results.h5 /detector).

The model, its quantities and its groups receive the run's config with numbers in place of the
auto keys they read, and ``AutoPriors``; results.h5's attribute ``auto_values``
(``ResolvedAutos.values_text``, written nowhere else) and run.log's line "auto: ..." name every key
this resolved. Where the config was given numbers, nothing is named.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import yaml

from ptyacc.config import Config, resolved_upsample
from ptyacc.data import PtychoData
from ptyacc.data.aperture_edge import aperture_edge
from ptyacc.optim.autos import AutoPriors, auto_values, data_autos
from ptyacc.physics.footprint import median_neighbour_distance
from ptyacc.reconstruction.batch_auto import BatchChoice
from ptyacc.reconstruction.convergence import resolved_iterations


@dataclass(frozen=True)
class ResolvedAutos:
    """What ``resolve_autos`` found: the run's ``config`` with numbers in place of auto, the ``priors``
    the groups take, ``values`` {key: value} of every key resolved (results.h5's ``auto_values``),
    ``notes`` for the terminal and run.log, ``log_notes`` for run.log only, and the initial probe's
    ``aperture`` (K, K) read from the data where ``model.probe_aperture_edge`` is measured (None: the ramp's),
    and the ``scattering``: the share of the counts beyond the bright-field disk (None: not read)."""

    config: Config
    priors: AutoPriors
    values: dict[str, float | int | str]
    notes: list[str]
    log_notes: list[str]
    aperture: torch.Tensor | None = None
    scattering: float | None = None

    def values_text(self) -> str:
        """results.h5's attribute ``auto_values``: ``values`` as YAML, its keys sorted."""
        return yaml.safe_dump(self.values)


# free eigen-probes' weights (``model.probe_variation_eigen: free``) are smoothed over at least this (Å): narrower,
# their freedom and the object's traded structure on an abTEM MoS2 monolayer scanned in 0.5 Å steps (1 Å and 2 Å:
# the phase 0.016 and 0.007 below one probe's while the data fitted better; 3 Å: within 0.001;
# benchmarks/records/2026-12-02-opr-smoothing.md). Eigen-probes that follow the probe's aberrations cannot hold the
# object's structure, and there 3 Å held the drift back (the MoS2 case: 3 Å +0.009 over one probe, 1 Å
# +0.017; benchmarks/records/2026-12-02-opr.md): no floor.
VARIATION_SMOOTHING_MIN_A = 3.0


def variation_smoothing(config: Config, positions_px: np.ndarray, dx_A: float) -> dict[str, float]:
    """{"model.probe_variation_smoothing_A": twice the median distance between neighbouring positions
    (N, 2) px, in Å, with free eigen-probes at least ``VARIATION_SMOOTHING_MIN_A``}, for a run with
    ``model.probe_variation`` and the smoothing auto; else empty. The positions are taken as the model holds them
    (float32), so that the eigen-probes' weights are smoothed over the same distance as when the quantity measured
    it itself."""
    model = config.model
    if model.probe_variation == 0 or model.probe_variation_smoothing_A != "auto":
        return {}
    sigma_px = 2 * median_neighbour_distance(np.asarray(positions_px, dtype=np.float32))
    floor_A = VARIATION_SMOOTHING_MIN_A if model.probe_variation_eigen == "free" else 0.0
    return {"model.probe_variation_smoothing_A": max(sigma_px * dx_A, floor_A)}


def variation_eigen(config: Config) -> dict[str, str]:
    """{"model.probe_variation_eigen": defocus with one eigen-probe, aberrations with more}, for a run with
    ``model.probe_variation`` and it auto; else empty. One change of focus per position, exact, followed strong
    drifts (+-60 Å and more) where the focus eigen-probe, which holds it to first order, stopped at a fraction
    (benchmarks/records/2026-12-02-opr-ceiling.md)."""
    model = config.model
    if model.probe_variation == 0 or model.probe_variation_eigen != "auto":
        return {}
    return {"model.probe_variation_eigen": "defocus" if model.probe_variation == 1 else "aberrations"}


def upsample_auto(config: Config) -> tuple[dict[str, int], list[str]]:
    """{"data.transform.upsample": n} where it is auto and the load took n (``resolved_upsample``), and the
    terminal's line where n is not 1; nothing for a ``data.simulate`` dataset, which has no transform."""
    if config.data.transform.upsample != "auto" or config.data.simulate is not None:
        return {}, []
    upsample, why = resolved_upsample(config)
    said = [f"data.transform.upsample: {upsample} (auto: {why}; about 3x per iteration; 1 = the detector's "
            "grid)"] if upsample > 1 else []
    return {"data.transform.upsample": upsample}, said


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
                  batch: BatchChoice | None, counts: bool, peak_counts: float, mean_counts: float,
                  mean_pattern: torch.Tensor | None) -> ResolvedAutos:
    """Every auto of ``config`` for this run (module docstring), from the ``data`` (and the calibration
    autos its load resolved), the scan's ``positions_px`` (N, 2) in the object's pixels, ``runtime``
    (``runtime_values``), ``batch`` (what ``optim.batch_size: auto`` became for the batches, ``batch_auto.auto_batch``;
    None where a number was given) and the patterns' statistics agreed by every process (whether they are ``counts``, the
    brightest pixel of the mean pattern, the mean counts per pattern and the mean pattern (K, K) or
    None: ``data_autos``'s; given where the probe is built from electron optics and its aperture edge
    is not soft, which it decides)."""
    smoothing = variation_smoothing(config, positions_px, data.dx_A)
    config = data.autocalibration.in_config(config) if data.autocalibration is not None else config
    config, chosen, notes, log_notes, scattering = data_autos(config, counts, peak_counts, mean_counts, data,
                                                              mean_pattern)
    config, iterations = resolved_iterations(config)
    model = {**smoothing, **variation_eigen(config)}  # the model's keys
    if config.model.probe_modes > 1 and config.model.probe_mode_power == "auto":
        model["model.probe_mode_power"] = config.model.further_mode_power()
    priors = AutoPriors.of(config)
    sampling, sampling_said = upsample_auto(config)
    sized = {"optim.batch_size": batch.size} if batch is not None else {}
    values = {**data.autos, **auto_values(config), **chosen, **model, **sized, **runtime, **sampling, **iterations}
    edge = aperture_edge(config, data, mean_pattern)
    if edge is not None and edge.auto:
        model["model.probe_aperture_edge"] = values["model.probe_aperture_edge"] = edge.edge
    if model:
        config = dataclasses.replace(config, model=dataclasses.replace(
            config.model, **{key.removeprefix("model."): value for key, value in model.items()}))
    said = ", ".join(f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}"
                     for key, value in sorted(values.items()))
    return ResolvedAutos(config, priors, values, [*priors.notes, *notes, *sampling_said, *([batch.said()] if batch else [])],
                         [*priors.log_notes, *log_notes, *([edge.line()] if edge is not None else []),
                          *([f"auto: {said}"] if said else [])], edge.aperture if edge is not None else None, scattering)
