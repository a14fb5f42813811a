"""Pattern file formats: where each one keeps its patterns, mask, dark frames, probe positions
and calibration, and how to copy its patterns chunk by chunk into float32 (n, ky, kx).

``ptyacc.data.readers`` chooses the format of a file and calls the pair of functions here
(``inspect_<format>``, ``read_<format>``); the dataclasses below are what both return.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from ptyacc.errors import ConfigError, DataError

CHUNK_BYTES = 64 * 2**20  # the most read and converted at a time (as float32)
MIN_CHUNK_BYTES = 2**20
CHUNKS_AT_LEAST = 32  # the few chunk-sized copies alive at a time cost about a tenth of the result
FORMATS = ("hdf5", "cxi", "npy", "mat", "empad")
ELECTRON_VOLT_J = 1.602176634e-19
METRE_IN_A = 1e10

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
    format:     one of ``FORMATS``
    """

    key: str
    shape: tuple[int, ...]
    scan_shape: tuple[int, int] | None
    attrs: dict
    format: str = "hdf5"

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

    file_format:    read as this format whatever the extension (one of ``FORMATS``)
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
        if self.file_format is not None and self.file_format not in FORMATS:
            raise ConfigError(f"file_format: must be one of {', '.join(FORMATS)}, got {self.file_format!r}")
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


def _no_key(path: Path, key: str | None, what: str) -> None:
    if key:
        raise DataError(f"{path}: {what} holds one array, so data.key {key!r} does not apply; leave data.key unset")


# --- HDF5 (ptyacc's layout and any file with one pattern dataset)


def open_hdf5(path: Path) -> h5py.File:
    check_file(path, "an HDF5 file")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise DataError(f"{path}: cannot be read as HDF5 ({exc})") from None


def hdf5_datasets(f: h5py.File) -> list[str]:
    """Every dataset's name, hard links only (a CXI soft link is not listed twice)."""
    names: list[str] = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


def find_hdf5_patterns(f: h5py.File, path: Path, key: str | None) -> h5py.Dataset:
    """``key``, or 'patterns', or the only 3D/4D numeric dataset."""
    if key is not None:
        if key not in f or not isinstance(f[key], h5py.Dataset):
            raise DataError(f"{path}: no dataset {key!r} (data.key); datasets: {', '.join(hdf5_datasets(f)) or 'none'}")
        return f[key]
    if "patterns" in f and isinstance(f["patterns"], h5py.Dataset):
        return f["patterns"]
    candidates = [name for name in hdf5_datasets(f)
                  if f[name].ndim in (3, 4) and f[name].dtype.kind in "iuf" and not name.startswith("#")]
    if len(candidates) == 1:
        return f[candidates[0]]
    if not candidates:
        raise DataError(f"{path}: no 3D or 4D numeric dataset found; set data.key")
    raise DataError(f"{path}: several datasets could hold the patterns ({', '.join(candidates)}); set data.key")


def inspect_hdf5(path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    """The pattern dataset (``key``, or 'patterns', or the only 3D/4D numeric dataset), its
    scan shape (4D data, or a root 'scan_shape' attribute) and the file's root attributes."""
    with open_hdf5(path) as f:
        dset = find_hdf5_patterns(f, path, key)
        check_patterns(path, dset.name, dset.shape, dset.dtype)
        scan_shape = _scan_shape_4d(dset.shape)
        if scan_shape is None and "scan_shape" in f.attrs:
            scan_shape = scan_shape_attribute(f.attrs["scan_shape"])
        attrs = {k: plain(v) for k, v in f.attrs.items()}
        return PatternsInfo(dset.name, tuple(dset.shape), scan_shape, attrs, "hdf5")


def read_hdf5(path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
              rows: np.ndarray | None) -> RawPatterns:
    """Patterns of ``info.key``, and ptyacc's layout's root datasets when present: ``mask``
    (ky, kx), non-zero = good pixel; ``background`` (ky, kx); ``positions_A`` (N, 2), taken only
    when it has that shape (a config that names it checks it and says what is wrong)."""
    pattern_shape = info.shape[-2:]
    with open_hdf5(path) as f:
        patterns = copy_rows(f[info.key], pattern_shape, rows, prepare)
        mask = _hdf5_image(f, path, "mask", pattern_shape)
        background = _hdf5_image(f, path, "background", pattern_shape)
        positions = f.get("positions_A")
        usable = (isinstance(positions, h5py.Dataset) and positions.shape == (info.n_patterns, 2)
                  and positions.dtype.kind in "iuf")
        positions_A = positions[()].astype(np.float64) if usable else None
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), None if mask is None else mask != 0,
                       None if background is None else background.astype(np.float32), positions_A, "hdf5")


