"""HDF5: ptyacc's layout, and any file with one pattern dataset.

The other readers reuse ``open_hdf5``, ``find_patterns``, ``image`` and ``named_positions`` (CXI
and MATLAB v7.3 files are HDF5 files).

The calibration py4DSTEM writes into its EMD 1.0 (HDF5) files, as ptyacc's attributes.

py4DSTEM keeps it in a metadata group named ``calibration`` (under a ``metadatabundle`` group
of the root or of the data cube), one scalar dataset per value: ``Q_pixel_size`` with
``Q_pixel_units`` (the detector pixel: ``A^-1`` or ``nm^-1``) and ``R_pixel_size`` with
``R_pixel_units`` (the scan step: ``A`` or ``nm``). Pixel units (py4DSTEM's default before
calibration) and angles (``mrad``, which need the energy) are not taken: ``ptyacc init`` then
asks for the value."""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np

from ptyacc.data.formats.chunks import copy_rows
from ptyacc.data.formats.common import (
    PatternsInfo,
    Prepare,
    RawPatterns,
    ReadOptions,
    check_file,
    check_patterns,
    scan_shape_4d,
    scan_shape_attribute,
)
from ptyacc.errors import DataError

KIND = "an HDF5 file"
EXTENSIONS = (".h5", ".hdf5", ".hdf", ".nxs", ".emd")
MAGIC = None  # recognised by opening it as HDF5


def open_file(path: Path, options: ReadOptions) -> h5py.File:
    return open_hdf5(path)


def inspect(f: h5py.File, path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    """The pattern dataset (``key``, or 'patterns', or the only 3D/4D numeric dataset), its
    scan shape (4D data, or a root 'scan_shape' attribute), the file's root attributes (after
    py4DSTEM's calibration, ``emd_calibration``), and
    ptyacc's layout's root datasets when present: ``mask`` (ky, kx), non-zero = good pixel;
    ``background`` (ky, kx); ``positions_A`` (N, 2), taken only when it has that shape (a config
    that names it checks it and says what is wrong); and the dataset ``options.positions_key``."""
    dset = find_patterns(f, path, key)
    shape, pattern_shape = tuple(dset.shape), tuple(dset.shape[-2:])
    check_patterns(path, dset.name, shape, dset.dtype)
    scan_shape = scan_shape_4d(shape)
    if scan_shape is None and "scan_shape" in f.attrs:
        scan_shape = scan_shape_attribute(f.attrs["scan_shape"])
    attrs = {**py4dstem_calibration(f), **{k: plain(v) for k, v in f.attrs.items()}}
    mask = image(f, path, "mask", pattern_shape)
    background = image(f, path, "background", pattern_shape)
    positions = f.get("positions_A")
    usable = (isinstance(positions, h5py.Dataset) and positions.shape == (math.prod(shape[:-2]), 2)
              and positions.dtype.kind in "iuf")
    return PatternsInfo(dset.name, shape, scan_shape, attrs, "hdf5", None if mask is None else mask != 0,
                        None if background is None else background.astype(np.float32),
                        positions[()].astype(np.float64) if usable else None, named_positions(f, path, options))


def read(f: h5py.File, path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
         rows: np.ndarray | None) -> RawPatterns:
    """Patterns of ``info.key``, with what ``inspect`` found beside them."""
    patterns = copy_rows(f[info.key], info.shape[-2:], rows, prepare)
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), info.mask, info.background, info.positions_A,
                       "hdf5")


def open_hdf5(path: Path) -> h5py.File:
    check_file(path, KIND)
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise DataError(f"{path}: cannot be read as HDF5 ({exc})") from None


def named_positions(f: h5py.File, path: Path, options: ReadOptions) -> np.ndarray | None:
    """The dataset ``options.positions_key`` as stored (``PatternsInfo.named_positions``), None when not asked for."""
    if options.positions_key is None:
        return None
    return read_array(f, path, options.positions_key, "experiment.positions.key")


