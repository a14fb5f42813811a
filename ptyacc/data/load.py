"""Reading the dataset of ``config.data``, in one line: the file opened once and inspected (what
it says about itself, with the positions ``experiment.positions`` names in it), calibrated with
the config (``calibration.calibrate``), the preparation planned, the patterns read and prepared,
the file closed, the dataset built."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data.bright_field import measured_radius_px
from ptyacc.data.calibration import SourceFacts, calibrate
from ptyacc.data.dataset import PtychoData, keep_only
from ptyacc.data.descan import Descanned, measure_descan
from ptyacc.data.detector import good_pixels, measure_bad_pixels
from ptyacc.data.hold import hold_patterns
from ptyacc.data.prepare import Preparation, pattern_preparation
from ptyacc.data.readers import open_patterns, read_hdf5_array
from ptyacc.data.sanity import calibration_checks
from ptyacc.data.simulate import simulate_dataset

Keep = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Measured:
    """What a measurement from the data adds to run.log (``lines``) and results.h5 /detector (``arrays``)."""

    lines: tuple[str, ...] = ()
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

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
        file_mask, bad = info.mask if data.use_mask else None, Measured()
        if data.bad_pixels == "auto":
            file_mask, bad = _without_bad_pixels(data, source, file_mask, len(calibration.positions_A))
        mask = prep.mask(file_mask)
        if calibration.stored_dx_A is None:  # experiment.dk_from_bright_field
            radius_px = measured_radius_px(source, len(calibration.positions_A), prepare) * prep.bin  # binning shrinks the disk
            calibration = calibrate(experiment, facts, data.scan_shape, bright_field_radius_px=radius_px)
        dx_A = prep.object_pixel_A(calibration.stored_dx_A)
        rows = None if keep is None else np.asarray(keep(calibration.positions_A))
        reopen, descan = (lambda: open_patterns(path, info.key, **options)), Measured()
        if data.transform.descan == "auto":
            source, reopen, descan = _descanned(source, calibration.positions_A, prepare, mask, reopen)
        patterns, streamed, choice = hold_patterns(data, source, rows, prepare, shape, len(calibration.positions_A),
                                                   device, reopen)
        every = patterns if streamed is None and rows is None else None  # all patterns, prepared, in memory
        checks = calibration_checks(experiment, calibration, dx_A, source, prepare, prep.bin, shape[-1],
                                    every) if experiment.check_calibration else ()
    return PtychoData.calibrated(torch.from_numpy(patterns), calibration, dx_A, name, pattern_rows=rows,
                                 mask=None if mask is None else torch.from_numpy(mask),
                                 stored_pattern_shape=tuple(info.shape[-2:]),
                                 checks=bad.lines + descan.lines + tuple(checks),
                                 detector={**bad.arrays, **descan.arrays},
                                 hold=choice, streamed=streamed)


def _without_bad_pixels(data, source, file_mask: np.ndarray | None, n_patterns: int) -> tuple[np.ndarray, Measured]:
    """``data.bad_pixels: auto``: the detector mask as stored (``file_mask``, None = all good) less
    the bad pixels found in the data; and what to report."""
    bad, line = measure_bad_pixels(source, n_patterns, source.info.background if data.subtract_background else None)
    return good_pixels(file_mask, bad), Measured((line,), bad.arrays())


def _descanned(source, positions_A: np.ndarray, prepare, mask: np.ndarray | None, reopen):
    """``data.transform.descan: auto``: the file (and the way to open it again) whose patterns come
    shifted back by the descan measured in them, and what to report."""
    descan, line = measure_descan(source, prepare, positions_A, mask)
    arrays = {"descan_px": descan.shifts_px(positions_A), "descan_plane": descan.plane}
    return (Descanned(source, descan, positions_A, mask), lambda: Descanned(reopen(), descan, positions_A, mask),
            Measured((line,), arrays))


def _input_paths(config: Config) -> tuple[Path, Path | None]:
    """The data file, and the file of the positions that ``experiment.positions`` names (the data
    file unless it names another; None for raster positions), resolved like ``data.path``."""
    path = config.resolve_input(config.data.path)
    spec = config.experiment.positions
    if spec == "raster":
        return path, None
    return path, config.resolve_input(spec.path) if spec.path else path