def _hdf5_image(f: h5py.File, path: Path, key: str, pattern_shape: tuple[int, int],
                average_leading: bool = False) -> np.ndarray | None:
    """The (ky, kx) dataset ``key`` when present (averaged over leading axes when asked), else None."""
    if key not in f:
        return None
    dset = f[key]
    shape = dset.shape if isinstance(dset, h5py.Dataset) else None
    fits = shape is not None and shape[-2:] == tuple(pattern_shape) and (len(shape) == 2 or average_leading)
    if not fits or dset.dtype.kind not in "iufb":
        expected = "(..., ky, kx)" if average_leading else "(ky, kx)"
        raise DataError(f"{path}:{key}: expected a numeric {expected} = {tuple(pattern_shape)} image to match the "
                        f"patterns, found {'a group' if shape is None else f'shape {shape} dtype {dset.dtype}'}")
    image = dset[()]
    return image.reshape(-1, *pattern_shape).mean(axis=0, dtype=np.float64) if image.ndim > 2 else image


def scan_shape_attribute(value: object) -> tuple[int, int] | None:
    """A 'scan_shape' attribute as (slow, fast); None unless it is two positive integers."""
    numbers = np.asarray(value).ravel()
    if numbers.size != 2 or numbers.dtype.kind not in "iuf":
        return None
    if (numbers < 1).any() or (numbers != np.round(numbers)).any():
        return None
    return int(numbers[0]), int(numbers[1])


def plain(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


# --- CXI (HDF5 with an entry_1 group, cxidb.org conventions)

CXI_DATA_KEYS = ("entry_1/instrument_1/detector_1/data", "entry_1/data_1/data")
CXI_DETECTOR = "entry_1/instrument_1/detector_1"
CXI_SOURCE = "entry_1/instrument_1/source_1"
CXI_TRANSLATION_KEYS = ("entry_1/sample_1/geometry_1/translation", "entry_1/data_1/translation")


def inspect_cxi(path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    """Patterns at ``key``, else entry_1/instrument_1/detector_1/data, else entry_1/data_1/data;
    calibration from the source and detector groups (SI units in the file):

    - source_1/wavelength (m) -> ``wavelength_A``; source_1/energy (J) -> ``energy_eV``
    - detector_1/distance (m) -> ``detector_distance_m``
    - detector_1/y_pixel_size, x_pixel_size (m) -> ``detector_pixel_m`` (or ``_y_m``, ``_x_m``)
    - detector_1/basis_vectors (3, 2) (m) -> ``detector_basis_vectors_m`` as stored
    """
    with open_hdf5(path) as f:
        if key is None:
            key = next((k for k in CXI_DATA_KEYS if isinstance(f.get(k), h5py.Dataset)), None)
            if key is None:
                raise DataError(f"{path}: CXI file without patterns at {' or '.join(CXI_DATA_KEYS)}; set data.key; "
                                f"datasets: {', '.join(hdf5_datasets(f)) or 'none'}")
        dset = find_hdf5_patterns(f, path, key)
        check_patterns(path, dset.name, dset.shape, dset.dtype)
        scan_shape = _scan_shape_4d(dset.shape)
        attrs = _cxi_calibration(f, path)
        if scan_shape is not None:
            attrs["scan_shape"] = scan_shape
        return PatternsInfo(dset.name, tuple(dset.shape), scan_shape, attrs, "cxi")


def read_cxi(path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
             rows: np.ndarray | None) -> RawPatterns:
    """Patterns, and when present:

    - mask: detector_1/mask (ky, kx), CXI's pixel flags: 0 = good, any bit set = bad
    - background: detector_1/data_dark (one dark frame or a stack, averaged), else
      detector_1/background (ky, kx)
    - positions_A from the sample translations (N, 3) (x, y, z) in m, at
      entry_1/sample_1/geometry_1/translation or entry_1/data_1/translation. CXI moves the
      sample; the probe moves the opposite way over it, so the probe centres are
      ``positions_A = -translation[:, [1, 0]] * 1e10`` ((y, x) in Å).
    """
    pattern_shape = info.shape[-2:]
    with open_hdf5(path) as f:
        patterns = copy_rows(f[info.key], pattern_shape, rows, prepare)
        mask = _hdf5_image(f, path, f"{CXI_DETECTOR}/mask", pattern_shape)
        background = _hdf5_image(f, path, f"{CXI_DETECTOR}/data_dark", pattern_shape, average_leading=True)
        if background is None:
            background = _hdf5_image(f, path, f"{CXI_DETECTOR}/background", pattern_shape)
        positions_A = _cxi_positions_A(f, path, info.n_patterns)
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), None if mask is None else mask == 0,
                       None if background is None else background.astype(np.float32), positions_A, "cxi")


