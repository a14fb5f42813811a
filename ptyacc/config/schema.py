"""The YAML schema: one validated dataclass per config section.

Each field has a type, a default and a ``doc`` (its line in the config reference); each
section's ``_check`` rejects impossible values with the key path and the reason
(``optim.lr.probe: must be >= 0, got -1``). How a YAML file becomes these objects (types,
unknown keys, ``--set`` overrides) is in ``loading.py``; the Markdown reference is made from
these classes by ``reference.py``.

Relative input paths (``data.path``, ``experiment.positions.path``) are resolved against the
directory of the config file; ``output.dir`` is relative to the working directory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ptyacc.config.fields import _f, _require, _suggest
from ptyacc.config.preparation import SimulateConfig, TransformConfig
from ptyacc.config.recenter import RecenterConfig
from ptyacc.config.regularize import RegularizeConfig
from ptyacc.config.running import OutputConfig, RuntimeConfig
from ptyacc.config.scans import ScanConfig
from ptyacc.config.steps import AUTO_GAIN, AUTO_ITERATIONS, LearningRates, StartIterations, StopRule
from ptyacc.config.tune import TuneConfig
from ptyacc.config.xray import ProbeFileConfig, XrayOpticsConfig
from ptyacc.errors import ConfigError

ABERRATION_NAMES = (
    "C10", "C12a", "C12b",
    "C21a", "C21b", "C23a", "C23b",
    "C30", "C32a", "C32b", "C34a", "C34b",
    "C41a", "C41b", "C43a", "C43b", "C45a", "C45b",
    "C50", "C52a", "C52b", "C54a", "C54b", "C56a", "C56b",
)


@dataclass
class DataConfig:
    """Where the diffraction patterns come from."""

    path: str | None = _f(None, "Pattern file, relative to the config file: HDF5, CXI, .npy, .mat, EMPAD .raw; with "
                                "ptyacc[formats] Merlin .mib, Gatan .dm3/.dm4, .emd, .blo, .hspy/.zspy.")
    key: str | None = _f(None, "Dataset (HDF5, CXI, MAT v7.3) or variable (MAT v5) holding the patterns; default "
                               "'patterns' or the one 3D/4D dataset. Formats holding one array take none.")
    scan_shape: list[int] | None = _f(None, "Scan [slow, fast]; read from 4D data or the file's attribute if omitted.")
    transform: TransformConfig = _f(factory=TransformConfig, doc="Preparation of each pattern: crop, bin, orientation, padding.")
    simulate: SimulateConfig | None = _f(None, "Synthetic dataset instead of `path`.")
    nonfinite: Literal["error", "zero"] = _f("error", "What to do with NaN/Inf pattern values.")
    negative: Literal["clip", "error"] = _f("clip", "What to do with negative pattern values (clip sets them to 0).")
    use_mask: bool = _f(True, "Leave out the bad pixels of the file's detector mask (CXI) from the loss.")
    bad_pixels: Literal["off", "auto"] = _f(
        "off", "auto: find dead pixels, hot pixels and dead rows/columns in up to 256 patterns as stored and leave "
               "them out of the loss too (run.log and results.h5 /detector say which); off: only the file's mask.")
    subtract_background: bool = _f(True, "Subtract the file's dark/background frame (CXI) from every pattern.")
    flat_field: str | None = _f(
        None, "The detector's gain per pixel (.npy, or HDF5 with flat_field_key), relative to the config file, shaped as "
              "the patterns are stored: every pattern is divided by it as it is read, before data.transform. Pixels "
              "without a positive gain are left out of the loss (docs/explanation/autos.md, 'Detector blur and gain').")
    flat_field_key: str = _f("flat_field", "The HDF5 dataset of data.flat_field.")
    hold: Literal["auto", "device", "host", "disk"] = _f(
        "auto", "Where the patterns live during the run. device: all on the device (fastest); host: in host memory "
        "(in their stored integer type when they are counts), each step's batch copied to the device, the next "
        "one's copy overlapped; disk: read from data.path each step by a background reader that prefetches the "
        "next steps; auto: device when the prepared patterns fit in hold_memory_fraction of the device's free "
        "memory, else host when they fit in that fraction of the available host memory, else disk. Every mode "
        "gives the same result.")
    hold_memory_fraction: float = _f(0.5, "The fraction of free device (or available host) memory that "
                                     "data.hold: auto lets the patterns take.")

    def _check(self, path: str) -> None:
        if (self.path is None) == (self.simulate is None):
            raise ConfigError(f"{path}: give exactly one of `path` (a data file) or `simulate`")
        if self.simulate is not None and self.transform != TransformConfig():
            raise ConfigError(f"{path}.transform: prepares patterns read from data.path; a data.simulate dataset "
                              "is made in its final form (remove data.transform)")
        _require(0 < self.hold_memory_fraction <= 1, f"{path}.hold_memory_fraction",
                 f"must be in (0, 1], got {self.hold_memory_fraction}")
        if self.simulate is not None and self.hold == "disk":
            raise ConfigError(f"{path}.hold: disk reads the patterns from data.path; a data.simulate dataset has no "
                              "file (use host or device, or save it with `ptyacc simulate` and give its path)")
        if self.scan_shape is not None:
            _require(len(self.scan_shape) == 2 and min(self.scan_shape) >= 1, f"{path}.scan_shape",
                     f"must be two positive integers [slow, fast], got {self.scan_shape}")


@dataclass
class PositionsFileConfig:
    """Probe centres read from a file: an (N, 2) array of (y, x) in Å, in the patterns' order."""

    key: str = _f("positions_A", "Dataset holding the (N, 2) positions.")
    path: str | None = _f(None, "HDF5 file; defaults to data.path.")


