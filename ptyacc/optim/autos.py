"""The ``auto`` values of the ``optim`` keys, the same on every process: ``optim.regularize``'s
``tv_phase_smoothing`` (auto by default), ``tv_phase`` and ``lateral_blur_px`` (0 by default; ``auto`` is
asked for) and ``depth_blur_slices``; ``optim.object_optimizer`` and ``probe_optimizer``
(``resolved_optimizer``), ``optim.loss`` (``resolved_loss``), ``preconditioned_step``,
``preconditioner_batch_floor`` and ``adam_beta2``. They are priors chosen from the config (the slice
count, the near field) and, in ``data_autos``, from sums of the data every process shares (the dose, the dark-field share).

- One slice: the regularisers 0 (off): on sharp atoms every TV weight tried lowered the phase's NCC.
- Several slices (``model.slices`` > 1): ``MULTISLICE``, a phase TV of weight 1 and a lateral blur of
  0.3 px when asked for, and the TV smoothing step (one TV descent step after every iteration, outside
  the optimizer, so that runs agree on any number of processes) from the counted patterns' dose per
  object pixel (``dose_smoothing``; 0 where the patterns are not counts): the values that raised the
  NCC on every case tried and cost none of them.

``tv_phase`` and ``lateral_blur_px`` are not the default: with the phase TV the runs on 1 and 2
processes, and with and without ``runtime.shard_object``, agree far less closely than the rule of
one result whatever the process count: its gradient is rounding noise wherever the phase is flat,
and Adam's normalised steps turn that noise into full-size steps.

A run resolves them once (``AutoPriors.of``): the parameter groups take the values, and the
terminal and run.log the note (``auto_notes``) with the build's other lines; results.h5 keeps
the keys given as auto (attribute ``auto_values``) beside the config as given (``auto``). The
measurements behind each value are benchmarks/records/2026-12-02-optim-autos.md's.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data import PtychoData
from ptyacc.physics.footprint import median_neighbour_distance

# the value of each ``optim.regularize`` key that may be auto, for a multislice object (0 on one slice)
MULTISLICE = {"tv_phase": 1.0, "lateral_blur_px": 0.3, "tv_phase_smoothing": 0.001}
MULTISLICE_BATCH_FLOOR = 0.25  # optim.preconditioner_batch_floor's auto on several slices (0 on one)
NEAR_FIELD_BATCH_FLOOR = 0.5  # its auto in the X-ray near field, where each pixel is lit about alike by many positions
SMOOTHING_ELECTRONS = 2900.0  # electrons per object pixel at which tv_phase_smoothing's auto on counts is 0.001
SMOOTHING_FACTORS = (0.5, 2.0)  # its factor's bounds (dose_smoothing)


def resolved(config: Config, name: str) -> float:
    """``optim.regularize.<name>`` for this run: the number given, or for ``auto`` ``MULTISLICE[name]``
    on a multislice object and 0 on one slice."""
    value = getattr(config.optim.regularize, name)
    if value != "auto":
        return float(value)
    return MULTISLICE[name] if config.model.slices > 1 else 0.0


def resolved_values(config: Config) -> dict[str, float]:
    """{name: ``resolved``} of every key of ``MULTISLICE``: the values the object group takes."""
    return {name: resolved(config, name) for name in MULTISLICE}


# optim.lr_final_fraction's auto where the tilt is refined (0.1 elsewhere): a refined tilt follows the
# object, and the rates' cosine to 0.1 stopped the object and with it the tilt short (measured:
# benchmarks/records/2026-12-02-tilt-rates.md)
TILT_FINAL_FRACTION = 1.0
FINAL_FRACTION = 0.1


def final_fraction_choice(config: Config) -> tuple[float, str]:
    """``optim.lr_final_fraction`` for this run: as given, or for ``auto`` ``TILT_FINAL_FRACTION`` (rates that do not
    fall) where the tilt is refined (``optim.start.tilt``, which asks for several slices), ``FINAL_FRACTION``
    otherwise; and, for auto, why ("" where auto took ``FINAL_FRACTION``)."""
    fraction = config.optim.lr_final_fraction
    if fraction != "auto":
        return float(fraction), ""
    if config.optim.start.tilt is not None:
        return TILT_FINAL_FRACTION, "the tilt refined: it follows the object, whose steps keep their size"
    return FINAL_FRACTION, ""


def resolved_final_fraction(config: Config) -> float:
    """``final_fraction_choice``'s fraction."""
    return final_fraction_choice(config)[0]