def is_cxi(path: Path) -> bool:
    with open_hdf5(path) as f:
        return isinstance(f.get("entry_1"), h5py.Group)


def _cxi_calibration(f: h5py.File, path: Path) -> dict:
    attrs: dict = {}
    wavelength_m = _cxi_number(f, path, f"{CXI_SOURCE}/wavelength", "m")
    if wavelength_m is not None:
        attrs["wavelength_A"] = wavelength_m * METRE_IN_A
    energy_J = _cxi_number(f, path, f"{CXI_SOURCE}/energy", "J")
    if energy_J is not None:
        attrs["energy_eV"] = energy_J / ELECTRON_VOLT_J
    distance_m = _cxi_number(f, path, f"{CXI_DETECTOR}/distance", "m")
    if distance_m is not None:
        attrs["detector_distance_m"] = distance_m
    pixel_y_m = _cxi_number(f, path, f"{CXI_DETECTOR}/y_pixel_size", "m")
    pixel_x_m = _cxi_number(f, path, f"{CXI_DETECTOR}/x_pixel_size", "m")
    if pixel_y_m is not None and pixel_y_m == pixel_x_m:
        attrs["detector_pixel_m"] = pixel_y_m
    else:
        for name, value in (("detector_pixel_y_m", pixel_y_m), ("detector_pixel_x_m", pixel_x_m)):
            if value is not None:
                attrs[name] = value
    basis = f.get(f"{CXI_DETECTOR}/basis_vectors")
    if isinstance(basis, h5py.Dataset) and basis.dtype.kind in "iuf":
        attrs["detector_basis_vectors_m"] = _decimal(basis[()])
    return attrs


def _cxi_number(f: h5py.File, path: Path, key: str, unit: str) -> float | None:
    """The positive number at ``key`` (in ``unit``), or None when the file has none."""
    if key not in f:
        return None
    dset = f[key]
    array = np.asarray(dset[()]) if isinstance(dset, h5py.Dataset) else None
    number = float(_decimal(array).ravel()[0]) if array is not None and array.size == 1 and array.dtype.kind in "iuf" else None
    if number is None or not math.isfinite(number) or number <= 0:
        found = "a group" if array is None else repr(array.tolist())
        raise DataError(f"{path}:{key}: expected one positive number in {unit}, found {found}")
    return number


def _decimal(array: np.ndarray) -> np.ndarray:
    """float64 values of a calibration array; float32 ones as their shortest decimal, so that a
    distance stored as float32 1.12 reads as 1.12, not 1.1200000047683716."""
    if array.dtype == np.float32:
        return array.astype(str).astype(np.float64)
    return array.astype(np.float64) if array.dtype.kind in "iuf" else array


def _cxi_positions_A(f: h5py.File, path: Path, n_patterns: int) -> np.ndarray | None:
    key = next((k for k in CXI_TRANSLATION_KEYS if k in f), None)
    if key is None:
        return None
    dset = f[key]
    shape = dset.shape if isinstance(dset, h5py.Dataset) else None
    if shape is None or len(shape) != 2 or shape[0] != n_patterns or shape[1] not in (2, 3) or dset.dtype.kind not in "iuf":
        raise DataError(f"{path}:{key}: expected ({n_patterns}, 3) sample translations (x, y, z) in m, one per "
                        f"pattern, found {'a group' if shape is None else f'shape {shape} dtype {dset.dtype}'}")
    translation_m = dset[()].astype(np.float64)
    if not np.isfinite(translation_m).all():
        raise DataError(f"{path}:{key}: sample translations contain NaN or Inf")
    return -translation_m[:, [1, 0]] * METRE_IN_A


# --- NumPy .npy