@dataclass
class ExperimentConfig:
    """Instrument settings. Values left out are read from the data file's attributes if present."""

    radiation: Literal["electron", "xray"] = _f("electron", "Kind of radiation.")
    energy_eV: float | None = _f(None, "Beam energy in eV (electrons: accelerating voltage x e).")
    semiangle_mrad: float | None = _f(None, "Probe-forming aperture semi-angle in mrad.")
    defocus_A: float | Literal["auto"] | None = _f(
        None, "Defocus in Å, = -C10; positive = underfocus (focus below the entrance surface). auto (electrons, a "
              "raster scan): measured from the parallax of the bright-field disk (the shifts of its pixels' virtual "
              "images), the file's defocus_A attribute or aberrations.C10 the nominal value it falls back to where "
              "the data cannot tell; run.log gives both. It also sets C12a/C12b where they are clear and not given, "
              "and refines scan_rotation_deg: auto (docs/explanation/autos.md, 'Defocus from parallax').")
    aberrations: dict[str, float] = _f(factory=dict, doc="Krivanek coefficients in Å (C10, C12a, C12b, C21a, ... C56b).")
    dk_invA: float | None = _f(None, "Reciprocal pixel size of the detector in 1/Å.")
    dx_A: float | None = _f(None, "Real-space (object) pixel size in Å; alternative to dk_invA.")
    dk_from_bright_field: bool = _f(
        False, "Electrons: fit dk_invA = semiangle / wavelength / R from the bright-field disk's radius R (px, "
               "half maximum, sub-pixel) in the mean of up to 256 prepared patterns, instead of dk_invA or dx_A.")
    scan_step_A: float | None = _f(None, "Raster scan step in Å.")
    scan_rotation_deg: float | Literal["auto"] = _f(
        0.0, "Rotation of the scan axes against the detector axes, counter-clockwise (the raster turned from +x "
             "towards +y); positions given in a file or by experiment.positions are turned by it about their centre. "
             "auto: measured from the patterns: the angle at which the centre of mass's field over the scan is "
             "curl-free, checked by the search of the bright-field pixels' coherence in Fourier space (whose rotation "
             "is taken where the centre of mass alone gave it) and refined by the parallax when the defocus is auto; "
             "with the transpose/flip when data.transform.orientation is auto. X-rays: in the near field from the "
             "direction the holograms move in; in the far field (64 positions or more) from the centre of mass, refined "
             "by ptyacc run's short trial reconstructions. run.log says what gave it.")
    geometry: Literal["far_field", "near_field"] = _f(
        "far_field", "far_field: patterns are diffraction patterns (zero frequency at the centre); near_field: "
                     "Fresnel-scaled near-field images (X-ray, needs focus_to_sample_m), not fftshifted.")
    detector_distance_m: float | None = _f(None, "Sample-to-detector distance in m (X-ray; from a CXI file if omitted).")
    detector_pixel_m: float | None = _f(None, "Detector pixel size in m (X-ray; from a CXI file if omitted).")
    focus_to_sample_m: float | Literal["auto"] | None = _f(
        None, "Near field: distance from the probe focus to the sample in m (Fresnel scaling: magnification "
              "(z1 + z2) / z1); auto: measured from how far the holograms move on the detector as the sample moves "
              "(magnification = detector_pixel_m / object pixel; ptyacc init writes auto for near-field files), and a "
              "given distance is checked against that motion. Far field: the initial probe's defocus, the sample this "
              "far downstream of the focus (negative: upstream); null = from the scan's overlap, on the side "
              "experiment.sample_side says.")
    sample_side: Literal["downstream", "upstream", "auto"] = _f(
        "downstream", "X-ray far field without focus_to_sample_m (and without model.probe_init): the side of the "
                      "probe's focus the sample lies on, which gives the initial probe's curvature (its distance is "
                      "the one at which the beam overlaps 60 % at the scan's spacing). auto: ptyacc run tries both "
                      "sides, then 0.6 and 1.6 times that distance on the side that fitted, by short reconstructions "
                      "(data.transform.orientation_trials), and takes the lowest data term, setting focus_to_sample_m "
                      "as well (ptyacc init writes auto; init, info and a run without trials take downstream). "
                      "Patterns flipped along both axes are the conjugate object's under the other side's probe "
                      "(docs/how-to/calibrate.md).")
    optics: XrayOpticsConfig | None = _f(None, "X-ray far field: the focusing optics the initial probe is made from "
                                               "(docs/tutorials/xray-near-field.md, 'Far field').")
    positions: Literal["raster"] | PositionsFileConfig = _f(
        "raster", "`raster` (from data.scan_shape and scan_step_A) or {path, key} of an (N, 2) array in Å.")
    check_calibration: bool = _f(
        True, "Before the first iteration, check the calibration against the data and stop (exit 2) naming the "
              "likely unit slip: electrons, the bright-field disk predicted from energy, semi-angle and dk against "
              "the measured one (20%); X-rays, the scan against the probe window and the near-field Fresnel "
              "number. false skips the checks.")
    tilt_mrad: list[float] = _f(
        factory=lambda: [0.0, 0.0], doc="[y, x] beam tilt against the crystal's zone axis in mrad (multislice): a "
                                        "beam tilted by +t along y travels toward increasing y, the zone axis appears "
                                        "at ky = -t/lambda. The start value when optim.start.tilt is set.")

    def _check(self, path: str) -> None:
        _require(len(self.tilt_mrad) == 2, f"{path}.tilt_mrad", f"must be [y, x] in mrad, got {self.tilt_mrad}")
        if self.focus_to_sample_m == "auto" and self.geometry != "near_field":
            raise ConfigError(f"{path}.focus_to_sample_m: auto measures the near field's magnification (geometry: "
                              "near_field); in the far field experiment.sample_side: auto finds the probe's distance")
        for name in ("energy_eV", "semiangle_mrad", "dk_invA", "dx_A", "scan_step_A", "detector_distance_m",
                     "detector_pixel_m", "focus_to_sample_m"):
            value = getattr(self, name)
            if value == "auto":
                continue
            signed = name == "focus_to_sample_m" and self.geometry == "far_field"  # the defocus, either side
            _require(value is None or value > 0 or (signed and value != 0), f"{path}.{name}",
                     f"must be {'non-zero' if signed else '> 0'}, got {value}")
        if self.optics is not None and (self.radiation != "xray" or self.geometry != "far_field"):
            raise ConfigError(f"{path}.optics: makes the probe of X-ray far-field data, got {self.radiation} "
                              f"{self.geometry}")
        if self.geometry == "near_field" and self.radiation != "xray":
            raise ConfigError(f"{path}.geometry: near_field needs radiation: xray, got {self.radiation}")
        unknown = sorted(set(self.aberrations) - set(ABERRATION_NAMES))
        if unknown:
            hint = _suggest(unknown[0], ABERRATION_NAMES)
            raise ConfigError(f"{path}.aberrations.{unknown[0]}: unknown aberration{hint}; "
                              f"known: {', '.join(ABERRATION_NAMES)}")
        if self.defocus_A == "auto" and self.radiation != "electron":
            raise ConfigError(f"{path}.defocus_A: auto measures the defocus from the parallax of the bright-field disk "
                              f"(electrons); for {self.radiation} give a number (X-ray far field: focus_to_sample_m)")
        if "C10" in self.aberrations and self.defocus_A not in (None, "auto"):
            raise ConfigError(f"{path}.defocus_A: give defocus_A or aberrations.C10, not both (defocus_A = -C10)")
        if self.dk_invA is not None and self.dx_A is not None:
            raise ConfigError(f"{path}: give dk_invA or dx_A, not both (dx_A = 1 / (K dk_invA))")
        if self.dk_from_bright_field and (self.dk_invA is not None or self.dx_A is not None):
            raise ConfigError(f"{path}.dk_from_bright_field: fits dk_invA from the patterns; give it or dk_invA/dx_A, "
                              "not both")
        if self.dk_from_bright_field and self.radiation != "electron":
            raise ConfigError(f"{path}.dk_from_bright_field: needs radiation: electron (a probe-forming aperture), "
                              f"got {self.radiation}")