def optimizer_choice(config: Config, group: str = "object") -> tuple[str, str]:
    """``optim.object_optimizer`` (``group`` "probe": ``optim.probe_optimizer``) for this run: as given,
    or for ``auto`` preconditioned (the least-squares step converged faster on any number of slices and
    with either loss), except adam wherever the group's Adam step (``optim.lr.object`` or ``optim.lr.probe``)
    is given another value than its default and 0 (a tuned Adam step), and for both where the tilt is
    refined (``optim.start.tilt``: the tilt reached the truth with Adam's steps only).
    Returns the optimizer and, for auto, why ("" for the least-squares step, run.log's words for Adam)."""
    chosen = getattr(config.optim, f"{group}_optimizer")
    if chosen != "auto":
        return chosen, ""
    if config.optim.adam_step_given(group):
        return "adam", f"optim.lr.{group} given"
    if config.optim.start.tilt is not None:
        return "adam", "optim.start.tilt set"
    return "preconditioned", ""


def resolved_optimizer(config: Config, group: str = "object") -> str:
    """``optimizer_choice``'s optimizer."""
    return optimizer_choice(config, group)[0]


@dataclass(frozen=True)
class LeastSquares:
    """The preconditioned descent under one loss: ``share``, the share of the gradient that makes a step
    of 1 the least-squares step (half for the amplitude loss, whose gradient is twice the exit wave's
    error; a quarter for the Poisson loss, whose curvature in the exit wave's amplitude is twice the
    amplitude loss's where the model meets the counts), and ``step``, ``optim.preconditioned_step``'s
    auto value (measured: docs/explanation/optimisers.md, "The object's and the probe's optimizer")."""

    share: float
    step: float


LEAST_SQUARES = {"amplitude": LeastSquares(share=0.5, step=0.4), "poisson": LeastSquares(share=0.25, step=0.8)}


def least_squares_loss(loss: str) -> str:
    """The key of ``LEAST_SQUARES`` for ``loss``: a loss still ``auto`` (a config no data resolved) is the amplitude's."""
    return "poisson" if loss == "poisson" else "amplitude"


def least_squares(loss: str) -> LeastSquares:
    """``LEAST_SQUARES`` of ``loss`` (``least_squares_loss``)."""
    return LEAST_SQUARES[least_squares_loss(loss)]


def resolved_step(config: Config) -> float:
    """``optim.preconditioned_step`` for this run: as given, or for ``auto`` the loss's
    (``LEAST_SQUARES``: 0.4 with the amplitude loss, 0.8 with the Poisson loss)."""
    step = config.optim.preconditioned_step
    if step != "auto":
        return float(step)
    return least_squares(config.optim.loss).step


def batch_floor_choice(config: Config) -> tuple[float, str]:
    """``optim.preconditioner_batch_floor`` for this run and, for ``auto``, why (run.log's note): as given, or
    ``MULTISLICE_BATCH_FLOOR`` on several slices (the multislice object's step of 0.8 diverged on a dense low-dose
    scan when the probe started at iteration 3, and the floor kept it; level on the grid, within 2.4e-4),
    ``NEAR_FIELD_BATCH_FLOOR`` in the X-ray near field (a beam that fills the window lights each pixel from ten or
    more positions about alike, so a random batch lights some pixels several times the mean: the Poisson loss's
    step of 0.8 climbed there under ``optim.iterations: auto`` on 6 of 16 simulated files; with the floor all 16
    ended at or above 30 fixed iterations) and 0 elsewhere (off: it costs about 0.2 ms a step and nothing measured
    there needs it)."""
    floor = config.optim.preconditioner_batch_floor
    if floor != "auto":
        return float(floor), "given"
    if config.model.slices > 1:
        return MULTISLICE_BATCH_FLOOR, f"{config.model.slices} slices"
    if config.experiment.geometry == "near_field":
        return NEAR_FIELD_BATCH_FLOOR, "the near field"
    return 0.0, "1 slice"