def inspect_npy(path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    """A .npy array (N, ky, kx) or (slow, fast, ky, kx); no calibration."""
    _no_key(path, key, "a .npy file")
    array = _load_npy(path)
    check_patterns(path, "", array.shape, array.dtype)
    scan_shape = _scan_shape_4d(array.shape)
    attrs = {} if scan_shape is None else {"scan_shape": scan_shape}
    return PatternsInfo("", tuple(array.shape), scan_shape, attrs, "npy")


def read_npy(path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
             rows: np.ndarray | None) -> RawPatterns:
    """Patterns through a memory map: only the rows asked for are read from disk."""
    patterns = copy_rows(_load_npy(path), info.shape[-2:], rows, prepare)
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), format="npy")


def _load_npy(path: Path) -> np.ndarray:
    check_file(path, "a .npy file")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot be read as a .npy array ({exc})") from None
    if not isinstance(array, np.ndarray):
        array.close()
        raise DataError(f"{path}: expected one .npy array, found an .npz archive; save the patterns with np.save")
    return array


# --- MATLAB .mat (v7.3 is HDF5; v5 through scipy)


def inspect_mat(path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    """The variable ``key``, or the only 3D/4D numeric one, as (N, ky, kx) or (slow, fast, ky, kx)
    (see ``ReadOptions.mat_transpose``: by default MATLAB's (ky, kx, n) gives pattern n =
    ``data(:, :, n)`` with ky its rows, and (ky, kx, fast, slow) keeps MATLAB's scan order)."""
    check_file(path, "a .mat file")
    if h5py.is_hdf5(path):
        with open_hdf5(path) as f:
            dset = find_hdf5_patterns(f, path, key)
            key, shape, dtype = dset.name, tuple(dset.shape), dset.dtype
        if options.mat_transpose and len(shape) >= 2:
            shape = (*shape[:-2], shape[-1], shape[-2])  # h5py shows MATLAB's axes reversed
    else:
        key, matlab_shape, dtype = _find_mat_v5_variable(path, key)
        shape = _matlab_axes(matlab_shape) if options.mat_transpose else matlab_shape
    check_patterns(path, key, shape, dtype)
    scan_shape = _scan_shape_4d(shape)
    attrs = {} if scan_shape is None else {"scan_shape": scan_shape}
    return PatternsInfo(key, shape, scan_shape, attrs, "mat")


def read_mat(path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
             rows: np.ndarray | None) -> RawPatterns:
    """Patterns; a v7.3 file is read in chunks, a v5 file's variable is loaded whole."""
    pattern_shape = info.shape[-2:]
    if h5py.is_hdf5(path):
        swap = (lambda block: block.transpose(0, 2, 1)) if options.mat_transpose else None
        with open_hdf5(path) as f:
            patterns = copy_rows(f[info.key], pattern_shape, rows, prepare, swap)
    else:
        array = _load_mat_v5(path, info.key)
        if options.mat_transpose:
            array = array.transpose(*range(array.ndim - 1, 1, -1), 0, 1)
        patterns = copy_rows(array, pattern_shape, rows, prepare)
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), format="mat")


def _matlab_axes(matlab_shape: tuple[int, ...]) -> tuple[int, ...]:
    """(ky, kx, a, b) -> (b, a, ky, kx): scan axes first, in C order, so MATLAB's linear
    pattern order is kept."""
    return (*matlab_shape[:1:-1], *matlab_shape[:2])


