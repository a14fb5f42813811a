"""Reading the dataset of ``config.data``: the file opened once, what it says about itself
calibrated with the config (``calibration.calibrate``), then the patterns read and prepared."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data.bright_field import bright_field_radius_px, sample_rows
from ptyacc.data.calibration import SourceFacts, calibrate
from ptyacc.data.dataset import PtychoData, keep_only
from ptyacc.data.formats.common import Prepare
from ptyacc.data.prepare import Preparation, pattern_preparation
from ptyacc.data.readers import PatternFile, open_patterns, read_hdf5_array
from ptyacc.data.simulate import simulate_dataset

Keep = Callable[[np.ndarray], np.ndarray]


def load_data(config: Config, keep: Keep | None = None) -> PtychoData:
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


def _read(config: Config, source: PatternFile, keep: Keep | None) -> PtychoData:
    """The dataset of the open file ``source``: calibration first, then the patterns ``keep`` selects."""
    info, data, name = source.info, config.data, str(source.path)
    facts = SourceFacts(name, info.shape, info.attrs, info.positions_A, _named_positions(config, source))
    calibration = calibrate(config.experiment, facts, data.scan_shape)
    prep = Preparation.from_config(data.transform, info.shape[-2:], config.experiment.geometry == "far_field", name,
                                   info.attrs)
    prepare = pattern_preparation(prep, name, data.nonfinite, data.negative,
                                  info.background if data.subtract_background else None)
    if calibration.stored_dx_A is None:  # experiment.dk_from_bright_field
        radius_px = _bright_field_radius_px(source, prepare) * prep.bin  # binning shrinks the disk
        calibration = calibrate(config.experiment, facts, data.scan_shape, bright_field_radius_px=radius_px)
    rows = None if keep is None else np.asarray(keep(calibration.positions_A))
    mask = prep.mask(info.mask if data.use_mask else None)
    return PtychoData.calibrated(torch.from_numpy(source.read(rows, prepare).patterns), calibration,
                                 prep.object_pixel_A(calibration.stored_dx_A), name, pattern_rows=rows,
                                 mask=None if mask is None else torch.from_numpy(mask),
                                 stored_pattern_shape=tuple(info.shape[-2:]))


def _named_positions(config: Config, source: PatternFile) -> tuple[str, np.ndarray] | None:
    """The dataset that ``experiment.positions`` names (in the data file unless it names
    another), as read, and where; None for raster positions."""
    spec = config.experiment.positions
    if spec == "raster":
        return None
    path = config.resolve_input(spec.path) if spec.path else source.path
    setting = "experiment.positions.key"
    array = source.array(spec.key, setting) if path == source.path else read_hdf5_array(path, spec.key, setting)
    return f"{path}:{spec.key}", array


def _bright_field_radius_px(source: PatternFile, prepare: Prepare) -> float:
    """Radius (prepared pixels) of the bright-field disk in the mean of an evenly spread sample of
    the prepared patterns (the same on every process)."""
    sample = source.read(sample_rows(source.info.n_patterns), prepare).patterns
    return bright_field_radius_px(np.fft.fftshift(sample.mean(axis=0, dtype=np.float64)), str(source.path))