def resolved_batch_floor(config: Config) -> float:
    """``batch_floor_choice``'s floor."""
    return batch_floor_choice(config)[0]


def preconditioned_autos(config: Config) -> dict[str, float]:
    """{key: value} of ``optim.preconditioned_step`` and ``optim.preconditioner_batch_floor`` where given as
    auto, for an object that takes the preconditioned step (empty for Adam's, which uses neither)."""
    if resolved_optimizer(config) != "preconditioned":
        return {}
    chosen = {"optim.preconditioned_step": resolved_step(config),
              "optim.preconditioner_batch_floor": resolved_batch_floor(config)}
    return {key: value for key, value in chosen.items() if getattr(config.optim, key.split(".")[1]) == "auto"}


def dose_smoothing(electrons_px: float) -> float:
    """``tv_phase_smoothing``'s auto on several slices for counted data with ``electrons_px`` electrons per
    object pixel: ``MULTISLICE``'s 0.001 times sqrt(``SMOOTHING_ELECTRONS`` / electrons_px), the factor kept
    within ``SMOOTHING_FACTORS``: the noise in an object pixel falls as one over the square root of the
    electrons that reach it, and so did the step that suited the multislice cases measured."""
    factor = math.sqrt(SMOOTHING_ELECTRONS / electrons_px) if electrons_px > 0 else SMOOTHING_FACTORS[1]
    return MULTISLICE["tv_phase_smoothing"] * min(max(factor, SMOOTHING_FACTORS[0]), SMOOTHING_FACTORS[1])


def electrons_per_pixel(mean_counts: float, dx_A: float, positions_A: np.ndarray) -> float:
    """Counts per pattern times the object pixel's share of the scan's area per position (the median
    distance to the nearest position, squared, over at most 256 positions): the electrons that reach one
    object pixel."""
    return mean_counts * dx_A**2 / median_neighbour_distance(positions_A, at_most=256) ** 2