@dataclass
class ModelConfig:
    """What is reconstructed."""

    probe_modes: int = _f(1, "Number of incoherent probe modes.")
    probe_mode_power: float | Literal["auto"] = _f(
        "auto", "With several probe modes: the share of the total intensity that each mode after the first starts "
                "with (the first has the rest). auto: 0.02 each up to 11 modes, beyond that 0.2 shared by the further "
                "modes (earlier versions: 0.2 shared whatever the number of modes). Modes grow where "
                "the data ask for them; a small start keeps coherent data coherent (docs/explanation/optimisers.md, 'Probe "
                "modes').")
    probe_aperture_edge: Literal["auto", "measured", "soft"] = _f(
        "auto", "The edge of the initial probe's aperture (electron data). soft: a one-pixel ramp at "
                "experiment.semiangle_mrad (earlier versions). measured: each edge pixel read from the data's mean "
                "pattern (its bright-field disk, the scattering just outside subtracted) and kept between a sharp "
                "edge and that ramp: a sharp aperture starts sharp, an area-weighted one as the data show it; an "
                "edge broader than the ramp (the object's scattering, the detector's blur) stays the ramp. auto: "
                "measured where the mean pattern shows an even disk of the semi-angle (inside 3 times brighter "
                "than a ring 2-4 px outside), else soft (docs/explanation/optimisers.md, 'The initial probe's aperture edge').")
    object_modes: int = _f(1, "Number of incoherent object modes.")
    slices: int = _f(1, "Number of object slices (multislice when > 1).")
    slice_thickness_A: float = _f(2.0, "Distance between slices in Å.")
    object_padding_px: int = _f(0, "Extra object pixels around the scanned field, on each side.")
    object_amplitude_bounds: list[float] = _f(
        factory=lambda: [0.0, 1.0], doc="[min, max] of the object amplitude, applied after each iteration (after "
                                        "every step where the probe takes the preconditioned step).")
    orthogonalize_probe: bool = _f(True, "Orthogonalise probe modes after each step (sorted by power).")
    init_from: str | None = _f(None, "A previous reconstruction whose object, probe and positions start this run "
                                     "(relative to the config file): ptyacc's results.h5, PtyRAD's HDF5, "
                                     "PtychoShelves' Niter*.mat or py4DSTEM's output, fitted to this run's pixel, "
                                     "window, slices and modes (docs/how-to/coming-from-other-packages.md, 'Starting from').")
    probe_init: ProbeFileConfig | None = _f(None, "{path, key, pixel_m} of a probe file that starts the run "
                                                  "(docs/tutorials/xray-near-field.md, 'Far field').")
    background: bool | Literal["auto"] = _f(
        "auto", "Fit a detector background (K x K, >= 0) added to every predicted pattern. auto: on electron data whose "
                "dark field has a flat floor (a dark offset left in the counts, which a sample's scattering, falling away "
                "from the bright-field disk, is not), started at that floor; off elsewhere (docs/explanation/autos.md, "
                "'A dark offset').")
    background_start_counts: float | Literal["auto"] = _f(
        "auto", "Counts per pixel the fitted background starts at on every pixel (model.background); auto: the dark "
                "field's flat floor where the data show one (electrons), else 0.")
    intensity_weights: bool = _f(False, "Fit one intensity factor per pattern (beam-current or exposure drifts).")
    probe_variation: int = _f(
        0, "A probe that varies across the scan (orthogonal probe relaxation): the number of eigen-probes by which "
           "the first probe mode may change from position to position, each position with its own weights "
           "(e.g. 2-4; a defocus that drifts, a beam current that fluctuates). 0: one probe for all positions "
           "(docs/how-to/varying-probe-and-scans.md, 'A probe that varies').")
    probe_variation_check: bool = _f(
        True, "model.probe_variation: from the variation's second iteration, compare at every iteration's first "
              "step the data term of its batch with each position's probe and with the mean probe; once the "
              "variation fits it worse (by more than 0.1 % of the batch's counts), every position takes the mean "
              "probe for the rest of the run (said on the terminal and in run.log). false: the variation is kept "
              "whatever it does (docs/how-to/varying-probe.md).")
    probe_variation_smoothing_A: float | Literal["auto"] | None = _f(
        "auto", "model.probe_variation: standard deviation in Å of the Gaussian over neighbouring positions by which "
                "the eigen-probes' weights are averaged after every iteration (not the main mode's: beam-current "
                "noise is not smooth); auto: twice the median distance between neighbouring positions (with "
                "model.probe_variation_eigen: free at least 3 Å); null: none.")
    probe_variation_eigen: Literal["auto", "defocus", "aberrations", "free"] = _f(
        "auto", "model.probe_variation: how each position's probe may change. defocus (model.probe_variation: 1): "
                "one change of focus per position, the probe propagated by it exactly (a sample's height). "
                "aberrations: eigen-probes that are how the probe changes, to first order, with its focus, then "
                "with the two astigmatisms, the two comas and the spherical aberration (at most 6), recomputed "
                "from the probe after every iteration and never stepped: a sample's height or a lens that drifts, "
                "nothing the object could hold. free: eigen-probes refined like the probe, any change. auto: "
                "defocus where model.probe_variation is 1, aberrations above (docs/how-to/varying-probe.md).")
    detector_blur_px: float = _f(
        0.0, "The detector's point spread (charge sharing, scintillator): sigma in pixels of the patterns as prepared "
             "(after data.transform.bin) of a Gaussian that blurs every predicted pattern before the background and "
             "the loss; the start value when optim.start.detector_blur is set. 0: none (docs/explanation/autos.md, 'Detector "
             "blur and gain').")
    tilt: Literal["global", "per_position"] = _f(
        "global", "Multislice tilt (experiment.tilt_mrad, refined with optim.start.tilt): one for the whole scan, or "
                  "one per position, smoothed over neighbouring positions after every iteration (bent crystals).")
    scan_affine: Literal["full", "rotation"] = _f(
        "full", "What optim.start.scan_affine refines of the scan's shape: full, the whole 2 x 2 distortion (scale, "
                "rotation, shear, asymmetry: drift, a miscalibrated step); rotation, only its rotation about the scan's "
                "centre (a scan rotation measured a few degrees off, the step known), which the data fix far better "
                "than four terms (docs/how-to/tilt-thickness-distortion.md, 'Scan distortion').")
    recenter: RecenterConfig = _f(factory=RecenterConfig, doc="Keep the reconstruction in place (only hold_probe on by default).")
    tilt_smoothing_A: float | None = _f(
        None, "model.tilt: per_position: standard deviation in Å of the Gaussian over neighbouring positions by "
              "which the tilts are averaged after every iteration; null = twice the median distance between "
              "neighbouring positions.")

    def further_mode_power(self) -> float:
        """``probe_mode_power`` for this run: as given, or for auto 0.02 up to 10 further modes, else 0.2 / their number."""
        if self.probe_mode_power != "auto":
            return float(self.probe_mode_power)
        return min(0.02, 0.2 / max(self.probe_modes - 1, 1))

    def _check(self, path: str) -> None:
        for name in ("probe_modes", "object_modes", "slices"):
            _require(getattr(self, name) >= 1, f"{path}.{name}", f"must be >= 1, got {getattr(self, name)}")
        power = self.probe_mode_power
        _require(power == "auto" or (power > 0 and power * (self.probe_modes - 1) < 1), f"{path}.probe_mode_power",
                 f"must be auto, or > 0 with (probe_modes - 1) x probe_mode_power < 1 (the first mode has the rest), "
                 f"got {power} x {self.probe_modes - 1}")
        _require(self.slice_thickness_A > 0, f"{path}.slice_thickness_A", f"must be > 0, got {self.slice_thickness_A}")
        _require(self.init_from is None or self.probe_init is None, f"{path}.probe_init",
                 "model.init_from starts the probe too: give one of them")
        _require(self.tilt_smoothing_A is None or self.tilt_smoothing_A > 0, f"{path}.tilt_smoothing_A",
                 f"must be > 0 or null, got {self.tilt_smoothing_A}")
        _require(self.probe_variation >= 0, f"{path}.probe_variation", f"must be >= 0, got {self.probe_variation}")
        _require(self.probe_variation_smoothing_A in (None, "auto") or self.probe_variation_smoothing_A > 0,
                 f"{path}.probe_variation_smoothing_A", f"must be > 0, auto or null, got {self.probe_variation_smoothing_A}")
        # quantities/probe_variation.py's aberration_directions: focus, 2 astigmatisms, 2 comas, spherical
        _require(self.probe_variation_eigen == "free" or self.probe_variation <= 6, f"{path}.probe_variation",
                 f"must be <= 6 with model.probe_variation_eigen: {self.probe_variation_eigen} (one eigen-probe per "
                 f"aberration), got {self.probe_variation}; free allows more")
        _require(self.probe_variation_eigen != "defocus" or self.probe_variation <= 1, f"{path}.probe_variation",
                 f"must be 0 or 1 with model.probe_variation_eigen: defocus (one change of focus per position), got "
                 f"{self.probe_variation}")
        _require(self.object_padding_px >= 0, f"{path}.object_padding_px", f"must be >= 0, got {self.object_padding_px}")
        _require(self.detector_blur_px >= 0, f"{path}.detector_blur_px", f"must be >= 0, got {self.detector_blur_px}")
        lo_hi = self.object_amplitude_bounds
        _require(len(lo_hi) == 2 and 0 <= lo_hi[0] < lo_hi[1], f"{path}.object_amplitude_bounds",
                 f"must be [min, max] with 0 <= min < max, got {lo_hi}")


