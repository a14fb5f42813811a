"""The ``data.transform`` and ``data.simulate`` sections: how stored patterns are prepared, and
the simulated dataset a config can ask for instead of a file (their own module so that schema.py
stays one screenful per section; ``schema`` imports them as before)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ptyacc.config.fields import _f, _require
from ptyacc.errors import ConfigError


@dataclass
class TransformConfig:
    """Preparation of every diffraction pattern as it is read, in this order: subtract the
    background (data.subtract_background); crop; NaN/Inf and negative values (data.nonfinite,
    data.negative); bin; transpose, then flip_y, then flip_x; zero-pad. The detector mask
    follows the crop, bin (a binned pixel is good only if all its pixels are), orientation and
    pad (padded pixels are left out of the loss). experiment.dk_invA, dx_A and
    detector_pixel_m describe the patterns as stored: binning multiplies dk (and the X-ray
    detector pixel) by bin, and the object pixel is dx = 1 / (K dk) with K the final size, so
    crop and pad change it too (near field: dx grows by bin only)."""

    orientation: Literal["manual", "auto"] = _f(
        "manual", "auto: transpose, flip_y and flip_x from the detector's basis_vectors (CXI, or a file converted "
                  "from one), so that rows run along +y and columns along +x of the frame of the sample "
                  "translations; in a file without them (electrons, raster scan; X-rays in the far field, 64 positions or "
                  "more), from the patterns' centre of mass: the one of the eight that makes its field curl-free with "
                  "a scan rotation within 45 degrees of experiment.scan_rotation_deg (of 0 when that is auto); for "
                  "X-rays, of the two that differ by both flips (the conjugate object's data), the one that gives a "
                  "phase delay, checked by experiment.sample_side: auto's trials, and all eight tried by ptyacc run "
                  "where the centre of mass cannot tell (docs/how-to/calibrate.md); manual: the three keys below.")
    orientation_trials: int | Literal["auto"] = _f(
        "auto", "Where orientation: auto finds the data unclear (few counts: the centre of mass is noise and the "
                "Fourier regions' search finds no clear peak), ptyacc run tells the candidate orientations (with their "
                "scan rotation and defocus) apart by a short reconstruction of each, this many iterations, and takes "
                "the one whose data term ends lowest; then the same way its scan rotation (where the search's peak is "
                "broad) and the search's defocus (with defocus_A: auto); run.log lists every trial. The same way, with "
                "the run's probe modes, the defocus the Fourier regions' coherence gives where the parallax cannot "
                "(shifts too large for the raster). 0: none (the guess, with a warning; the coherence's defocus kept). "
                "auto: 6. ptyacc init and info only warn.")
    transpose: bool = _f(False, "Swap the ky and kx axes of each pattern.")
    flip_y: bool = _f(False, "Reverse the ky (row) axis of each pattern.")
    flip_x: bool = _f(False, "Reverse the kx (column) axis of each pattern.")
    flip_about_zero: list[bool] = _f(
        factory=lambda: [False, False],
        doc="[y, x]: where that axis is flipped (flip_y, flip_x) and has an even size, turn it about the zero "
            "frequency (pixel i to n - i, modulo n) instead of reversing it (i to n - 1 - i): a flip that stands for "
            "the scan turned by 180 or 90 degrees, not a detector read out backwards; the two differ by a pixel. "
            "With orientation: auto measured from the data the orientation auto decides it (results.h5 "
            "auto_values says how), and this key is not used (docs/reference/conventions.md).")
    crop: int | None = _f(None, "Keep crop x crop pixels of each stored pattern, centred on pixel (ky // 2, kx // 2) "
                                "(zero frequency stays at the centre); null = no crop.")
    crop_offset: list[int] | None = _f(None, "[row, col] of the first kept pixel in the stored pattern, instead of "
                                             "a centred crop; needs crop.")
    bin: int = _f(1, "Sum bin x bin pixel blocks after the crop (counts stay counts); the crop size must be a "
                     "multiple of bin.")
    pad: int | None = _f(None, "Zero-pad to pad x pad pixels, centred, after binning; the padded pixels are "
                               "masked out of the loss. null = no padding.")
    upsample: int | Literal["auto"] = _f(
        "auto", "Far field: object pixels upsample times finer than the detector's reciprocal pixel (dx = 1 / (upsample "
                "K dk)); each pattern is zero-padded to upsample K (after binning), the unmeasured frequencies left "
                "out of the loss: the same as pad = upsample K. auto: 2 where a tilt acts in a multislice model "
                "(model.slices > 1 and experiment.tilt_mrad not zero, optim.start.tilt set or model.tilt: "
                "per_position) and pad is not given, else 1: on the detector's grid the waves a thick crystal "
                "scatters beyond the detector wrap around the window, and the data then favour a wrong tilt "
                "(docs/how-to/tilt-and-sampling.md). 2 costs about 3x per iteration.")
    descan: Literal["off", "auto"] = _f(
        "off", "auto: measure the bright-field disk's centre in up to 1024 prepared patterns, fit a plane in the "
               "probe positions and shift every pattern back by it (sub-pixel, Fourier), so that zero frequency sits "
               "at the centre everywhere; run.log reports the fit, results.h5 /detector keeps it. Electrons, far field.")
    descan_model: Literal["auto", "shift", "ramp"] = _f(
        "auto", "How descan: auto takes out what it measured. shift: each pattern's counts moved back as it is read "
                "(sub-pixel, Fourier). ramp: the patterns left as measured (counts stay counts) and each position's "
                "exit wave (after the last slice) multiplied by the phase ramp exp(2 pi i (dy y + dx x) / K) that "
                "moves its pattern by the measured (dy, dx) px, as a descan does; one scan, far field. "
                "auto: ramp with one scan and neither pad nor upsample, else shift (on the every-effect "
                "case of docs/explanation/autos.md, 'Descan', phase NCC 0.989 against 0.933 at batch 128).")

    def _check(self, path: str) -> None:
        _require(self.crop is None or self.crop >= 1, f"{path}.crop", f"must be >= 1 or null, got {self.crop}")
        if self.crop_offset is not None:
            _require(self.crop is not None, f"{path}.crop_offset", "needs crop (the size of the kept block)")
            _require(len(self.crop_offset) == 2 and min(self.crop_offset) >= 0, f"{path}.crop_offset",
                     f"must be two integers >= 0 [row, col], got {self.crop_offset}")
        _require(self.bin >= 1, f"{path}.bin", f"must be >= 1, got {self.bin}")
        _require(self.orientation_trials == "auto" or self.orientation_trials >= 0, f"{path}.orientation_trials",
                 f"must be auto or an integer >= 0, got {self.orientation_trials}")
        _require(len(self.flip_about_zero) == 2 and all(isinstance(v, bool) for v in self.flip_about_zero),
                 f"{path}.flip_about_zero", f"must be two booleans [y, x], got {self.flip_about_zero}")
        if self.orientation == "auto" and (self.transpose or self.flip_y or self.flip_x):
            raise ConfigError(f"{path}.orientation: auto sets transpose, flip_y and flip_x from the file; leave "
                              "them false or use orientation: manual")
        _require(self.pad is None or self.pad >= 1, f"{path}.pad", f"must be >= 1 or null, got {self.pad}")
        _require(self.upsample == "auto" or self.upsample >= 1, f"{path}.upsample",
                 f"must be auto or an integer >= 1, got {self.upsample}")
        if self.upsample != "auto" and self.upsample > 1 and self.pad is not None:
            raise ConfigError(f"{path}.upsample: {self.upsample} pads the patterns to {self.upsample} times their size; "
                              f"give it or pad ({self.pad}), not both")


@dataclass
class SimulateConfig:
    """A synthetic dataset made with ptyacc's own forward model (for tests and tutorials)."""

    scan_shape: list[int] = _f(factory=lambda: [16, 16], doc="Scan positions [slow, fast].")
    detector_px: int = _f(64, "Pattern size K (K x K pixels).")
    dose: float | None = _f(None, "Electrons per pattern for Poisson noise; null = noise-free.")
    atoms: int = _f(0, "Number of random atoms; 0 = about one per 4 square Å of object.")
    atom_phase_rad: float = _f(0.4, "Peak phase of one atom (Gaussian, 0.35 Å sigma).")
    position_jitter_A: float = _f(0.0, "Random error added to the true raster positions (Å).")
    seed: int = _f(1, "Seed of the random object, positions and noise.")

    def _check(self, path: str) -> None:
        _require(len(self.scan_shape) == 2 and min(self.scan_shape) >= 1, f"{path}.scan_shape",
                 f"must be two positive integers, got {self.scan_shape}")
        _require(self.detector_px >= 8 and self.detector_px % 2 == 0, f"{path}.detector_px",
                 f"must be an even integer >= 8, got {self.detector_px}")
        _require(self.dose is None or self.dose > 0, f"{path}.dose", f"must be > 0, got {self.dose}")
        _require(self.atoms >= 0, f"{path}.atoms", f"must be >= 0, got {self.atoms}")
        _require(self.position_jitter_A >= 0, f"{path}.position_jitter_A",
                 f"must be >= 0, got {self.position_jitter_A}")


