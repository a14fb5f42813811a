"""Reading the dataset of ``config.data``, in one line: the file opened once and inspected (what
it says about itself, with the positions ``experiment.positions`` names in it), calibrated with
the config (``calibration.calibrate``), the preparation planned, the patterns read and prepared,
the file closed, the dataset built."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data.bright_field import bright_field_radius_px, sample_rows
from ptyacc.data.calibration import Calibration, SourceFacts, calibrate
from ptyacc.data.dataset import PtychoData, keep_only
from ptyacc.data.formats.common import Prepare
from ptyacc.data.hold import hold_patterns
from ptyacc.data.prepare import Preparation, pattern_preparation
from ptyacc.data.readers import PatternFile, open_patterns, read_hdf5_array
from ptyacc.data.sanity import check_bright_field, check_xray
from ptyacc.data.simulate import simulate_dataset
from ptyacc.errors import DataError

Keep = Callable[[np.ndarray], np.ndarray]
POSITIONS_SETTING = "experiment.positions.key"


def load_data(config: Config, keep: Keep | None = None, device: torch.device | str = "cpu") -> PtychoData:
    """Read or simulate the dataset that ``config.data`` describes, calibrated by
    ``config.experiment`` (values it leaves out come from the file's attributes).
    keep: given all positions (N, 2) in Å, the sorted indices of the patterns to hold
    (the others are never read); default all.
    device: where the run computes; ``data.hold`` chooses from its free memory whether the
    patterns are read now (device) or held in host memory or left in the file (``streamed``)."""
    if config.data.simulate is not None:
        return keep_only(simulate_dataset(config), keep)
    data, experiment = config.data, config.experiment
    path, positions_path = _input_paths(config)
    in_data_file = positions_path == path
    options = {"scan_shape": tuple(data.scan_shape)} if data.scan_shape else {}
    with open_patterns(path, data.key, positions_key=experiment.positions.key if in_data_file else None,
                       **options) as source:
        info, name = source.info, str(source.path)
        named = None
        if positions_path is not None:  # read with the rest when in the data file, else from its own file
            array = info.named_positions if in_data_file else read_hdf5_array(
                positions_path, experiment.positions.key, POSITIONS_SETTING)
            named = f"{positions_path}:{experiment.positions.key}", array
        facts = SourceFacts(name, info.shape, info.attrs, info.positions_A, named)
        calibration = calibrate(experiment, facts, data.scan_shape)
        prep = Preparation.from_config(data.transform, info.shape[-2:], experiment.geometry == "far_field", name,
                                       info.attrs)
        prepare = pattern_preparation(prep, name, data.nonfinite, data.negative,
                                      info.background if data.subtract_background else None)
        mask = prep.mask(info.mask if data.use_mask else None)
        if calibration.stored_dx_A is None:  # experiment.dk_from_bright_field
            radius_px = _bright_field_radius_px(source, prepare) * prep.bin  # binning shrinks the disk
            calibration = calibrate(experiment, facts, data.scan_shape, bright_field_radius_px=radius_px)
        dx_A = prep.object_pixel_A(calibration.stored_dx_A)
        rows = None if keep is None else np.asarray(keep(calibration.positions_A))
        patterns, streamed, choice = hold_patterns(data, source, rows, prepare, device,
                                                   lambda: open_patterns(path, info.key, **options))
        every = patterns if streamed is None and rows is None else None  # all patterns, prepared, in memory
        checks = _checked(config, calibration, dx_A, source, prepare, prep, every) if experiment.check_calibration else ()
    return PtychoData.calibrated(torch.from_numpy(patterns), calibration, dx_A, name, pattern_rows=rows,
                                 mask=None if mask is None else torch.from_numpy(mask),
                                 stored_pattern_shape=tuple(info.shape[-2:]), checks=checks,
                                 hold=choice, streamed=streamed)


def _input_paths(config: Config) -> tuple[Path, Path | None]:
    """The data file, and the file of the positions that ``experiment.positions`` names (the data
    file unless it names another; None for raster positions), resolved like ``data.path``."""
    path = config.resolve_input(config.data.path)
    spec = config.experiment.positions
    if spec == "raster":
        return path, None
    return path, config.resolve_input(spec.path) if spec.path else path


def _checked(config: Config, calibration: Calibration, dx_A: float, source: PatternFile, prepare: Prepare,
             prep: Preparation, every: np.ndarray | None) -> tuple[str, ...]:
    """The physical sanity checks of ``calibration`` against the data (``ptyacc.data.sanity``):
    their lines for run.log, or a ConfigError naming the likely slip. Electrons in the far
    field with a semi-angle: the bright-field disk (skipped, with a line saying why, when the
    mean pattern shows no single disk); X-rays: the scan and the near-field Fresnel number.
    ``every``: all the prepared patterns (N, K, K) when the load holds them, whose sample the
    disk is measured on instead of reading it from the file again; None: read the sample."""
    experiment, k = config.experiment, source.info.shape[-1]
    if experiment.radiation == "xray":
        return tuple(check_xray(calibration.positions_A, dx_A, prep.shape[-1], calibration.wavelength_A,
                                calibration.near_field_distance_A))
    if calibration.semiangle_mrad is None or experiment.dk_from_bright_field or calibration.values.get(
            "energy_eV") is None:
        return ()
    values = dict(calibration.values, dx_A=calibration.stored_dx_A)
    try:
        radius_px = _bright_field_radius_px(source, prepare, every) * prep.bin
    except DataError as exc:
        return (f"calibration check skipped: {str(exc).split('; ')[0]}",)
    return (check_bright_field(values, calibration.sources, k, radius_px, str(source.path)),)


def _bright_field_radius_px(source: PatternFile, prepare: Prepare, every: np.ndarray | None = None) -> float:
    """Radius (prepared pixels) of the bright-field disk in the mean of an evenly spread sample of
    the prepared patterns (the same on every process), taken from ``every`` (all of them, as
    held) or read from ``source``: the same values either way."""
    rows = sample_rows(source.info.n_patterns)
    sample = source.read(rows, prepare).patterns if every is None else every[rows]
    return bright_field_radius_px(np.fft.fftshift(sample.mean(axis=0, dtype=np.float64)), str(source.path))