@dataclass
class OptimConfig:
    """How the reconstruction is optimised."""

    iterations: int | Literal["auto"] = _f(
        20, f"Passes over all positions (epochs), at most: optim.stop may end the run earlier. auto: until the loss "
            f"stops falling (optim.stop.gain, {AUTO_GAIN} where not given), at most {AUTO_ITERATIONS}.")
    stop: StopRule = _f(factory=StopRule, doc="When the run has converged and ends before optim.iterations (off "
                                              "unless optim.stop.gain is given or optim.iterations is auto).")
    batch_size: int | Literal["auto"] = _f(
        32, "Global batch: positions per step, over all processes together. auto (what ptyacc init writes): every "
            "position in one step per iteration where data.transform.descan shifted the patterns (at most 2^24 pattern "
            "pixels a step), else about an eighth of the positions, 4 to 256 (docs/explanation/autos.md, 'The batch size "
            "from the data').")
    grouping: Literal["random", "compact"] = _f("random", "random: shuffled each epoch; compact: spatial clusters.")
    loss: Literal["auto", "amplitude", "poisson"] = _f(
        "auto", "amplitude: Gaussian on sqrt(I) (the model intensity plus 1e-6 of the mean pattern's brightest pixel); "
                "poisson: Poisson NLL (the model intensity plus 0.01 counts; its pull capped where the model is dark: where "
                "the model intensity is below (M - 1) / 32 of a pixel's M counts, the loss goes on along its tangent). "
                "auto: poisson where the patterns are counts (whole numbers, none negative, in a sample of 128) "
                "and the object may take the preconditioned step (optim.object_optimizer not adam, optim.lr.object "
                "not given), amplitude otherwise; thick and strongly scattering samples too (docs/explanation/"
                "optimisers.md, 'The loss').")
    lr: LearningRates = _f(factory=LearningRates, doc="Learning rates.")
    adam_beta2: float | Literal["auto"] = _f(
        "auto", "Adam's beta2 (second-moment decay; beta1 is 0.9) for every group. auto: 0.95 for a single-slice "
                "object, whose last iterations then still improve it (PyTorch's 0.999 remembers the first, large "
                "gradients and shrinks the late steps); 0.999 for multislice, where faster late steps move "
                "structure between slices (benchmarks/records/2026-11-27-benchmarks.md, 'Convergence and low-dose data').")
    object_optimizer: Literal["auto", "adam", "preconditioned"] = _f(
        "auto", "How the object is updated. adam: Adam, a step of optim.lr.object (rad) at every pixel. "
                "preconditioned: the gradient divided by the probe's illumination of each pixel, the least-squares "
                "step of ePIE and LSQML (optim.preconditioned_step; docs/explanation/optimisers.md, 'The object's and the "
                "probe's optimizer'). "
                "auto: preconditioned (any number of slices, either loss), adam where optim.lr.object is given "
                "another value than its default (0.01) and 0, or where the tilt is refined (optim.start.tilt: the "
                "tilt was found with Adam's object step, docs/how-to/tilt-thickness-distortion.md).")
    preconditioned_step: float | Literal["auto"] = _f(
        "auto", "optim.object_optimizer: preconditioned: the step as a fraction of the least-squares step (1 "
                "replaces each exit wave's amplitude by the measured one where the probe is); on several slices "
                "each slice takes 1 / slices of it. Follows the cosine decay of the learning rates. auto: 0.4 for "
                "the amplitude loss, 0.8 for the Poisson loss (docs/explanation/optimisers.md, 'The object's and the probe's "
                "optimizer'); 0.6 with the amplitude loss on several slices of a strongly scattering sample (more "
                "than 4 % of the counts beyond the bright-field disk; docs/how-to/tilt-thickness-distortion.md).")
    probe_optimizer: Literal["auto", "adam", "preconditioned"] = _f(
        "auto", "How the probe is updated. adam: Adam, a step of optim.lr.probe. preconditioned: the gradient "
                "divided by the object's largest intensity (model.object_amplitude_bounds[1] squared), the "
                "least-squares step of ePIE and LSQML (optim.preconditioned_probe_step). auto: preconditioned, adam "
                "where optim.lr.probe is given another value than its default and 0, or where the tilt is refined "
                "(optim.start.tilt).")
    preconditioned_probe_step: float = _f(
        1.0, "optim.probe_optimizer: preconditioned: the step as a fraction of the least-squares step (1: the exit "
             "wave's amplitudes made the measured ones, for an object of the largest amplitude).")
    preconditioner_floor: float = _f(
        0.1, "optim.object_optimizer: preconditioned: added to the illumination, as a fraction of its largest "
             "value, so that pixels the probe barely reaches take small steps.")
    preconditioner_batch_floor: float | Literal["auto"] = _f(
        "auto", "optim.object_optimizer: preconditioned: the illumination the step divides by (the mean over all "
                "positions) is at least this fraction of the illumination of the step's own positions, so that no "
                "step goes beyond preconditioned_step / this times its batch's least-squares step: a guard for larger "
                "steps and dense scans (costs about 0.2 ms a step on the demo). 0: off. auto: 0.25 on several "
                "slices, 0.5 in the X-ray near field (a beam that fills the window lights each pixel from many "
                "positions), 0 otherwise (docs/explanation/optimisers.md, 'The batch floor').")
    lr_final_fraction: float | Literal["auto"] = _f(
        "auto", "Learning rates fall along a cosine to this fraction at the last iteration; 1 keeps them constant. "
                "auto: 1 where the tilt is refined (optim.start.tilt: the tilt follows the object, "
                "and rates that fall stop both short), 0.1 otherwise (docs/how-to/tilt-and-sampling.md).")
    start: StartIterations = _f(factory=StartIterations, doc="Iteration at which each update starts.")
    max_position_offset_fraction: float = _f(
        0.25, "Largest position correction, as a fraction of the probe window's width (applied after each iteration).")
    on_nan: Literal["stop", "rollback"] = _f(
        "stop", "A NaN/Inf loss: stop (keeping the last good state in results.h5), or roll back to the last good "
                "state and retry the iteration with half the learning rates (at most 3 times).")
    regularize: RegularizeConfig = _f(factory=RegularizeConfig, doc="Regularisers of the object (off by default, but "
                                                                 "a light TV smoothing of multislice objects).")
    validation_fraction: float = _f(
        0.0, "Fraction of the positions (seeded by runtime.seed, spread over the scan) left out of the fit; after "
             "each iteration the model predicts their patterns and their loss per pattern is the validation error "
             "(Poisson: less the counts' own loss, half the deviance; run.log, results.h5 validation_error). 0 = every "
             "position is fitted.")

    def adam_step_given(self, group: str) -> bool:
        """optim.lr.<group> ("object" or "probe"), Adam's step, set to another value than its default and 0."""
        return getattr(self.lr, group) not in (0.0, getattr(LearningRates(), group))

    def _check(self, path: str) -> None:
        _require(self.iterations == "auto" or self.iterations >= 1, f"{path}.iterations",
                 f"must be auto or >= 1, got {self.iterations}")
        _require(self.batch_size == "auto" or self.batch_size >= 1, f"{path}.batch_size",
                 f"must be auto or >= 1, got {self.batch_size}")
        _require(self.adam_beta2 == "auto" or 0 <= self.adam_beta2 < 1, f"{path}.adam_beta2",
                 f"must be auto or in [0, 1), got {self.adam_beta2}")
        for group, step in (("object", "preconditioned_step"), ("probe", "preconditioned_probe_step")):
            given = getattr(self.lr, group)
            _require(getattr(self, f"{group}_optimizer") != "preconditioned" or not self.adam_step_given(group),
                     f"{path}.lr.{group}", f"is Adam's step ({given} given); with {group}_optimizer: preconditioned "
                     f"the {group}'s step is {path}.{step} (lr.{group} 0 still freezes the {group})")
        _require(self.preconditioned_probe_step > 0, f"{path}.preconditioned_probe_step",
                 f"must be > 0, got {self.preconditioned_probe_step}")
        _require(self.preconditioned_step == "auto" or self.preconditioned_step > 0, f"{path}.preconditioned_step",
                 f"must be auto or > 0, got {self.preconditioned_step}")
        _require(self.preconditioner_batch_floor == "auto" or self.preconditioner_batch_floor >= 0,
                 f"{path}.preconditioner_batch_floor", f"must be auto or >= 0, got {self.preconditioner_batch_floor}")
        _require(self.preconditioner_floor > 0, f"{path}.preconditioner_floor",
                 f"must be > 0, got {self.preconditioner_floor}")
        _require(self.lr_final_fraction == "auto" or 0 < self.lr_final_fraction <= 1, f"{path}.lr_final_fraction",
                 f"must be auto or in (0, 1], got {self.lr_final_fraction}")
        _require(self.max_position_offset_fraction > 0, f"{path}.max_position_offset_fraction",
                 f"must be > 0, got {self.max_position_offset_fraction}")
        _require(0 <= self.validation_fraction < 1, f"{path}.validation_fraction",
                 f"must be in [0, 1), got {self.validation_fraction}")