def data_autos(config: Config, counts: bool, peak_counts: float, mean_counts: float, data: PtychoData,
               mean_pattern: torch.Tensor | None = None
               ) -> tuple[Config, dict[str, float | str], list[str], list[str], float | None]:
    """The run's config with the auto keys that the data decide resolved: ``optim.loss``
    (``resolved_loss``); on several slices ``optim.regularize.tv_phase_smoothing`` (counts:
    ``dose_smoothing``; patterns that are not counts: 0, off); ``optim.regularize.depth_blur_slices``
    (``STRONG_DEPTH_BLUR`` on several slices of a strongly scattering sample, else 0) and there
    ``optim.preconditioned_step`` (``STRONG_STEP`` with the amplitude loss); {key: value} of those, the
    lines saying why (for the terminal, and for run.log only) and the share of the counts beyond the
    bright-field disk (``read_dark_field``; None without a mean pattern or a semi-angle)."""
    floor, dark_field = read_dark_field(mean_pattern, data) if mean_pattern is not None else (None, None)
    loss, log_notes = resolved_loss(config, counts, peak_counts, dark_field)
    chosen: dict[str, float | str] = {"optim.loss": loss} if loss != config.optim.loss else {}
    config, background, notes = resolved_background(config, floor)
    chosen.update(background)
    log_notes += [] if floor is None else [floor.line()]
    regularize = config.optim.regularize
    if config.model.slices > 1 and regularize.tv_phase_smoothing == "auto":
        if counts:
            electrons = electrons_per_pixel(mean_counts, data.dx_A, data.positions_A)
            smoothing, why = dose_smoothing(electrons), f"{electrons:.3g} electrons per object pixel"
        else:  # the noise is not known: no prior (benchmarks/records/2026-11-27-quality-grid.md, "Multislice data that are
            # not counts")
            smoothing, why = 0.0, "patterns not counts"
        chosen["optim.regularize.tv_phase_smoothing"] = smoothing
        regularize = dataclasses.replace(regularize, tv_phase_smoothing=smoothing)
        notes.append(f"optim.regularize: tv_phase_smoothing {smoothing:.2g} (auto: {config.model.slices} slices, "
                     f"{why}; give a number, 0 = off, to choose)")
    strong = config.model.slices > 1 and dark_field is not None and dark_field > STRONG_SCATTERING
    why = f"(auto: {config.model.slices} slices, {100 * dark_field:.1f} % of the counts beyond the disk" if strong else ""
    if regularize.depth_blur_slices == "auto":
        tilt_refined = config.optim.start.tilt is not None
        blur = (TILT_DEPTH_BLUR if tilt_refined else STRONG_DEPTH_BLUR) if strong else 0.0
        regularize = dataclasses.replace(regularize, depth_blur_slices=blur)
        if config.model.slices > 1:
            chosen["optim.regularize.depth_blur_slices"] = blur
        if strong:
            notes.append(f"optim.regularize: depth_blur_slices {blur:g} {why}"
                         f"{', the tilt refined' if tilt_refined else ''}; 0 = off)")
        if regularize.depth_blur_start_slices == "auto" and strong and not tilt_refined:
            start = max(blur, START_DEPTH_BLUR_SHARE * config.model.slices)
            regularize = dataclasses.replace(regularize, depth_blur_start_slices=start)
            chosen["optim.regularize.depth_blur_start_slices"] = start
            notes.append(f"optim.regularize: depth_blur_start_slices {start:g} {why}: the slices held alike until the "
                         f"run first converges, or over half a fixed optim.iterations, then depth_blur_slices {blur:g}; "
                         "give a number to choose)")
    step = config.optim.preconditioned_step
    if strong and step == "auto" and loss == "amplitude" and resolved_optimizer(config) == "preconditioned":
        step = chosen["optim.preconditioned_step"] = STRONG_STEP
        notes.append(f"optim.preconditioned_step: {step:g} {why})")
    if chosen or regularize is not config.optim.regularize:
        config = dataclasses.replace(config, optim=dataclasses.replace(config.optim, loss=loss, regularize=regularize,
                                                                       preconditioned_step=step))
    return config, chosen, notes, log_notes, dark_field


def read_dark_field(mean_pattern: torch.Tensor, data: PtychoData) -> tuple[DetectorFloor | None, float | None]:
    """What ``mean_pattern`` (K, K, unshifted) of ``data`` says beyond the bright-field disk: its floor
    (``detector_floor``; electrons only, None for X-rays) and the scattering share with a flat floor taken off
    (``dark_field_fraction``); (None, None) without a semi-angle."""
    if not data.semiangle_mrad:
        return None, None
    floor = (detector_floor(mean_pattern, data.wavelength_A, data.semiangle_mrad, data.dk_invA, data.mask)
             if data.radiation == "electron" else None)
    pedestal = floor.outer if floor is not None and floor.flat else 0.0
    return floor, dark_field_fraction(mean_pattern, data.wavelength_A, data.semiangle_mrad, data.dk_invA, data.mask,
                                      pedestal)


def floor_measured(config: Config, data: PtychoData) -> bool:
    """Whether a run reads the mean pattern for the dark field's floor (``resolved_background``): electrons, with
    ``model.background`` auto, or fitted from a start left auto."""
    model = config.model
    return data.radiation == "electron" and (model.background == "auto" or model.background is True
                                             and model.background_start_counts == "auto")


