"""What every pattern file format shares: the records a reader returns, the read options, the
checks of the patterns' shape and type, and the chunked copy into float32 (n, ky, kx)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ptyacc.errors import ConfigError, DataError

CHUNK_BYTES = 64 * 2**20  # the most read and converted at a time (as float32)
MIN_CHUNK_BYTES = 2**20
CHUNKS_AT_LEAST = 32  # the few chunk-sized copies alive at a time cost about a tenth of the result

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
    """

    key: str
    shape: tuple[int, ...]
    scan_shape: tuple[int, int] | None
    attrs: dict
    format: str = "hdf5"
    mask: np.ndarray | None = None
    background: np.ndarray | None = None
    positions_A: np.ndarray | None = None

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
    """

    file_format: str | None = None
    scan_shape: tuple[int, int] | None = None
    detector_shape: tuple[int, int] = (128, 128)
    frame_rows: int | None = None
    mat_transpose: bool = True

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


def copy_rows(source, pattern_shape: tuple[int, int], rows: np.ndarray | None, prepare: Prepare | None,
              frame: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """(n, ky, kx) float32: the patterns ``rows`` of ``source``, or all of them.

    source: (A, [B,] sy, sx) sliceable along its first axis (h5py dataset, memmap, array);
            pattern i is the i-th frame of its leading axes in C order.
    rows:   strictly increasing indices; only the stretches of ``source`` between wanted
            patterns are read, then converted to float32, a chunk at a time: besides the
            result, memory holds a few chunk-sized copies only, each at most CHUNK_BYTES and
            1 / CHUNKS_AT_LEAST of the result (at least MIN_CHUNK_BYTES).
    frame:  maps a block of stored frames (c, sy, sx) to patterns (c, ky, kx) (crop, transpose).
    prepare: maps each float32 chunk (c, ky, kx) to its final form (c, ky', kx') as it arrives;
            called once on an empty chunk (0, ky, kx) first to learn (ky', kx').
    """
    stored = tuple(source.shape[-2:])
    per_first = int(np.prod(source.shape[1:-2]))  # patterns per index of the first axis
    wanted = _checked_rows(rows, source.shape[0] * per_first)
    empty = np.zeros((0, *pattern_shape), dtype=np.float32)
    out_shape = pattern_shape if prepare is None else prepare(empty).shape[1:]
    patterns = np.empty((len(wanted), *out_shape), dtype=np.float32)
    budget = min(CHUNK_BYTES, max(MIN_CHUNK_BYTES, patterns.nbytes // CHUNKS_AT_LEAST))
    per_chunk = max(1, budget // (max(4, source.dtype.itemsize) * stored[0] * stored[1]))  # patterns
    start = 0
    while start < len(wanted):
        first = int(wanted[start])
        row = first // per_first
        if per_chunk >= per_first:  # whole indices of the first axis
            base = row * per_first
            end = int(np.searchsorted(wanted, base + (per_chunk // per_first) * per_first))
            block = source[row:int(wanted[end - 1]) // per_first + 1].reshape(-1, *stored)
        else:  # a stretch of one index of the first axis of a 4D source
            base = first
            end = int(np.searchsorted(wanted, min(first + per_chunk, (row + 1) * per_first)))
            block = source[row, first - row * per_first:int(wanted[end - 1]) - row * per_first + 1]
        take = wanted[start:end] - base
        if len(take) < len(block):
            block = block[take]
        if frame is not None:
            block = frame(block)
        if prepare is None:
            patterns[start:end] = block
        else:
            patterns[start:end] = prepare(block.astype(np.float32, copy=False))
        start = end
    return patterns


def _checked_rows(rows: np.ndarray | None, n: int) -> np.ndarray:
    if rows is None:
        return np.arange(n)
    wanted = np.asarray(rows)
    if wanted.ndim != 1 or (wanted.size and wanted.dtype.kind not in "iu"):
        raise ValueError(f"rows: expected 1-D integer pattern indices, got shape {wanted.shape} dtype {wanted.dtype}")
    wanted = wanted.astype(np.int64)
    if wanted.size and (wanted[0] < 0 or wanted[-1] >= n or (np.diff(wanted) <= 0).any()):
        raise ValueError(f"rows: expected strictly increasing indices in [0, {n}), got {wanted.min()}..{wanted.max()}")
    return wanted


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
