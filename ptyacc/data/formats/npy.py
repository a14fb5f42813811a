"""NumPy .npy: one array (N, ky, kx) or (slow, fast, ky, kx), no calibration."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np

from ptyacc.data.formats.chunks import copy_rows
from ptyacc.data.formats.common import (
    PatternsInfo,
    Prepare,
    RawPatterns,
    ReadOptions,
    check_file,
    check_patterns,
    no_datasets,
    no_key,
    scan_shape_4d,
)
from ptyacc.errors import DataError

KIND = "a .npy file"
EXTENSIONS = (".npy",)
MAGIC = b"\x93NUMPY"


def open_file(path: Path, options: ReadOptions) -> AbstractContextManager[np.ndarray]:
    """A memory map of the array: only the rows read are read from disk."""
    check_file(path, KIND)
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot be read as a .npy array ({exc})") from None
    if not isinstance(array, np.ndarray):
        array.close()
        raise DataError(f"{path}: expected one .npy array, found an .npz archive; save the patterns with np.save")
    return nullcontext(array)


def inspect(array: np.ndarray, path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    no_key(path, key, KIND)
    check_patterns(path, "", array.shape, array.dtype)
    scan_shape = scan_shape_4d(array.shape)
    attrs = {} if scan_shape is None else {"scan_shape": scan_shape}
    no_datasets(path, options, KIND)
    return PatternsInfo("", tuple(array.shape), scan_shape, attrs, "npy")


def read(array: np.ndarray, path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
         rows: np.ndarray | None) -> RawPatterns:
    patterns = copy_rows(array, info.shape[-2:], rows, prepare)
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), format="npy")