@dataclass
class Config:
    """A whole ptyacc run."""

    data: DataConfig = _f(factory=lambda: DataConfig(simulate=SimulateConfig()), doc="Input patterns.")
    experiment: ExperimentConfig = _f(factory=ExperimentConfig, doc="Instrument settings.")
    model: ModelConfig = _f(factory=ModelConfig, doc="Reconstructed quantities.")
    optim: OptimConfig = _f(factory=OptimConfig, doc="Optimisation.")
    output: OutputConfig = _f(factory=OutputConfig, doc="Output.")
    runtime: RuntimeConfig = _f(factory=RuntimeConfig, doc="Runtime.")
    tune: TuneConfig = _f(factory=TuneConfig, doc="The search of `ptyacc tune` (unused by `ptyacc run`).")
    scans: list[ScanConfig] | None = _f(
        None, "Several scans of one object (a focal series, a repeated scan): a list whose items hold data and "
              "experiment keys that replace the top-level ones for that scan (docs/how-to/varying-probe-and-scans.md, "
              "'Several scans').")
    quantities: dict[str, Any] = field(default_factory=dict, metadata={"plugin_sections": True, "doc": (
        "Quantities from installed plug-ins (packages that register under the entry-point group ptyacc.quantities): "
        "{name: its options}. A quantity named here is refined in the run; its options are checked as the other "
        "sections are, by the section the plug-in declares ({} takes its defaults; docs/how-to/add-a-quantity.md).")})
    base_dir: str = field(default=".", metadata={"doc": "", "internal": True})

    def _check(self, path: str) -> None:
        for key in ("depth_blur_slices", "depth_blur_start_slices"):
            depth_blur = getattr(self.optim.regularize, key)
            if depth_blur != "auto" and depth_blur > 0 and self.model.slices == 1:
                raise ConfigError(f"optim.regularize.{key}: blurs a multislice object along depth; set "
                                  "model.slices > 1 or leave it at 0")
        if self.model.recenter.object_z and self.runtime.shard_object:
            raise ConfigError("model.recenter.object_z: needs the whole object on every process; set "
                              "runtime.shard_object false or leave object_z off")
        for key in ("tilt", "slice_thickness"):
            if getattr(self.optim.start, key) is not None and self.model.slices == 1:
                raise ConfigError(f"optim.start.{key}: the {key.replace('_', ' ')} acts between slices; set "
                                  "model.slices > 1 or leave it null")
        self.tune.check_params("tune", Config)

    def resolve_input(self, path: str) -> Path:
        """An input path as given in the config, resolved against the config file's folder."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else Path(self.base_dir) / p

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("base_dir")
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)