def resolved_background(config: Config, floor: DetectorFloor | None) -> tuple[Config, dict[str, float | bool], list[str]]:
    """``config`` with ``model.background`` and ``model.background_start_counts`` resolved where auto: the background
    fitted where the dark field's ``floor`` (``detector_floor``; None: not measured, as for X-rays) is flat, starting
    at its level (a background fitted from zero rose a third of the way to a 3-count offset in 20 iterations, while
    the object and the probe took up the rest); {key: value} of those, and the lines for the terminal: what was
    fitted and why, or a warning where a flat floor is left out."""
    model = config.model
    flat = floor is not None and floor.flat
    background = flat if model.background == "auto" else model.background
    start = (floor.outer if flat else 0.0) if model.background_start_counts == "auto" else model.background_start_counts
    chosen: dict[str, float | bool] = {}
    if model.background == "auto":
        chosen["model.background"] = background
    if background and model.background_start_counts == "auto":
        chosen["model.background_start_counts"] = start
    notes = []
    if flat and background:
        notes.append(f"model.background: fitted, from the dark field's flat floor of {floor.outer:.4g} counts per pixel "
                     f"(the third of its pixels nearest the bright-field disk {floor.inner:.4g}): a dark offset left in "
                     "the counts, which a model without it pays for with the object and the probe; "
                     "model.background: false leaves it out")
    elif flat:
        notes.append(f"warning: the dark field has a flat floor of {floor.outer:.4g} counts per pixel (the third of its "
                     f"pixels nearest the bright-field disk {floor.inner:.4g}): a dark offset left in the counts, which "
                     "the model, without a background, takes up into the object and the probe; model.background: auto "
                     "fits it")
    if chosen:
        config = dataclasses.replace(config, model=dataclasses.replace(model, background=background,
                                                                       background_start_counts=start))
    return config, chosen, notes


def _disk_distances(mean_pattern: torch.Tensor, wavelength_A: float, semiangle_mrad: float, dk: float
                    ) -> tuple[torch.Tensor, float]:
    """Each pixel's distance (px) from the centre of ``mean_pattern``'s (K, K) (unshifted) bright-field disk, the mean
    of the pixels above half the brightest, and the disk's radius (px) from the semi-angle."""
    n = mean_pattern.shape[-1]
    k_px = torch.fft.fftfreq(n, d=1.0 / n, dtype=torch.float64)  # signed pixels from k = 0
    bright = mean_pattern > mean_pattern.max() / 2
    weight = float(bright.sum())
    centre_y = float((k_px[:, None] * bright).sum()) / weight
    centre_x = float((k_px[None, :] * bright).sum()) / weight
    r_px = torch.sqrt((k_px[:, None] - centre_y) ** 2 + (k_px[None, :] - centre_x) ** 2)
    return r_px, semiangle_mrad * 1e-3 / wavelength_A / dk


def dark_field_fraction(mean_pattern: torch.Tensor, wavelength_A: float, semiangle_mrad: float, dk: float,
                        mask: torch.Tensor | None = None, floor: float = 0.0) -> float:
    """The share of ``mean_pattern``'s (K, K) (unshifted) counts more than one pixel beyond the
    bright-field disk of the semi-angle, over the pixels where ``mask`` is 1, a detector's ``floor``
    (counts per pixel, ``detector_floor``) taken off every pixel first: how strongly the
    sample scatters (a thin sample of light atoms: about 1 %; 40 Å of SrTiO3 at 300 kV: 8 %). The
    disk is taken where it lies, its centre the mean of the pixels above half the brightest: patterns
    whose descan the model takes (``descan_model: ramp``) keep it off k = 0, and a pixel's offset
    would put a crescent of the disk beyond its edge."""
    pattern = mean_pattern.to(torch.float64)
    if floor:
        pattern = (pattern - floor).clamp(min=0.0)
    pattern = pattern * (1.0 if mask is None else mask.to(torch.float64))
    total = float(pattern.sum())
    if total <= 0:
        return 0.0
    r_px, radius = _disk_distances(pattern, wavelength_A, semiangle_mrad, dk)
    return float(pattern[r_px > radius + 1.0].sum()) / total