def datasets(f: h5py.File) -> list[str]:
    """Every dataset's name, hard links only (a CXI soft link is not listed twice)."""
    names: list[str] = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


def read_array(f: h5py.File, path: Path, key: str, setting: str = "") -> np.ndarray:
    """The whole dataset ``key`` of the open file ``f``, with a message naming file and key when
    there is none (and ``setting``, the config key that chose the dataset)."""
    if key not in f or not isinstance(f[key], h5py.Dataset):
        chosen_by = f" ({setting})" if setting else ""
        raise DataError(f"{path}: no dataset {key!r}{chosen_by}; datasets: {', '.join(datasets(f)) or 'none'}")
    return f[key][()]


def find_patterns(f: h5py.File, path: Path, key: str | None) -> h5py.Dataset:
    """``key``, or 'patterns', or the only 3D/4D numeric dataset."""
    if key is not None:
        if key not in f or not isinstance(f[key], h5py.Dataset):
            raise DataError(f"{path}: no dataset {key!r} (data.key); datasets: {', '.join(datasets(f)) or 'none'}")
        return f[key]
    if "patterns" in f and isinstance(f["patterns"], h5py.Dataset):
        return f["patterns"]
    candidates = [name for name in datasets(f)
                  if f[name].ndim in (3, 4) and f[name].dtype.kind in "iuf" and not name.startswith("#")]
    if len(candidates) == 1:
        return f[candidates[0]]
    if not candidates:
        raise DataError(f"{path}: no 3D or 4D numeric dataset found; set data.key")
    listed = ", ".join(f"{name} {f[name].shape} {f[name].dtype}" for name in candidates)
    raise DataError(f"{path}: several datasets could hold the patterns ({', '.join(candidates)}); set data.key "
                    f"(ptyacc init: --key) to one of: {listed}")


def image(f: h5py.File, path: Path, key: str, pattern_shape: tuple[int, int],
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
    array = dset[()]
    return array.reshape(-1, *pattern_shape).mean(axis=0, dtype=np.float64) if array.ndim > 2 else array


def plain(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


TO_INV_A = {"A^-1": 1.0, "Å^-1": 1.0, "1/A": 1.0, "nm^-1": 0.1, "1/nm": 0.1}
TO_A = {"A": 1.0, "Å": 1.0, "nm": 10.0}
PY4DSTEM_NAMES = {"Q_pixel_size": ("Q_pixel_units", TO_INV_A, "dk_invA"), "R_pixel_size": ("R_pixel_units", TO_A, "scan_step_A")}


def py4dstem_calibration(f: h5py.File) -> dict[str, float]:
    """ptyacc's ``dk_invA`` and ``scan_step_A`` from the first py4DSTEM calibration group in
    ``f`` (none when there is none or its units are pixels or angles)."""
    groups: list[h5py.Group] = []
    f.visititems(lambda name, obj: groups.append(obj) if isinstance(obj, h5py.Group) and name.split("/")[-1] ==
                 "calibration" and "Q_pixel_size" in obj else None)
    if not groups:
        return {}
    found = {}
    for size, (units, scale, key) in PY4DSTEM_NAMES.items():
        value, unit = _scalar(groups[0], size), _text(groups[0], units)
        if value is not None and unit in scale:
            found[key] = value * scale[unit]
    return found


def _scalar(group: h5py.Group, name: str) -> float | None:
    """The number ``name`` of ``group``: one value (py4DSTEM may store a pair of equal ones)."""
    item = group.get(name)
    if not isinstance(item, h5py.Dataset) or item.dtype.kind not in "iuf":
        return None
    values = np.unique(np.atleast_1d(item[()]).astype(np.float64))
    return float(values[0]) if len(values) == 1 and values[0] > 0 else None


def _text(group: h5py.Group, name: str) -> str | None:
    item = group.get(name)
    if not isinstance(item, h5py.Dataset) or item.dtype.kind not in "SOU":
        return None
    value = item[()]
    return value.decode() if isinstance(value, bytes) else str(value)