MAT_NUMERIC_CLASSES = ("double", "single", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def _scipy_io(path: Path):
    try:
        import scipy.io  # optional: only MATLAB v5 files need it
    except ImportError:
        with open(path, "rb") as f:
            header = f.read(19)
        if header != b"MATLAB 5.0 MAT-file":
            raise DataError(f"{path}: cannot be read as a MATLAB .mat file (neither HDF5, as v7.3 is, nor starting "
                            f"'MATLAB 5.0 MAT-file', found {header!r})") from None
        raise DataError(f"{path}: is a MATLAB v5 .mat file, which needs scipy to read: pip install scipy "
                        "(or save it from MATLAB with save(..., '-v7.3'))") from None
    return scipy.io


def _find_mat_v5_variable(path: Path, key: str | None) -> tuple[str, tuple[int, ...], np.dtype]:
    """(name, MATLAB shape, dtype) of the pattern variable, without loading it."""
    scipy_io = _scipy_io(path)
    try:
        variables = scipy_io.whosmat(str(path))
    except (ValueError, OSError, NotImplementedError, TypeError, scipy_io.matlab.MatReadError) as exc:
        raise DataError(f"{path}: cannot be read as a MATLAB .mat file ({exc})") from None
    listing = ", ".join(f"{name} {list(shape)} {kind}" for name, shape, kind in variables) or "none"
    if key is not None:
        found = [v for v in variables if v[0] == key]
        if not found:
            raise DataError(f"{path}: no variable {key!r} (data.key); variables: {listing}")
    else:
        found = [v for v in variables if len(v[1]) in (3, 4) and v[2] in MAT_NUMERIC_CLASSES]
        if not found:
            raise DataError(f"{path}: no 3D or 4D numeric variable found; set data.key; variables: {listing}")
        if len(found) > 1:
            raise DataError(f"{path}: several variables could hold the patterns "
                            f"({', '.join(v[0] for v in found)}); set data.key")
    name, shape, kind = found[0]
    dtype = np.dtype(kind) if kind in MAT_NUMERIC_CLASSES else np.dtype(object)  # MATLAB's class names are NumPy's
    return name, tuple(int(s) for s in shape), dtype


def _load_mat_v5(path: Path, key: str) -> np.ndarray:
    scipy_io = _scipy_io(path)
    try:
        array = scipy_io.loadmat(str(path), variable_names=[key])[key]
    except (ValueError, OSError, NotImplementedError, TypeError, KeyError, scipy_io.matlab.MatReadError) as exc:
        raise DataError(f"{path}:{key}: cannot be read as a MATLAB variable ({exc})") from None
    if array.dtype.kind not in "iuf":  # whosmat names a complex variable by its real class
        raise DataError(f"{path}:{key}: pattern values must be real numbers (measured intensities), found dtype {array.dtype}")
    return array


# --- EMPAD .raw (headerless frames of float32, two metadata rows each)

EMPAD_NAME = re.compile(r"_x(\d+)_y(\d+)")


def inspect_empad(path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    """(N, ky, kx) with N = slow * fast, from ``options.scan_shape`` or a name like
    ``scan_x256_y128.raw`` (x fast, y slow); the file size must be N frames exactly."""
    _no_key(path, key, "an EMPAD .raw file")
    check_file(path, "an EMPAD .raw file")
    k_y, k_x = options.detector_shape
    frame_rows = options.frame_rows or k_y + 2
    scan_shape = options.scan_shape or _empad_name_scan_shape(path)
    if scan_shape is None:
        raise DataError(f"{path}: an EMPAD .raw file does not store its scan shape and its name has no _x<fast>_y<slow>; "
                        "set data.scan_shape (convert: --scan-shape SLOW FAST)")
    frame_bytes = frame_rows * k_x * 4
    n = scan_shape[0] * scan_shape[1]
    found = path.stat().st_size
    if found != n * frame_bytes:
        holds = f" (the size of {found / frame_bytes:g} frames)" if found else ""
        raise DataError(f"{path}: expected {n * frame_bytes} bytes = {n} frames (scan_shape {list(scan_shape)}) of "
                        f"{frame_rows} x {k_x} float32 (detector_shape {list(options.detector_shape)}, frame_rows "
                        f"{frame_rows}), found {found} bytes{holds}")
    return PatternsInfo("", (n, k_y, k_x), tuple(scan_shape), {"scan_shape": tuple(scan_shape)}, "empad")


def read_empad(path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
               rows: np.ndarray | None) -> RawPatterns:
    """Patterns through a memory map, the metadata rows below each frame cut off."""
    k_y, k_x = info.shape[-2:]
    frame_rows = options.frame_rows or k_y + 2
    frames = np.memmap(path, dtype="<f4", mode="r", shape=(info.n_patterns, frame_rows, k_x))
    patterns = copy_rows(frames, (k_y, k_x), rows, prepare, lambda block: block[:, :k_y])
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), format="empad")


def _empad_name_scan_shape(path: Path) -> tuple[int, int] | None:
    match = EMPAD_NAME.search(path.stem)
    if match is None or min(int(match[1]), int(match[2])) < 1:
        return None
    return int(match[2]), int(match[1])


def _two_positive_ints(value: object) -> bool:
    return (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in value))


def _scan_shape_4d(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(scan_slow, scan_fast) of 4D patterns (scan_slow, scan_fast, ky, kx); None for 3D."""
    return (int(shape[0]), int(shape[1])) if len(shape) == 4 else None
