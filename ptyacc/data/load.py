"""Reading a measured dataset: patterns, positions and calibration of ``config.data``."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data.calibration import bright_field_radius_px, sample_rows
from ptyacc.data.dataset import PtychoData, keep_only
from ptyacc.data.positions import raster_positions_A
from ptyacc.data.prepare import Preparation, pattern_preparation
from ptyacc.data.readers import PatternFile, PatternsInfo, open_patterns, read_hdf5_array
from ptyacc.data.sampling import object_sampling
from ptyacc.data.simulate import simulate_dataset
from ptyacc.errors import ConfigError, DataError
from ptyacc.physics import wavelength_A

FILE_ATTRIBUTES = ("energy_eV", "semiangle_mrad", "defocus_A", "dk_invA", "dx_A", "scan_step_A")


def load_data(config: Config, keep: Callable[[np.ndarray], np.ndarray] | None = None) -> PtychoData:
    """Read or simulate the dataset that ``config.data`` describes, calibrated by
    ``config.experiment`` (values it leaves out come from the file's attributes).
    keep: given all positions (N, 2) in Å, the sorted indices of the patterns to hold
    (the others are never read); default all."""
    if config.data.simulate is not None:
        return keep_only(simulate_dataset(config), keep)
    path = config.resolve_input(config.data.path)
    options = {"scan_shape": tuple(config.data.scan_shape)} if config.data.scan_shape else {}
    with open_patterns(path, config.data.key, **options) as source:
        return _read(config, source, keep)


def _read(config: Config, source: PatternFile, keep: Callable[[np.ndarray], np.ndarray] | None) -> PtychoData:
    path, info, exp_cfg = source.path, source.info, config.experiment
    far_field = exp_cfg.geometry == "far_field"
    prep = Preparation.from_config(config.data.transform, info.shape[-2:], far_field, str(path), info.attrs)
    exp = _experiment_values(config, info.attrs, path)
    # mask, dark/background and the file's own positions, without reading any pattern
    extras = source.read(rows=np.zeros(0, dtype=np.int64))
    wavelength = _wavelength_A(config, exp, info.attrs, path)
    scan_shape = tuple(config.data.scan_shape) if config.data.scan_shape else info.scan_shape
    positions_A = _positions(config, exp, source, extras.positions_A)
    rows = None if keep is None else np.asarray(keep(positions_A))
    background = extras.background if config.data.subtract_background else None
    prepare = pattern_preparation(prep, str(path), config.data.nonfinite, config.data.negative, background)
    if exp_cfg.dk_from_bright_field:
        dx_A, near_distance = _dx_from_bright_field(exp, wavelength, source, prepare), None
    else:
        stored_dx_A, near_distance = _sampling(config, exp, info.attrs, wavelength, info.shape[-1])
        dx_A = prep.object_pixel_A(stored_dx_A)
    raw = source.read(rows, prepare)
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
    """Object pixel (Å) of the patterns as stored, k pixels wide, and the near-field propagation
    distance (Å), or None for the far field."""
    e = config.experiment
    sampling = object_sampling(k, wavelength, dx_A=exp["dx_A"], dk_invA=exp["dk_invA"], radiation=e.radiation,
                               geometry=e.geometry,
                               detector_distance_m=e.detector_distance_m or attrs.get("detector_distance_m"),
                               detector_pixel_m=e.detector_pixel_m or attrs.get("detector_pixel_m"),
                               focus_to_sample_m=e.focus_to_sample_m)
    return sampling.dx_A, sampling.near_field_distance_A


def _dx_from_bright_field(exp: dict, wavelength: float, source: PatternFile,
                         prepare: Callable[[np.ndarray], np.ndarray]) -> float:
    """Object pixel (Å) of the prepared patterns from the bright-field disk of the mean of an
    evenly spread sample of them (the same on every process)."""
    if exp["semiangle_mrad"] is None:
        raise ConfigError("experiment.semiangle_mrad: needed by experiment.dk_from_bright_field, and the data file "
                          "has no 'semiangle_mrad' attribute")
    sample = source.read(sample_rows(source.info.n_patterns), prepare).patterns
    mean = np.fft.fftshift(sample.mean(axis=0, dtype=np.float64))
    radius_px = bright_field_radius_px(mean, str(source.path))
    return object_sampling(mean.shape[-1], wavelength, disk_radius_px=radius_px,
                           semiangle_mrad=exp["semiangle_mrad"]).dx_A


def _wavelength_A(config: Config, exp: dict, attrs: dict, path: Path) -> float:
    """From experiment.energy_eV, else the file's energy, else the file's wavelength (CXI)."""
    if exp["energy_eV"] is not None:
        return wavelength_A(exp["energy_eV"], config.experiment.radiation)
    if attrs.get("wavelength_A"):
        return float(attrs["wavelength_A"])
    raise ConfigError("experiment.energy_eV: needed, and the data file has no 'energy_eV' attribute (nor a wavelength)")


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


def _positions(config: Config, exp: dict, source: PatternFile, from_file: np.ndarray | None = None) -> np.ndarray:
    """(N, 2) probe centres in Å: a raster; the data file's own positions (CXI translations)
    when it has them and no scan step is given; or a named dataset."""
    spec = config.experiment.positions
    info, data_path = source.info, source.path
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
    setting = "experiment.positions.key"
    positions = source.array(spec.key, setting) if path == data_path else read_hdf5_array(path, spec.key, setting)
    positions = np.asarray(positions, dtype=np.float64)
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
