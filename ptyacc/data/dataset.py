"""The in-memory dataset: patterns, probe positions and calibration, whatever the source."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data.calibration import bright_field_radius_px, sample_rows
from ptyacc.data.prepare import Preparation, pattern_preparation
from ptyacc.data.readers import PatternsInfo, inspect_patterns, read_hdf5_array, read_inspected
from ptyacc.errors import ConfigError, DataError
from ptyacc.physics import wavelength_A

FILE_ATTRIBUTES = ("energy_eV", "semiangle_mrad", "defocus_A", "dk_invA", "dx_A", "scan_step_A")


@dataclass
class PtychoData:
    """Everything the model needs to know about a measurement.

    patterns:     (N, K, K) float32 intensities, unshifted FFT layout (zero frequency at [0, 0]).
    positions_A:  (N, 2) float64 probe centres (y, x) in Å, in the patterns' order.
    """

    patterns: torch.Tensor
    positions_A: np.ndarray
    dx_A: float
    wavelength_A: float
    semiangle_mrad: float | None
    aberrations: dict[str, float]
    scan_shape: tuple[int, int] | None = None
    source: str = ""
    pattern_rows: np.ndarray | None = None  # positions whose patterns are held; None = all
    radiation: str = "electron"
    mask: torch.Tensor | None = None  # (K, K) bool, True = pixel counts in the loss; model layout
    near_field_distance_A: float | None = None  # near field: effective (Fresnel-scaled) propagation distance
    stored_pattern_shape: tuple[int, int] | None = None  # (ky, kx) in the file, before data.transform
    ground_truth: dict[str, Any] = field(default_factory=dict)

    @property
    def n_patterns(self) -> int:
        """Number of positions (all of them, also when only some patterns are held)."""
        return len(self.positions_A)

    @property
    def detector_px(self) -> int:
        return self.patterns.shape[-1]

    @property
    def dk_invA(self) -> float:
        return 1.0 / (self.detector_px * self.dx_A)

    @property
    def mean_intensity(self) -> float:
        """Mean total counts per pattern."""
        return float(self.patterns.sum(dim=(-2, -1), dtype=torch.float64).mean())


def load_data(config: Config, keep: Callable[[np.ndarray], np.ndarray] | None = None) -> PtychoData:
    """Read or simulate the dataset that ``config.data`` describes, calibrated by
    ``config.experiment`` (values it leaves out come from the file's attributes).
    keep: given all positions (N, 2) in Å, the sorted indices of the patterns to hold
    (the others are never read); default all."""
    if config.data.simulate is not None:
        from ptyacc.data.simulate import simulate_dataset

        return keep_only(simulate_dataset(config), keep)
    path = config.resolve_input(config.data.path)
    exp_cfg = config.experiment
    options = {"scan_shape": tuple(config.data.scan_shape)} if config.data.scan_shape else {}
    info = inspect_patterns(path, config.data.key, **options)
    far_field = exp_cfg.geometry == "far_field"
    prep = Preparation.from_config(config.data.transform, info.shape[-2:], far_field, str(path), info.attrs)
    exp = _experiment_values(config, info.attrs, path)
    # mask, dark/background and the file's own positions, without reading any pattern
    extras = read_inspected(path, info, rows=np.zeros(0, dtype=np.int64), **options)
    wavelength = _wavelength_A(config, exp, info.attrs, path)
    scan_shape = tuple(config.data.scan_shape) if config.data.scan_shape else info.scan_shape
    positions_A = _positions(config, exp, info, path, extras.positions_A)
    rows = None if keep is None else np.asarray(keep(positions_A))
    background = extras.background if config.data.subtract_background else None
    prepare = pattern_preparation(prep, str(path), config.data.nonfinite, config.data.negative, background)
    if exp_cfg.dk_from_bright_field:
        dx_A, near_distance = _dx_from_bright_field(exp, wavelength, path, info, prepare, options), None
    else:
        stored_dx_A, near_distance = _sampling(config, exp, info.attrs, wavelength, info.shape[-1])
        dx_A = prep.object_pixel_A(stored_dx_A)
    raw = read_inspected(path, info, prepare, rows, **options)
    mask = prep.mask(extras.mask if config.data.use_mask else None)
    return PtychoData(
        patterns=torch.from_numpy(raw.patterns),
        positions_A=positions_A,
        dx_A=dx_A,
        wavelength_A=wavelength,
        semiangle_mrad=exp["semiangle_mrad"],
        aberrations=exp["aberrations"],
        scan_shape=scan_shape,
        source=str(path),
        pattern_rows=rows,
        radiation=exp_cfg.radiation,
        mask=None if mask is None else torch.from_numpy(mask),
        near_field_distance_A=near_distance,
        stored_pattern_shape=tuple(info.shape[-2:]),
    )


def _sampling(config: Config, exp: dict, attrs: dict, wavelength: float, k: int) -> tuple[float, float | None]:
    """Object pixel (Å) of the patterns as stored, k pixels wide, from dx_A, else dk_invA, else
    the X-ray geometry; and the near-field propagation distance (Å), or None for the far field."""
    e = config.experiment
    from_geometry, near_distance = None, None
    if e.radiation == "xray" and (e.geometry == "near_field" or (exp["dx_A"] is None and exp["dk_invA"] is None)):
        from_geometry, near_distance = xray_sampling(
            e.geometry, wavelength, k, e.detector_distance_m or attrs.get("detector_distance_m"),
            e.detector_pixel_m or attrs.get("detector_pixel_m"), e.focus_to_sample_m)
    if exp["dx_A"] is not None:
        return exp["dx_A"], near_distance
    if exp["dk_invA"] is not None:
        return 1.0 / (k * exp["dk_invA"]), near_distance
    if from_geometry is not None:
        return from_geometry, near_distance
    raise ConfigError("experiment.dk_invA: needed (or experiment.dx_A), and the data file has neither attribute")


def _dx_from_bright_field(exp: dict, wavelength: float, path: Path, info: PatternsInfo,
                         prepare: Callable[[np.ndarray], np.ndarray], options: dict) -> float:
    """Object pixel (Å) of the prepared patterns from the bright-field disk of the mean of an
    evenly spread sample of them (the same on every process): dk = semiangle / wavelength / R."""
    if exp["semiangle_mrad"] is None:
        raise ConfigError("experiment.semiangle_mrad: needed by experiment.dk_from_bright_field, and the data file "
                          "has no 'semiangle_mrad' attribute")
    sample = read_inspected(path, info, prepare, sample_rows(info.n_patterns), **options).patterns
    mean = np.fft.fftshift(sample.mean(axis=0, dtype=np.float64))
    radius_px = bright_field_radius_px(mean, str(path))
    dk_invA = exp["semiangle_mrad"] * 1e-3 / wavelength / radius_px
    return 1.0 / (mean.shape[-1] * dk_invA)


def _wavelength_A(config: Config, exp: dict, attrs: dict, path: Path) -> float:
    """From experiment.energy_eV, else the file's energy, else the file's wavelength (CXI)."""
    if exp["energy_eV"] is not None:
        return wavelength_A(exp["energy_eV"], config.experiment.radiation)
    if attrs.get("wavelength_A"):
        return float(attrs["wavelength_A"])
    raise ConfigError("experiment.energy_eV: needed, and the data file has no 'energy_eV' attribute (nor a wavelength)")


def keep_only(data: PtychoData, keep) -> PtychoData:
    """``data`` holding only the patterns that ``keep(positions_A)`` selects."""
    if keep is None:
        return data
    rows = np.asarray(keep(data.positions_A))
    return dataclasses.replace(data, patterns=data.patterns[torch.from_numpy(rows)].clone(), pattern_rows=rows)


def _experiment_values(config: Config, attrs: dict, source: Path) -> dict[str, Any]:
    """Experiment values from the config, completed from the attributes of the file ``source``."""
    exp = config.experiment
    out: dict[str, Any] = {name: getattr(exp, name) for name in FILE_ATTRIBUTES}
    given_sampling = exp.dk_invA is not None or exp.dx_A is not None or exp.dk_from_bright_field
    for name in FILE_ATTRIBUTES:
        if out[name] is None and name in attrs:
            if name in ("dk_invA", "dx_A") and given_sampling:
                continue
            if name == "defocus_A" and "C10" in exp.aberrations:
                continue
            out[name] = _attribute_number(attrs[name], name, source)
    if out["dk_invA"] is not None and out["dx_A"] is not None:
        out["dx_A"] = None  # the file carries both; dk is the measured one
    aberrations = dict(exp.aberrations)
    if out["defocus_A"] is not None:
        aberrations["C10"] = -out["defocus_A"]
    out["aberrations"] = aberrations
    return out


def _attribute_number(value: object, name: str, source: Path) -> float:
    """A calibration attribute of the data file as a float, held to the rule of the config key
    ``experiment.<name>`` it stands in for (finite; > 0 except for defocus)."""
    array = np.asarray(value)
    fix = f"fix the file or set experiment.{name}"
    if array.size != 1 or array.dtype.kind not in "iuf":
        raise DataError(f"{source}: attribute {name} must be a number, got {array.tolist()!r}; {fix}")
    number = float(array.ravel()[0])
    if not math.isfinite(number):
        raise DataError(f"{source}: attribute {name} must be a finite number, got {number}; {fix}")
    if name != "defocus_A" and number <= 0:
        raise DataError(f"{source}: attribute {name} must be > 0, got {number}; {fix}")
    return number


def raster_positions_A(scan_shape: tuple[int, int], step_A: float, rotation_deg: float = 0.0) -> np.ndarray:
    """(N, 2) raster probe centres (y, x) in Å, slow axis y, row-major, starting at (0, 0),
    rotated by ``rotation_deg`` from the x axis towards the y axis."""
    ny, nx = scan_shape
    y, x = np.meshgrid(np.arange(ny) * step_A, np.arange(nx) * step_A, indexing="ij")
    theta = math.radians(rotation_deg)
    c, s = math.cos(theta), math.sin(theta)
    y, x = x.ravel() * s + y.ravel() * c, x.ravel() * c - y.ravel() * s
    return np.stack([y, x], axis=1)


def _positions(config: Config, exp: dict, info: PatternsInfo, data_path: Path,
               from_file: np.ndarray | None = None) -> np.ndarray:
    """(N, 2) probe centres in Å: a raster; the data file's own positions (CXI translations)
    when it has them and no scan step is given; or a named dataset."""
    spec = config.experiment.positions
    n = info.n_patterns
    if spec == "raster" and from_file is not None and exp["scan_step_A"] is None:
        return np.asarray(from_file, dtype=np.float64)
    if spec == "raster":
        scan_shape = _raster_scan_shape(config, info, data_path)
        if exp["scan_step_A"] is None:
            raise ConfigError("experiment.scan_step_A: needed for raster positions, and the data file has no "
                              "'scan_step_A' attribute")
        return raster_positions_A(scan_shape, exp["scan_step_A"], config.experiment.scan_rotation_deg)
    path = config.resolve_input(spec.path) if spec.path else data_path
    positions = np.asarray(read_hdf5_array(path, spec.key, "experiment.positions.key"), dtype=np.float64)
    if positions.ndim != 2 or positions.shape[1] != 2:
        raise DataError(f"{path}:{spec.key}: positions must be (N, 2) (y, x), found shape {positions.shape}")
    if len(positions) != n:
        raise DataError(f"{path}:{spec.key}: {len(positions)} positions for {n} patterns")
    if not np.isfinite(positions).all():
        raise DataError(f"{path}:{spec.key}: positions contain NaN or Inf")
    return positions


def _raster_scan_shape(config: Config, info: PatternsInfo, data_path: Path) -> tuple[int, int]:
    """[slow, fast] of a raster scan: data.scan_shape, else the 4D patterns' leading axes, else
    the file's 'scan_shape' attribute; it must account for every pattern."""
    n = info.n_patterns
    if config.data.scan_shape:
        scan_shape, origin, hint = tuple(config.data.scan_shape), "data.scan_shape:", ""
    elif info.scan_shape is not None:
        scan_shape, origin, hint = info.scan_shape, f"{data_path}: attribute scan_shape", "; set data.scan_shape"
    elif "scan_shape" in info.attrs:
        raise DataError(f"{data_path}: attribute scan_shape must be two positive integers [slow, fast], got "
                        f"{np.asarray(info.attrs['scan_shape']).tolist()!r}; fix the file or set data.scan_shape")
    else:
        raise ConfigError("data.scan_shape: needed for raster positions with 3D patterns (the data file has no "
                          "'scan_shape' attribute), or read positions from a file with experiment.positions")
    if scan_shape[0] * scan_shape[1] != n:
        error = ConfigError if config.data.scan_shape else DataError
        raise error(f"{origin} {list(scan_shape)} gives {scan_shape[0] * scan_shape[1]} positions but the "
                    f"data has {n} patterns{hint}")
    return scan_shape


def xray_sampling(geometry: str, wavelength_A: float, k: int, distance_m: float | None, pixel_m: float | None,
                  focus_to_sample_m: float | None) -> tuple[float, float | None]:
    """Object pixel (Å) and, in the near field, the effective propagation distance (Å).

    far_field: dx = lambda z / (K p).
    near_field (Fresnel scaling, probe focus z1 before the sample, detector z2 behind it):
    magnification M = (z1 + z2) / z1, dx = p / M, and the detector image is a plane-wave
    Fresnel propagation over z2 / M at that pixel size."""
    if distance_m is None or pixel_m is None:
        raise ConfigError("experiment.detector_distance_m and experiment.detector_pixel_m: needed for X-ray "
                          "data (or experiment.dx_A), and the data file does not give them")
    if geometry == "far_field":
        return wavelength_A * distance_m / (k * pixel_m), None
    if focus_to_sample_m is None:
        raise ConfigError("experiment.focus_to_sample_m: needed for near_field geometry (Fresnel scaling)")
    magnification = (focus_to_sample_m + distance_m) / focus_to_sample_m
    return pixel_m * 1e10 / magnification, distance_m * 1e10 / magnification
