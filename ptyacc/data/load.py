"""Reading the dataset of ``config.data``, in one line: the file opened once and inspected (what
it says about itself, with the positions ``experiment.positions`` names in it), calibrated with its
autos measured (``autocalibration.autocalibrate``), the patterns to hold chosen, read and prepared,
the calibration checked against them, the file closed, the dataset built."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data.autocalibration import Judge, autocalibrate
from ptyacc.data.calibration import SourceFacts
from ptyacc.data.dataset import PtychoData, keep_only
from ptyacc.data.flat_field import read_flat_field
from ptyacc.data.hold import hold_patterns
from ptyacc.data.readers import open_patterns, read_hdf5_array
from ptyacc.data.simulate import simulate_dataset
from ptyacc.errors import ConfigError

Keep = Callable[[np.ndarray], np.ndarray]

POSITIONS_SETTING = "experiment.positions.key"


def load_data(config: Config, keep: Keep | None = None, device: torch.device | str = "cpu",
              judge: Judge | None = None) -> PtychoData:
    """Read or simulate the dataset that ``config.data`` describes, calibrated by
    ``config.experiment`` (values it leaves out come from the file's attributes).
    keep: given all positions (N, 2) in Å, the sorted indices of the patterns to hold
    (the others are never read); default all.
    device: where the run computes; ``data.hold`` chooses from its free memory whether the
    patterns are read now (device) or held in host memory or left in the file (``streamed``).
    judge: chooses among the orientations the data leave open (``autocalibration.autocalibrate``)."""
    if config.data.simulate is not None:
        return _simulated(config, keep)
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
        file_mask, gain = info.mask if data.use_mask else None, None
        if data.flat_field is not None:  # its pixels without a usable gain are left out, as bad ones
            gain, usable = read_flat_field(config.resolve_input(data.flat_field), data.flat_field_key, info.shape[-2:])
            file_mask = usable if file_mask is None else np.asarray(file_mask, dtype=bool) & usable
        calibrated = autocalibrate(config, source, SourceFacts(name, info.shape, info.attrs, info.positions_A, named),
                                   file_mask, gain, lambda: open_patterns(path, info.key, **options), judge)
        calibration, mask = calibrated.calibration, calibrated.mask
        rows = None if keep is None else np.asarray(keep(calibration.positions_A))
        patterns, streamed, choice = hold_patterns(data, calibrated.source, rows, calibrated.prepare,
                                                   calibrated.prep.shape, len(calibration.positions_A), device,
                                                   calibrated.reopen)
        every = patterns if streamed is None and rows is None else None  # all patterns, prepared, in memory
        checks = calibrated.checked(every)
    return PtychoData.calibrated(torch.from_numpy(patterns), calibration, calibrated.dx_A, name, pattern_rows=rows,
                                 mask=None if mask is None else torch.from_numpy(mask),
                                 stored_pattern_shape=tuple(info.shape[-2:]), checks=checks,
                                 hold=choice, streamed=streamed, autocalibration=calibrated.found)


def _simulated(config: Config, keep: Keep | None) -> PtychoData:
    """The dataset ``data.simulate`` describes, which has no rotation or defocus to measure."""
    if config.experiment.scan_rotation_deg == "auto":
        raise ConfigError("experiment.scan_rotation_deg: auto measures the rotation in a data file; a data.simulate "
                          "dataset is made with the rotation given (set a number)")
    if config.experiment.defocus_A == "auto":
        raise ConfigError("experiment.defocus_A: auto measures the defocus in a data file; a data.simulate dataset "
                          "is made with the defocus given (set a number)")
    return keep_only(simulate_dataset(config), keep)


def _input_paths(config: Config) -> tuple[Path, Path | None]:
    """The data file, and the file of the positions that ``experiment.positions`` names (the data
    file unless it names another; None for raster positions), resolved like ``data.path``."""
    path = config.resolve_input(config.data.path)
    spec = config.experiment.positions
    if spec == "raster":
        return path, None
    return path, config.resolve_input(spec.path) if spec.path else path
