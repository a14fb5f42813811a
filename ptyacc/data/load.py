"""Reading the dataset of ``config.data``: the file opened once, what it says about itself
calibrated with the config (``calibration.calibrate``), then the patterns read and prepared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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
    data, (path, named) = config.data, _paths(config)
    options = {"scan_shape": tuple(data.scan_shape)} if data.scan_shape else {}
    arrays = {named[1]: POSITIONS_SETTING} if named is not None and named[0] == path else {}
    with open_patterns(path, data.key, arrays, **options) as source:
        # the file's facts first (read by the opening), the calibration from them, then the patterns
        info, name = source.info, str(source.path)
        positions = None if named is None else (f"{named[0]}:{named[1]}", named[2] if named[2] is not None
                                                else source.arrays[named[1]])
        facts = SourceFacts(name, info.shape, info.attrs, info.positions_A, positions)
        calibration = calibrate(config.experiment, facts, data.scan_shape)
        prep = Preparation.from_config(data.transform, info.shape[-2:], config.experiment.geometry == "far_field",
                                       name, info.attrs)
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


POSITIONS_SETTING = "experiment.positions.key"


def _paths(config: Config) -> tuple[Path, tuple[Path, str, np.ndarray | None] | None]:
    """The data file, and (file, dataset, array) of the positions that ``experiment.positions``
    names (None for raster positions); the array is read here from another file, and None for
    one in the data file itself (read when that opens)."""
    data_path, spec = config.resolve_input(config.data.path), config.experiment.positions
    if spec == "raster":
        return data_path, None
    path = config.resolve_input(spec.path) if spec.path else data_path
    return data_path, (path, spec.key, None if path == data_path else read_hdf5_array(path, spec.key, POSITIONS_SETTING))


def _bright_field_radius_px(source: PatternFile, prepare: Prepare) -> float:
    """Radius (prepared pixels) of the bright-field disk in the mean of an evenly spread sample of
    the prepared patterns (the same on every process)."""
    sample = source.read(sample_rows(source.info.n_patterns), prepare).patterns
    return bright_field_radius_px(np.fft.fftshift(sample.mean(axis=0, dtype=np.float64)), str(source.path))
