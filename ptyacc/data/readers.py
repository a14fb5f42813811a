"""One way in for every pattern file: ``inspect_patterns`` says what a file holds,
``read_patterns`` reads it as float32 (n, ky, kx), zero frequency at the centre as stored, with
the file's mask, dark frames, probe positions and calibration. The format is chosen by the
extension (.cxi, .npy, .mat, .raw = EMPAD), else by the content (NumPy, MATLAB or HDF5 header;
HDF5 with an entry_1 group is CXI); ``ptyacc.data.formats`` knows each format."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np

from ptyacc.data import formats
from ptyacc.data.formats import FORMATS, PatternsInfo, RawPatterns, ReadOptions
from ptyacc.errors import DataError

__all__ = ["FORMATS", "PatternsInfo", "RawPatterns", "ReadOptions", "detect_format", "inspect_patterns",
           "read_hdf5_array", "read_inspected", "read_patterns"]

EXTENSIONS = {".cxi": "cxi", ".npy": "npy", ".mat": "mat", ".raw": "empad",
              ".h5": "hdf5", ".hdf5": "hdf5", ".hdf": "hdf5", ".nxs": "hdf5", ".emd": "hdf5"}
FILE_KINDS = {"hdf5": "an HDF5 file", "cxi": "a CXI file", "npy": "a .npy file", "mat": "a .mat file",
              "empad": "an EMPAD .raw file"}

READERS = {
    "hdf5": (formats.inspect_hdf5, formats.read_hdf5),
    "cxi": (formats.inspect_cxi, formats.read_cxi),
    "npy": (formats.inspect_npy, formats.read_npy),
    "mat": (formats.inspect_mat, formats.read_mat),
    "empad": (formats.inspect_empad, formats.read_empad),
}


def inspect_patterns(path: Path, key: str | None = None, **options) -> PatternsInfo:
    """What the pattern file ``path`` holds, without reading the patterns: the dataset or
    variable ``key`` (default: found from the format), shape, scan shape, calibration in
    ptyacc's names and the format. ``options`` are the fields of ``ReadOptions``."""
    path = Path(path)
    read_options = ReadOptions(**options)
    inspect, _ = READERS[detect_format(path, read_options.file_format)]
    return inspect(path, key, read_options)


def read_patterns(path: Path, key: str | None = None, prepare: Callable[[np.ndarray], np.ndarray] | None = None,
                  rows: np.ndarray | None = None, **options) -> RawPatterns:
    """Patterns (n, ky, kx) float32 of the file ``path`` (see ``inspect_patterns``), all of them or
    only the strictly increasing pattern indices ``rows``, whose neighbours are not read;
    ``rows=[]`` reads none and still returns the mask, background and positions. Read in
    chunks straight into one float32 array; ``prepare`` maps each float32 chunk (c, ky, kx) to
    its final form (same shape) as it arrives. Mask and background come back as stored: give
    them the same orientation fix as the patterns."""
    return read_inspected(path, inspect_patterns(path, key, **options), prepare, rows, **options)


def read_inspected(path: Path, info: PatternsInfo, prepare: Callable[[np.ndarray], np.ndarray] | None = None,
                   rows: np.ndarray | None = None, **options) -> RawPatterns:
    """``read_patterns`` for a file already inspected (``info`` from ``inspect_patterns`` with
    the same ``options``): no second format detection or inspection, for callers that read
    one file several times (a sample, then all patterns; batch after batch)."""
    _, read = READERS[info.format]
    return read(Path(path), info, ReadOptions(**options), prepare, rows)


def detect_format(path: Path, file_format: str | None = None) -> str:
    """The format of ``path``: ``file_format`` when given, else by extension, else by content."""
    by_extension = file_format or EXTENSIONS.get(path.suffix.lower())
    formats.check_file(path, FILE_KINDS.get(by_extension, FILE_KINDS["hdf5"]))
    if file_format is not None:
        return file_format
    if by_extension in ("hdf5", None) and h5py.is_hdf5(path):
        return "cxi" if formats.is_cxi(path) else "hdf5"
    if by_extension is not None:
        return by_extension
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"MATLAB"):
        return "mat"
    raise DataError(f"{path}: unknown pattern file format: expected HDF5/CXI, NumPy .npy or MATLAB .mat content, or "
                    f"the extension .raw for EMPAD, found extension {path.suffix or '(none)'!r} and content starting "
                    f"{head[:8]!r}; name the format with file_format ({', '.join(FORMATS)})")


def read_hdf5_array(path: Path, key: str, setting: str = "") -> np.ndarray:
    """One whole dataset as a NumPy array, with a message naming file and key on failure
    (and ``setting``, the config key that chose the dataset)."""
    with formats.open_hdf5(path) as f:
        if key not in f or not isinstance(f[key], h5py.Dataset):
            chosen_by = f" ({setting})" if setting else ""
            datasets = ", ".join(formats.hdf5_datasets(f)) or "none"
            raise DataError(f"{path}: no dataset {key!r}{chosen_by}; datasets: {datasets}")
        return f[key][()]
