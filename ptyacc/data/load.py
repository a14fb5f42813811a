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
from ptyacc.data.bright_field import measured_radius_px
from ptyacc.data.calibration import SourceFacts, calibrate
from ptyacc.data.dataset import PtychoData, keep_only
from ptyacc.data.detector import good_pixels, measure_bad_pixels
from ptyacc.data.hold import hold_patterns
from ptyacc.data.prepare import Preparation, pattern_preparation
from ptyacc.data.readers import open_patterns, read_hdf5_array
from ptyacc.data.sanity import calibration_checks
from ptyacc.data.simulate import simulate_dataset

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
        shape = prep.shape
        prepare = pattern_preparation(prep, name, data.nonfinite, data.negative,
                                      info.background if data.subtract_background else None)
        file_mask, bad, found = info.mask if data.use_mask else None, None, ()
        if data.bad_pixels == "auto":
            bad, line = measure_bad_pixels(source, len(calibration.positions_A),
                                           info.background if data.subtract_background else None)
            file_mask, found = good_pixels(file_mask, bad), (line,)
        mask = prep.mask(file_mask)
        if calibration.stored_dx_A is None:  # experiment.dk_from_bright_field
            radius_px = measured_radius_px(source, len(calibration.positions_A), prepare) * prep.bin  # binning shrinks the disk
            calibration = calibrate(experiment, facts, data.scan_shape, bright_field_radius_px=radius_px)
        dx_A = prep.object_pixel_A(calibration.stored_dx_A)
        rows = None if keep is None else np.asarray(keep(calibration.positions_A))
        patterns, streamed, choice = hold_patterns(data, source, rows, prepare, shape, len(calibration.positions_A),
                                                   device, lambda: open_patterns(path, info.key, **options))
        every = patterns if streamed is None and rows is None else None  # all patterns, prepared, in memory
        checks = calibration_checks(experiment, calibration, dx_A, source, prepare, prep.bin, shape[-1],
                                    every) if experiment.check_calibration else ()
    return PtychoData.calibrated(torch.from_numpy(patterns), calibration, dx_A, name, pattern_rows=rows,
                                 mask=None if mask is None else torch.from_numpy(mask),
                                 stored_pattern_shape=tuple(info.shape[-2:]), checks=found + tuple(checks),
                                 detector={} if bad is None else bad.arrays(),
                                 hold=choice, streamed=streamed)


def _input_paths(config: Config) -> tuple[Path, Path | None]:
    """The data file, and the file of the positions that ``experiment.positions`` names (the data
    file unless it names another; None for raster positions), resolved like ``data.path``."""
    path = config.resolve_input(config.data.path)
    spec = config.experiment.positions
    if spec == "raster":
        return path, None
    return path, config.resolve_input(spec.path) if spec.path else path
