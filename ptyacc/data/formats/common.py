"""What every pattern file format shares: the records a reader returns, the read options and
the checks of the file and of the patterns' shape and type (the chunked copy of the patterns
is ``chunks.copy_rows``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ptyacc.errors import ConfigError, DataError

Prepare = Callable[[np.ndarray], np.ndarray]


@dataclass
class PatternsInfo:
    """What a pattern file holds, without reading the patterns.

    key:        the dataset (HDF5, CXI, MAT v7.3) or variable (MAT v5) read; "" for .npy and EMPAD
    shape:      the patterns' shape as returned: (N, ky, kx) or (slow, fast, ky, kx)
    scan_shape: (slow, fast) when the file knows it
    attrs:      for HDF5, the file's root attributes as they are; for the other formats the
                calibration found in the file, in ptyacc's names: ``energy_eV``, ``wavelength_A``,
                ``detector_distance_m``, ``detector_pixel_m`` (or ``detector_pixel_y_m`` and
                ``detector_pixel_x_m`` when they differ) and ``scan_shape`` when known
    format:     the name of the format in ``ptyacc.data.formats.READERS``
    mask, background, positions_A: what the file says beside the patterns, read with the rest
                of this record (see ``RawPatterns``); None when the file has none
    named_positions: the dataset ``ReadOptions.positions_key`` as stored, whatever its shape (the
                calibration checks it); None when not asked for
    """

    key: str
    shape: tuple[int, ...]
    scan_shape: tuple[int, int] | None
    attrs: dict
    format: str = "hdf5"
    mask: np.ndarray | None = None
    background: np.ndarray | None = None
    positions_A: np.ndarray | None = None
    named_positions: np.ndarray | None = None

    @property
    def n_patterns(self) -> int:
        return int(np.prod(self.shape[:-2]))


@dataclass
class RawPatterns:
    """Patterns as read, and what else the file says about them.

    patterns:    (n, ky, kx) float32 for the rows asked for, zero frequency at the centre as
                 stored (or as ``prepare`` left them)
    scan_shape:  (slow, fast) when the file knows it
    attrs:       as ``PatternsInfo.attrs``
    mask:        (ky, kx) bool, True = good pixel; as stored (not passed through ``prepare``)
    background:  (ky, kx) float32 dark/background counts, not subtracted; as stored
    positions_A: (N, 2) float64 probe centres (y, x) in Å for all N patterns, whatever the rows
    """

    patterns: np.ndarray
    scan_shape: tuple[int, int] | None
    attrs: dict = field(default_factory=dict)
    source: str = ""
    mask: np.ndarray | None = None
    background: np.ndarray | None = None
    positions_A: np.ndarray | None = None
    format: str = "hdf5"


@dataclass(frozen=True)
class ReadOptions:
    """How to read a file beyond what it says itself.

    file_format:    read as this format whatever the extension (a name in ``formats.READERS``)
    scan_shape:     (slow, fast); needed for EMPAD .raw files, which do not store it, unless the
                    name carries it the way EMPAD names files (``scan_x256_y128.raw``: x fast);
                    the other formats take theirs from the file and leave checks to the caller
    detector_shape: (ky, kx) of an EMPAD frame's pixels
    frame_rows:     rows stored per EMPAD frame, pixels plus metadata (default ky + 2)
    mat_transpose:  the .mat variable is MATLAB-ordered (ky, kx, n) or (ky, kx, fast, slow), so
                    that ``data(:, :, n)`` is pattern n; False takes the axes as the file's reader
                    (h5py for v7.3, scipy for v5) gives them, already (n, ky, kx)
    positions_key:  a dataset of probe positions in the same file (``experiment.positions.key``),
                    read by ``inspect`` into ``PatternsInfo.named_positions``; HDF5 formats only
    """

    file_format: str | None = None
    scan_shape: tuple[int, int] | None = None
    detector_shape: tuple[int, int] = (128, 128)
    frame_rows: int | None = None
    mat_transpose: bool = True
    positions_key: str | None = None

    def __post_init__(self) -> None:
        for name in ("scan_shape", "detector_shape"):
            value = getattr(self, name)
            if value is not None and not _two_positive_ints(value):
                raise ConfigError(f"{name}: expected two positive integers, got {value!r}")
            if value is not None:
                object.__setattr__(self, name, (int(value[0]), int(value[1])))
        rows = self.frame_rows
        integer = isinstance(rows, (int, np.integer)) and not isinstance(rows, bool)
        if rows is not None and (not integer or rows < self.detector_shape[0]):
            raise ConfigError(f"frame_rows: expected an integer >= detector_shape[0] = {self.detector_shape[0]}, "
                              f"got {rows!r}")


def check_patterns(path: Path, key: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Patterns must be 3D (N, ky, kx) or 4D (slow, fast, ky, kx), non-empty, real numbers."""
    where = f"{path}:{key}" if key else str(path)
    if len(shape) not in (3, 4):
        raise DataError(f"{where}: expected 3D (N, ky, kx) or 4D (slow, fast, ky, kx) patterns, found shape {shape}")
    if math.prod(shape) == 0:
        raise DataError(f"{where}: is empty (shape {shape})")
    if dtype.kind not in "iuf":
        raise DataError(f"{where}: pattern values must be real numbers (measured intensities), found dtype {dtype}")


def check_file(path: Path, what: str) -> None:
    if path.is_dir():
        raise DataError(f"{path}: is a folder, not {what}")
    if not path.is_file():
        raise DataError(f"{path}: data file not found")


def no_key(path: Path, key: str | None, what: str) -> None:
    if key:
        raise DataError(f"{path}: {what} holds one array, so data.key {key!r} does not apply; leave data.key unset")


def no_datasets(path: Path, options: ReadOptions, what: str) -> None:
    """Only an HDF5 file holds datasets that ``ReadOptions.positions_key`` can name."""
    if options.positions_key is not None:
        raise DataError(f"{path}: {what} holds no HDF5 datasets, so experiment.positions.key "
                        f"{options.positions_key!r} cannot name one in it; give the HDF5 file of the positions "
                        f"with experiment.positions.path")


def scan_shape_4d(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(scan_slow, scan_fast) of 4D patterns (scan_slow, scan_fast, ky, kx); None for 3D."""
    return (int(shape[0]), int(shape[1])) if len(shape) == 4 else None


def scan_shape_attribute(value: object) -> tuple[int, int] | None:
    """A 'scan_shape' attribute as (slow, fast); None unless it is two positive integers."""
    numbers = np.asarray(value).ravel()
    if numbers.size != 2 or numbers.dtype.kind not in "iuf":
        return None
    if (numbers < 1).any() or (numbers != np.round(numbers)).any():
        return None
    return int(numbers[0]), int(numbers[1])


def _two_positive_ints(value: object) -> bool:
    return (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in value))
