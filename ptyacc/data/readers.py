"""One way in for every pattern file: ``open_patterns`` opens a file once and says what it holds;
its ``read`` gives float32 (n, ky, kx) patterns, zero frequency at the centre as stored, with the
file's mask, dark frames, probe positions and calibration, as often as asked. The format is
chosen by the extension, else by the content (HDF5 opened as such, with an entry_1 group: CXI;
NumPy or MATLAB header); ``ptyacc.data.formats`` has one module per format."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from types import ModuleType

import h5py
import numpy as np

from ptyacc.data.formats import READERS, PatternsInfo, RawPatterns, ReadOptions, cxi, hdf5
from ptyacc.data.formats.common import check_file
from ptyacc.errors import ConfigError, DataError

__all__ = ["PatternFile", "PatternsInfo", "RawPatterns", "ReadOptions", "inspect_patterns", "open_patterns",
           "read_hdf5_array", "read_patterns"]

EXTENSION_FORMATS = {extension: name for name, reader in READERS.items() for extension in reader.EXTENSIONS}
Prepare = Callable[[np.ndarray], np.ndarray]


class PatternFile(AbstractContextManager):
    """A pattern file held open from ``open_patterns`` until ``close`` (or the end of a ``with``
    block, which it enters as itself). ``info`` says what it holds; ``read`` reads its patterns,
    all or some, as often as asked; ``array`` reads another dataset of the same HDF5 file."""

    def __init__(self, path: Path, key: str | None = None, **options) -> None:
        """``path`` opened once and inspected; see ``open_patterns``."""
        self.path, self._stack = Path(path), ExitStack()
        try:
            self._reader, self._opened, self._options = _open(self.path, options, self._stack)
            self.info: PatternsInfo = self._reader.inspect(self._opened, self.path, key, self._options)
        except BaseException:
            self._stack.close()
            raise

    def read(self, rows: np.ndarray | None = None, prepare: Prepare | None = None) -> RawPatterns:
        """Patterns (n, ky, kx) float32, all of them or only the strictly increasing pattern
        indices ``rows``, whose neighbours are not read; ``rows=[]`` reads none and still returns
        the mask, background and positions. Read in chunks straight into one float32 array;
        ``prepare`` maps each float32 chunk (c, ky, kx) to its final form as it arrives. Mask and
        background come back as stored: give them the same orientation fix as the patterns."""
        return self._reader.read(self._opened, self.path, self.info, self._options, prepare, rows)

    def array(self, key: str, setting: str = "") -> np.ndarray:
        """The whole dataset ``key`` of this file (HDF5 formats), named by the config key ``setting``."""
        if isinstance(self._opened, h5py.File):
            return hdf5.read_array(self._opened, self.path, key, setting)
        return read_hdf5_array(self.path, key, setting)  # not HDF5: says so

    def stored_chunks(self) -> tuple[int, bool] | None:
        """(patterns per stored chunk, whether the chunks are compressed) of the patterns of an
        HDF5-based file (HDF5, CXI, MAT v7.3) stored in chunks; None for any other file."""
        if not isinstance(self._opened, h5py.File) or self.info.key not in self._opened:
            return None
        dataset = self._opened[self.info.key]
        if not isinstance(dataset, h5py.Dataset) or dataset.chunks is None:
            return None
        return int(np.prod(dataset.chunks[:-2])), dataset.compression is not None

    def close(self) -> None:
        self._stack.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_patterns(path: Path, key: str | None = None, **options) -> PatternFile:
    """The pattern file ``path``, opened once and inspected: the dataset or variable ``key``
    (default: found from the format), shape, scan shape, calibration in ptyacc's names and the
    format, without reading the patterns. ``options`` are the fields of ``ReadOptions``."""
    return PatternFile(path, key, **options)


def inspect_patterns(path: Path, key: str | None = None, **options) -> PatternsInfo:
    """What the pattern file ``path`` holds (see ``open_patterns``), the file closed again."""
    with open_patterns(path, key, **options) as source:
        return source.info


def read_patterns(path: Path, key: str | None = None, prepare: Prepare | None = None,
                  rows: np.ndarray | None = None, **options) -> RawPatterns:
    """The patterns ``rows`` (default all) of the file ``path``; see ``PatternFile.read``."""
    with open_patterns(path, key, **options) as source:
        return source.read(rows, prepare)


def read_hdf5_array(path: Path, key: str, setting: str = "") -> np.ndarray:
    """One whole dataset as a NumPy array, with a message naming file and key on failure
    (and ``setting``, the config key that chose the dataset)."""
    with hdf5.open_hdf5(path) as f:
        return hdf5.read_array(f, path, key, setting)


def _open(path: Path, options: dict, stack: ExitStack) -> tuple[ModuleType, object, ReadOptions]:
    """(format module, open file on ``stack``, ``ReadOptions(**options)``): the format is
    ``file_format`` when given, else by extension, else by content."""
    read_options = ReadOptions(**options)
    if read_options.file_format is not None and read_options.file_format not in READERS:
        raise ConfigError(f"file_format: must be one of {', '.join(READERS)}, got {read_options.file_format!r}")
    by_extension = read_options.file_format or EXTENSION_FORMATS.get(path.suffix.lower())
    check_file(path, READERS[by_extension or "hdf5"].KIND)
    if read_options.file_format is None and by_extension in ("hdf5", None):
        try:
            f = stack.enter_context(h5py.File(path, "r"))
        except OSError as exc:
            if by_extension == "hdf5":
                raise DataError(f"{path}: cannot be read as HDF5 ({exc})") from None
        else:
            return (cxi if cxi.is_cxi(f) else hdf5), f, read_options
    reader = READERS[by_extension or _format_from_content(path)]
    return reader, stack.enter_context(reader.open_file(path, read_options)), read_options


def _format_from_content(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(16)
    found = next((name for name, reader in READERS.items() if reader.MAGIC and head.startswith(reader.MAGIC)), None)
    if found is None:
        raise DataError(f"{path}: unknown pattern file format: expected HDF5/CXI, NumPy .npy or MATLAB .mat content, "
                        f"or the extension .raw for EMPAD, found extension {path.suffix or '(none)'!r} and content "
                        f"starting {head[:8]!r}; name the format with file_format ({', '.join(READERS)})")
    return found
