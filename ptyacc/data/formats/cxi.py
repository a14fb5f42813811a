"""CXI: HDF5 with an entry_1 group, after the cxidb.org conventions (SI units in the file)."""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np

from ptyacc.data.formats import hdf5
from ptyacc.data.formats.chunks import copy_rows
from ptyacc.data.formats.common import PatternsInfo, Prepare, RawPatterns, ReadOptions, check_patterns, scan_shape_4d
from ptyacc.errors import DataError

KIND = "a CXI file"
EXTENSIONS = (".cxi",)
MAGIC = None  # recognised by opening it as HDF5
DATA_KEYS = ("entry_1/instrument_1/detector_1/data", "entry_1/data_1/data")
DETECTOR = "entry_1/instrument_1/detector_1"
SOURCE = "entry_1/instrument_1/source_1"
TRANSLATION_KEYS = ("entry_1/sample_1/geometry_1/translation", "entry_1/data_1/translation")
ELECTRON_VOLT_J = 1.602176634e-19
METRE_IN_A = 1e10


def open_file(path: Path, options: ReadOptions) -> h5py.File:
    return hdf5.open_hdf5(path)


def is_cxi(f: h5py.File) -> bool:
    """An HDF5 file is read as CXI when it has an entry_1 group."""
    return isinstance(f.get("entry_1"), h5py.Group)


def inspect(f: h5py.File, path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    """Patterns at ``key``, else entry_1/instrument_1/detector_1/data, else entry_1/data_1/data;
    calibration from the source and detector groups (SI units in the file):

    - source_1/wavelength (m) -> ``wavelength_A``; source_1/energy (J) -> ``energy_eV``
    - detector_1/distance (m) -> ``detector_distance_m``
    - detector_1/y_pixel_size, x_pixel_size (m) -> ``detector_pixel_m`` (or ``_y_m``, ``_x_m``)
    - detector_1/basis_vectors (3, 2) (m) -> ``detector_basis_vectors_m`` as stored

    and, read with them (see ``RawPatterns``):

    - mask: detector_1/mask (ky, kx), CXI's pixel flags: 0 = good, any bit set = bad
    - background: detector_1/data_dark (one dark frame or a stack, averaged), else
      detector_1/background (ky, kx)
    - positions_A from the sample translations (N, 3) (x, y, z) in m, at
      entry_1/sample_1/geometry_1/translation or entry_1/data_1/translation. CXI moves the
      sample; the probe moves the opposite way over it, so the probe centres are
      ``positions_A = -translation[:, [1, 0]] * 1e10`` ((y, x) in Å)
    - named_positions: the dataset ``options.positions_key``, as stored
    """
    if key is None:
        key = next((k for k in DATA_KEYS if isinstance(f.get(k), h5py.Dataset)), None)
        if key is None:
            raise DataError(f"{path}: CXI file without patterns at {' or '.join(DATA_KEYS)}; set data.key; "
                            f"datasets: {', '.join(hdf5.datasets(f)) or 'none'}")
    dset = hdf5.find_patterns(f, path, key)
    shape, pattern_shape = tuple(dset.shape), tuple(dset.shape[-2:])
    check_patterns(path, dset.name, shape, dset.dtype)
    scan_shape = scan_shape_4d(shape)
    attrs = _calibration(f, path)
    if scan_shape is not None:
        attrs["scan_shape"] = scan_shape
    mask = hdf5.image(f, path, f"{DETECTOR}/mask", pattern_shape)
    background = hdf5.image(f, path, f"{DETECTOR}/data_dark", pattern_shape, average_leading=True)
    if background is None:
        background = hdf5.image(f, path, f"{DETECTOR}/background", pattern_shape)
    return PatternsInfo(dset.name, shape, scan_shape, attrs, "cxi", None if mask is None else mask == 0,
                        None if background is None else background.astype(np.float32),
                        _positions_A(f, path, math.prod(shape[:-2])), hdf5.named_positions(f, path, options))


def read(f: h5py.File, path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
         rows: np.ndarray | None) -> RawPatterns:
    """Patterns, with what ``inspect`` found beside them."""
    patterns = copy_rows(f[info.key], info.shape[-2:], rows, prepare)
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), info.mask, info.background, info.positions_A,
                       "cxi")


def _calibration(f: h5py.File, path: Path) -> dict:
    attrs: dict = {}
    wavelength_m = _number(f, path, f"{SOURCE}/wavelength", "m")
    if wavelength_m is not None:
        attrs["wavelength_A"] = wavelength_m * METRE_IN_A
    energy_J = _number(f, path, f"{SOURCE}/energy", "J")
    if energy_J is not None:
        attrs["energy_eV"] = energy_J / ELECTRON_VOLT_J
    distance_m = _number(f, path, f"{DETECTOR}/distance", "m")
    if distance_m is not None:
        attrs["detector_distance_m"] = distance_m
    pixel_y_m = _number(f, path, f"{DETECTOR}/y_pixel_size", "m")
    pixel_x_m = _number(f, path, f"{DETECTOR}/x_pixel_size", "m")
    if pixel_y_m is not None and pixel_y_m == pixel_x_m:
        attrs["detector_pixel_m"] = pixel_y_m
    else:
        for name, value in (("detector_pixel_y_m", pixel_y_m), ("detector_pixel_x_m", pixel_x_m)):
            if value is not None:
                attrs[name] = value
    basis = f.get(f"{DETECTOR}/basis_vectors")
    if isinstance(basis, h5py.Dataset) and basis.dtype.kind in "iuf":
        attrs["detector_basis_vectors_m"] = _decimal(basis[()])
    return attrs


def _number(f: h5py.File, path: Path, key: str, unit: str) -> float | None:
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


def _positions_A(f: h5py.File, path: Path, n_patterns: int) -> np.ndarray | None:
    key = next((k for k in TRANSLATION_KEYS if k in f), None)
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
