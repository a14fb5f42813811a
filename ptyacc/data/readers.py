"""Readers of pattern files. Each returns float32 patterns (N, K, K), zero frequency at the
centre, plus the file's attributes and scan shape when the file knows them."""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from ptyacc.errors import DataError

CHUNK_BYTES = 64 * 2**20


@dataclass
class RawPatterns:
    patterns: np.ndarray  # (N, K, K) float32, zero frequency at (K/2, K/2)
    scan_shape: tuple[int, int] | None
    attrs: dict = field(default_factory=dict)
    source: str = ""


@dataclass
class PatternsInfo:
    """What an HDF5 pattern dataset holds, without reading it."""

    key: str
    shape: tuple[int, ...]
    scan_shape: tuple[int, int] | None
    attrs: dict

    @property
    def n_patterns(self) -> int:
        return int(np.prod(self.shape[:-2]))


def inspect_hdf5_patterns(path: Path, key: str | None = None) -> PatternsInfo:
    """Find the pattern dataset (``key``, or 'patterns', or the only 3D/4D numeric dataset) and
    report its shape, scan shape (from 4D data or a 'scan_shape' attribute) and the file's attributes."""
    with _open(path) as f:
        dset = _find_patterns(f, path, key)
        if dset.ndim not in (3, 4):
            raise DataError(f"{path}:{dset.name}: expected 3D (N, ky, kx) or 4D (slow, fast, ky, kx) "
                            f"patterns, found shape {dset.shape}")
        if dset.size == 0:
            raise DataError(f"{path}:{dset.name}: is empty (shape {dset.shape})")
        if dset.dtype.kind not in "iuf":
            raise DataError(f"{path}:{dset.name}: pattern values must be real numbers (measured intensities), "
                            f"found dtype {dset.dtype}")
        scan_shape = tuple(int(s) for s in dset.shape[:2]) if dset.ndim == 4 else None
        if scan_shape is None and "scan_shape" in f.attrs:
            scan_shape = _scan_shape_attribute(f.attrs["scan_shape"])
        attrs = {k: _plain(v) for k, v in f.attrs.items()}
        return PatternsInfo(dset.name, tuple(dset.shape), scan_shape, attrs)


def read_hdf5_patterns(path: Path, key: str | None = None,
                       prepare: Callable[[np.ndarray], np.ndarray] | None = None,
                       rows: np.ndarray | None = None) -> RawPatterns:
    """Patterns (n, ky, kx) float32 from an HDF5 file (see ``inspect_hdf5_patterns``), all of
    them or only the sorted pattern indices ``rows``. Read in chunks straight into one float32
    array, so no float64 copy of the data is ever built; ``prepare`` maps each float32 chunk
    (c, ky, kx) to its final form (same shape) as it arrives."""
    info = inspect_hdf5_patterns(path, key)
    with _open(path) as f:
        dset = f[info.key]
        k_y, k_x = dset.shape[-2:]
        per_slow = int(np.prod(dset.shape[1:-2]))  # patterns per index of the first axis
        wanted = np.arange(info.n_patterns) if rows is None else np.asarray(rows)
        patterns = np.empty((len(wanted), k_y, k_x), dtype=np.float32)
        step = max(1, CHUNK_BYTES // max(1, dset.dtype.itemsize * per_slow * k_y * k_x))
        filled = 0
        for start in range(0, dset.shape[0], step):
            lo, hi = start * per_slow, min(start + step, dset.shape[0]) * per_slow
            take = wanted[(wanted >= lo) & (wanted < hi)] - lo
            if len(take) == 0:
                continue
            chunk = dset[start:start + step].reshape(-1, k_y, k_x)
            chunk = chunk[take] if len(take) < len(chunk) else chunk
            out = patterns[filled:filled + len(take)]
            out[...] = chunk
            if prepare is not None:
                out[...] = prepare(out)
            filled += len(take)
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path))


def _open(path: Path) -> h5py.File:
    if path.is_dir():
        raise DataError(f"{path}: is a folder, not an HDF5 file")
    if not path.is_file():
        raise DataError(f"{path}: data file not found")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise DataError(f"{path}: cannot be read as HDF5 ({exc})") from None


def read_hdf5_array(path: Path, key: str, setting: str = "") -> np.ndarray:
    """One whole dataset as a NumPy array, with a message naming file and key on failure
    (and ``setting``, the config key that chose the dataset)."""
    with _open(path) as f:
        if key not in f or not isinstance(f[key], h5py.Dataset):
            chosen_by = f" ({setting})" if setting else ""
            raise DataError(f"{path}: no dataset {key!r}{chosen_by}; datasets: {', '.join(_datasets(f)) or 'none'}")
        return f[key][()]


def _find_patterns(f: h5py.File, path: Path, key: str | None) -> h5py.Dataset:
    if key is not None:
        if key not in f or not isinstance(f[key], h5py.Dataset):
            raise DataError(f"{path}: no dataset {key!r} (data.key); datasets: {', '.join(_datasets(f)) or 'none'}")
        return f[key]
    if "patterns" in f and isinstance(f["patterns"], h5py.Dataset):
        return f["patterns"]
    candidates = [name for name in _datasets(f)
                  if f[name].ndim in (3, 4) and f[name].dtype.kind in "iuf"]
    if len(candidates) == 1:
        return f[candidates[0]]
    if not candidates:
        raise DataError(f"{path}: no 3D or 4D numeric dataset found; set data.key")
    raise DataError(f"{path}: several datasets could hold the patterns ({', '.join(candidates)}); set data.key")


def _scan_shape_attribute(value: object) -> tuple[int, int] | None:
    """A 'scan_shape' attribute as (slow, fast); None unless it is two positive integers."""
    numbers = np.asarray(value).ravel()
    if numbers.size != 2 or numbers.dtype.kind not in "iuf":
        return None
    if (numbers < 1).any() or (numbers != np.round(numbers)).any():
        return None
    return int(numbers[0]), int(numbers[1])


def _datasets(f: h5py.File) -> list[str]:
    names: list[str] = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


def _plain(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value