@dataclass(frozen=True)
class DetectorFloor:
    """The dark field's level far from the bright-field disk and near it (``outer``, ``inner``: the medians, in counts
    per pixel, of the third of the dark-field pixels furthest from the disk's centre and of the third nearest it, at
    median distances ``outer_px`` and ``inner_px``), over ``pixels`` dark-field pixels, against ``counts`` per
    pattern. A sample's scattering falls away from the disk; a dark offset left in the counts (a pedestal) lies on
    every pixel alike. ``slope``: the power of the distance by which the level falls between the two thirds; the floor
    is ``flat`` where that power is above -FLAT_SLOPE and the outer level adds at least FLOOR_SHARE of the counts over
    the dark field."""

    outer: float
    inner: float
    outer_px: float
    inner_px: float
    pixels: int
    counts: float

    @property
    def slope(self) -> float:
        if self.outer <= 0 or self.inner <= 0 or self.outer_px <= self.inner_px:
            return -math.inf
        return math.log(self.outer / self.inner) / math.log(self.outer_px / self.inner_px)

    @property
    def flat(self) -> bool:
        return (self.pixels >= FLOOR_PIXELS and self.slope >= -FLAT_SLOPE
                and self.outer * self.pixels >= FLOOR_SHARE * self.counts)

    def line(self) -> str:
        kind = ("flat: a dark offset left in the counts (a pedestal), which a sample's scattering, falling faster than "
                f"the distance^-{FLAT_SLOPE:g}, is not" if self.flat else "the sample's scattering, or too little to tell")
        falls = f"distance^{self.slope:.2f}" if math.isfinite(self.slope) else "no level to compare"
        return (f"the dark field's floor: {self.outer:.4g} counts per pixel in the third of its {self.pixels} pixels "
                f"furthest from the bright-field disk ({self.outer_px:.1f} px from its centre), {self.inner:.4g} in the "
                f"third nearest it ({self.inner_px:.1f} px): {falls} ({kind})")


def detector_floor(mean_pattern: torch.Tensor, wavelength_A: float, semiangle_mrad: float, dk: float,
                   mask: torch.Tensor | None = None) -> DetectorFloor | None:
    """``DetectorFloor`` of ``mean_pattern`` (K, K) (unshifted, counts per pixel), over the pixels where ``mask`` is 1
    beyond 1.2 times the bright-field disk's radius and a pixel (a blurred edge's tail left out); None where the
    pattern is dark. Measured on 96 files of the calibration matrix (no offset; its five samples, 60-300 kV, 1e3 to
    1e6 counts): the level fell as the distance^-0.77 or faster (-0.77 on a disk that filled 55 % of the window,
    its dark field narrow); on the demo with a Poisson offset of 1, 3 and 20 counts per pixel added: -0.51, -0.20,
    -0.04 (0.3 counts, 1.2 % of the counts: -1.23, not told from scattering)."""
    pattern = mean_pattern.to(torch.float64) * (1.0 if mask is None else mask.to(torch.float64))
    total = float(pattern.sum())
    if total <= 0:
        return None
    r_px, radius = _disk_distances(pattern, wavelength_A, semiangle_mrad, dk)  # a masked hot pixel moves no centre
    dark = r_px > 1.2 * radius + 1.0
    if mask is not None:
        dark &= mask.to(torch.bool)
    values, distances = pattern[dark], r_px[dark]
    third = len(values) // 3
    if third == 0:
        return DetectorFloor(0.0, 0.0, 0.0, 0.0, len(values), total)
    order = torch.argsort(distances)
    outer, inner = order[-third:], order[:third]
    return DetectorFloor(float(values[outer].median()), float(values[inner].median()), float(distances[outer].median()),
                         float(distances[inner].median()), len(values), total)


FLAT_SLOPE = 0.7  # a dark field whose level falls slower than the distance^-FLAT_SLOPE is flat
FLOOR_SHARE = 0.01  # and the share of the counts its floor adds over the dark field, at least
FLOOR_PIXELS = 30  # dark-field pixels needed to tell


