"""MATLAB .mat: v7.3 files are HDF5 (read in chunks through h5py); v5 files go through scipy,
which loads a variable whole, so a v5 file's pattern variable is loaded once per open file."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import h5py
import numpy as np

from ptyacc.data.formats import hdf5
from ptyacc.data.formats.chunks import copy_rows
from ptyacc.data.formats.common import (
    PatternsInfo,
    Prepare,
    RawPatterns,
    ReadOptions,
    check_file,
    check_patterns,
    no_datasets,
    scan_shape_4d,
)
from ptyacc.errors import DataError

KIND = "a .mat file"
EXTENSIONS = (".mat",)
MAGIC = b"MATLAB"
NUMERIC_CLASSES = ("double", "single", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


class MatV5:
    """A MATLAB v5 file: its variables listed without loading them, a variable loaded once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._loaded: dict[str, np.ndarray] = {}

    def find(self, key: str | None) -> tuple[str, tuple[int, ...], np.dtype]:
        """(name, MATLAB shape, dtype) of the variable ``key``, or of the only 3D/4D numeric one."""
        path, scipy_io = self.path, _scipy_io(self.path)
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
            found = [v for v in variables if len(v[1]) in (3, 4) and v[2] in NUMERIC_CLASSES]
            if not found:
                raise DataError(f"{path}: no 3D or 4D numeric variable found; set data.key; variables: {listing}")
            if len(found) > 1:
                raise DataError(f"{path}: several variables could hold the patterns "
                                f"({', '.join(v[0] for v in found)}); set data.key")
        name, shape, kind = found[0]
        dtype = np.dtype(kind) if kind in NUMERIC_CLASSES else np.dtype(object)  # MATLAB's class names are NumPy's
        return name, tuple(int(s) for s in shape), dtype

    def array(self, key: str) -> np.ndarray:
        """The variable ``key`` as scipy gives it (MATLAB's axes order), loaded on first use."""
        if key not in self._loaded:
            path, scipy_io = self.path, _scipy_io(self.path)
            try:
                array = scipy_io.loadmat(str(path), variable_names=[key])[key]
            except (ValueError, OSError, NotImplementedError, TypeError, KeyError, scipy_io.matlab.MatReadError) as exc:
                raise DataError(f"{path}:{key}: cannot be read as a MATLAB variable ({exc})") from None
            if array.dtype.kind not in "iuf":  # whosmat names a complex variable by its real class
                raise DataError(f"{path}:{key}: pattern values must be real numbers (measured intensities), "
                                f"found dtype {array.dtype}")
            self._loaded[key] = array
        return self._loaded[key]


def open_file(path: Path, options: ReadOptions) -> AbstractContextManager[h5py.File | MatV5]:
    """An HDF5 file (v7.3), else a v5 file."""
    check_file(path, KIND)
    try:
        return h5py.File(path, "r")
    except OSError:
        return nullcontext(MatV5(path))


def inspect(source: h5py.File | MatV5, path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    """The variable ``key``, or the only 3D/4D numeric one, as (N, ky, kx) or (slow, fast, ky, kx)
    (see ``ReadOptions.mat_transpose``: by default MATLAB's (ky, kx, n) gives pattern n =
    ``data(:, :, n)`` with ky its rows, and (ky, kx, fast, slow) keeps MATLAB's scan order)."""
    if isinstance(source, MatV5):
        key, matlab_shape, dtype = source.find(key)
        shape = _matlab_axes(matlab_shape) if options.mat_transpose else matlab_shape
    else:
        dset = hdf5.find_patterns(source, path, key)
        key, shape, dtype = dset.name, tuple(dset.shape), dset.dtype
        if options.mat_transpose and len(shape) >= 2:
            shape = (*shape[:-2], shape[-1], shape[-2])  # h5py shows MATLAB's axes reversed
    check_patterns(path, key, shape, dtype)
    scan_shape = scan_shape_4d(shape)
    attrs = {} if scan_shape is None else {"scan_shape": scan_shape}
    if isinstance(source, MatV5):
        no_datasets(path, options, "a MATLAB v5 .mat file")
        named = None
    else:
        named = hdf5.named_positions(source, path, options)
    return PatternsInfo(key, shape, scan_shape, attrs, "mat", named_positions=named)


def read(source: h5py.File | MatV5, path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
         rows: np.ndarray | None) -> RawPatterns:
    pattern_shape = info.shape[-2:]
    if isinstance(source, MatV5):
        array = source.array(info.key)
        if options.mat_transpose:
            array = array.transpose(*range(array.ndim - 1, 1, -1), 0, 1)
        patterns = copy_rows(array, pattern_shape, rows, prepare)
    else:
        swap = (lambda block: block.transpose(0, 2, 1)) if options.mat_transpose else None
        patterns = copy_rows(source[info.key], pattern_shape, rows, prepare, swap)
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), format="mat")


def _matlab_axes(matlab_shape: tuple[int, ...]) -> tuple[int, ...]:
    """(ky, kx, a, b) -> (b, a, ky, kx): scan axes first, in C order, so MATLAB's linear
    pattern order is kept."""
    return (*matlab_shape[:1:-1], *matlab_shape[:2])


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