# the share of the counts beyond the bright-field disk above which a sample scatters strongly: on several slices it takes
# the depth blur's autos below and, with the amplitude loss, a larger step. The loss itself no longer turns on it: the
# Poisson loss fell far behind on such crystals (0.50 against 0.998 on 10 unit cells of SrTiO3 at 1e6 electrons per
# pattern) until its pull was capped (physics/chain.py's POISSON_PULL_CAP); capped it was level there
# (benchmarks/records/2026-12-07-poisson-pull-cap.md)
STRONG_SCATTERING = 0.04
# optim.regularize.depth_blur_slices's auto on several slices of such a sample (0 on weak scatterers, where a
# fixed blur lost a little)
STRONG_DEPTH_BLUR = 1.0
# and where the tilt is refined there (optim.start.tilt): free slices shear to absorb a tilt, and slices held closer
# bring a tilt refined from zero nearer the truth and the object with it (measured, 2 against 4 on eight crystals:
# benchmarks/records/2026-12-02-tilt-distribution.md; 1 against 2: 2026-12-02-tilt-sampling.md)
TILT_DEPTH_BLUR = 4.0
# and optim.regularize.depth_blur_start_slices's auto there (not where the tilt is refined), as a share of the slices: a
# blur held over the run's first stage. On abTEM's SrTiO3 of 16 unit cells (62 A, one slice per cell) the stop rule
# ended free slices at 0.72 (400 fixed iterations: 0.967); 8 slices first, then 1: 0.997 in about 100 iterations, and
# the vacancies' depth map closer to the truth too; three quarters of the slices, not half, for 20 cells (78 A): 0.61
# -> 0.99 at 1e6, the others within 0.0025 (benchmarks/records/2026-12-06-depth-blur-stages.md)
START_DEPTH_BLUR_SHARE = 0.75
# optim.preconditioned_step's auto there (with the amplitude loss; 0.4 elsewhere): such a crystal converges slower
STRONG_STEP = 0.6


def resolved_loss(config: Config, counts: bool, peak_counts: float, dark_field: float | None = None
                  ) -> tuple[str, list[str]]:
    """``optim.loss`` for this run, and for ``auto`` the run.log line that says why (with the brightest pixel of the
    mean pattern, ``peak_counts``, and the share of the counts beyond the bright-field disk, ``dark_field``, where
    known): poisson where the patterns are ``counts`` (``store.sample_statistics``) and the object takes the
    preconditioned step with it (unless Adam was asked for); amplitude otherwise. The Poisson loss was ahead or level
    on counted data with the preconditioned object, thick and strongly scattering crystals included (its pull capped:
    ``chain.POISSON_PULL_CAP``), and behind with Adam on several slices."""
    if config.optim.loss != "auto":
        return config.optim.loss, []
    optimizer = resolved_optimizer(config)
    scattering = "" if dark_field is None else f", {100 * dark_field:.1f} % of the counts beyond the bright-field disk"
    loss = "poisson" if counts and optimizer == "preconditioned" else "amplitude"
    return loss, [f"optim.loss: {loss} (auto: object optimizer {optimizer}, patterns {'' if counts else 'not '}"
                  f"counts, brightest mean pixel {peak_counts:.4g} counts{scattering})"]


def auto_values(config: Config) -> dict[str, float | str]:
    """{key: value} of every key given as ``auto`` (empty when numbers were given)."""
    values: dict[str, float | str] = {f"optim.regularize.{name}": resolved(config, name) for name in MULTISLICE
                                      if getattr(config.optim.regularize, name) == "auto"}
    for group in ("object", "probe"):
        if getattr(config.optim, f"{group}_optimizer") == "auto":
            values[f"optim.{group}_optimizer"] = resolved_optimizer(config, group)
    values.update(preconditioned_autos(config))
    if config.optim.lr_final_fraction == "auto":
        values["optim.lr_final_fraction"] = resolved_final_fraction(config)
    if config.optim.adam_beta2 == "auto":
        values["optim.adam_beta2"] = resolved_beta2(config)
    return values


def auto_notes(config: Config) -> list[str]:
    """What ``auto`` turned on, in words, e.g. "optim.regularize: tv_phase 1, lateral_blur_px 0.3 (auto:
    4 slices ...)"; nothing where auto turned nothing on (one slice: the run is as before auto existed)."""
    on = [f"{key.rsplit('.', 1)[1]} {value:g}" for key, value in auto_values(config).items()
          if key.startswith("optim.regularize.") and value > 0]
    fraction, why = final_fraction_choice(config)
    notes = [f"optim.lr_final_fraction: {fraction:g} (auto: {why}; {FINAL_FRACTION:g} = rates that fall)"] if why else []
    if not on:
        return notes
    return [f"optim.regularize: {', '.join(on)} (auto: {config.model.slices} slices; give numbers, 0 = off, "
            "to choose)"] + notes


def optimizer_notes(config: Config) -> list[str]:
    """For run.log (not the terminal), what ``optim.object_optimizer`` and ``optim.probe_optimizer``
    given as auto chose, e.g. "optim.object_optimizer: preconditioned (auto)", or "adam (auto: optim.lr.object
    given)", and for a preconditioned object its step and batch floor given as auto."""
    notes = []
    for group in ("object", "probe"):
        if getattr(config.optim, f"{group}_optimizer") == "auto":
            chosen, reason = optimizer_choice(config, group)
            notes.append(f"optim.{group}_optimizer: {chosen} (auto{f': {reason}' if reason else ''})")
    why = {"optim.preconditioned_step": f"the {least_squares_loss(config.optim.loss)} loss",
           "optim.preconditioner_batch_floor": batch_floor_choice(config)[1]}
    return notes + [f"{key}: {f'{value:g}' if value else 'off'} (auto: {why[key]})"
                    for key, value in preconditioned_autos(config).items()]


@dataclass(frozen=True)
class AutoPriors:
    """What a run's auto keys come to, resolved once at build: ``values`` {name: value} of every key of
    ``MULTISLICE`` (``resolved_values``) and ``notes`` (``auto_notes``), the object's and the probe's
    optimizer, the object's preconditioned step, the loss's share of the gradient in it and the batch
    floor, Adam's beta2 and the object's depth blur. (results.h5's
    attribute, ``auto_values``, is made with the run's other texts when it starts.)"""

    values: dict[str, float]
    notes: list[str]
    optimizer: str = "adam"  # ``resolved_optimizer(config)``, the object's
    probe_optimizer: str = "adam"  # ``resolved_optimizer(config, "probe")``
    step: float = 0.4  # ``resolved_step(config)``
    log_notes: list[str] = field(default_factory=list)  # run.log only (``optimizer_notes``)
    share: float = 0.5  # ``least_squares(config.optim.loss).share``
    batch_floor: float = 0.0  # ``resolved_batch_floor(config)``
    beta2: float = 0.95  # ``resolved_beta2(config)``, every Adam's
    depth_blur_slices: float = 0.0  # ``resolved_depth_blur(config)``
    depth_blur_start_slices: float = 0.0  # ``resolved_depth_blur_start(config)``

    @classmethod
    def of(cls, config: Config) -> AutoPriors:
        return cls(resolved_values(config), auto_notes(config), resolved_optimizer(config),
                   resolved_optimizer(config, "probe"), resolved_step(config), optimizer_notes(config),
                   least_squares(config.optim.loss).share, resolved_batch_floor(config), resolved_beta2(config),
                   resolved_depth_blur(config), resolved_depth_blur_start(config))


def resolved_depth_blur_start(config: Config) -> float:
    """``optim.regularize.depth_blur_start_slices`` for this run: as given, or as ``data_autos`` chose in place of
    auto; where auto was left (no data resolved it, or ``data_autos`` kept one stage), ``resolved_depth_blur``."""
    start = config.optim.regularize.depth_blur_start_slices
    return resolved_depth_blur(config) if start == "auto" else start


def resolved_depth_blur(config: Config) -> float:
    """``optim.regularize.depth_blur_slices`` for this run: as given, or as ``data_autos`` chose from the data in
    place of auto; 0 (off) for an auto that no data resolved (a model built from a config alone). > 0 only on
    several slices (the config refuses it on one)."""
    blur = config.optim.regularize.depth_blur_slices
    return 0.0 if blur == "auto" else blur


def resolved_beta2(config: Config) -> float:
    """``optim.adam_beta2``, with auto resolved: 0.95 for one slice, 0.999 for multislice."""
    if config.optim.adam_beta2 != "auto":
        return float(config.optim.adam_beta2)
    return 0.95 if config.model.slices == 1 else 0.999
