"""A probe read from a file (``model.probe_init``): .npy, HDF5/CXI (ptyacc's results.h5 too), or
MATLAB .mat (PtychoShelves' ``probe``), as complex modes (M, Ky, Kx) with the pixel the file gives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from ptyacc.errors import DataError

HDF5_KEYS = ("probe", "entry_1/instrument_1/source_1/probe", "entry_1/data_1/probe", "entry/instrument/source/probe",
             "entry/data/probe", "entry_1/instrument_1/source_1/illumination")
METRE_IN_A = 1e10


@dataclass(frozen=True)
class ProbeFile:
    modes: np.ndarray          # (M, Ky, Kx) complex128, as stored (no scaling)
    pixel_m: float | None      # the probe's pixel the file gives, None when it gives none
    where: str                 # "path:key" for messages and run.log


def read_probe(path: Path, key: str | None = None) -> ProbeFile:
    """The probe in ``path`` (at ``key``, else the format's usual place), modes first."""
    if not path.is_file():
        raise DataError(f"model.probe_init.path: {path} does not exist")
    if path.suffix.lower() == ".npy":
        return ProbeFile(_modes(np.load(path), f"{path}"), None, str(path))
    if path.suffix.lower() == ".mat":
        return _read_mat(path, key)
    try:
        f = h5py.File(path, "r")
    except OSError:
        raise DataError(f"{path}: cannot be read as a probe file (.npy, HDF5/CXI or .mat)") from None
    with f:
        key = key or next((k for k in HDF5_KEYS if isinstance(f.get(k), h5py.Dataset)), None)
        if key is None or not isinstance(f.get(key), h5py.Dataset):
            raise DataError(f"{path}: no probe at {key or ' or '.join(HDF5_KEYS)}; set model.probe_init.key")
        dset = f[key]
        pixel_A = dset.attrs.get("dx_A", f.attrs.get("dx_A") if key == "probe" else None)
        pixel_m = dset.attrs.get("pixel_m", None if pixel_A is None else float(pixel_A) / METRE_IN_A)
        return ProbeFile(_modes(_complex(dset[()], f"{path}:{key}"), f"{path}:{key}"),
                         None if pixel_m is None else float(pixel_m), f"{path}:{key}")


def _read_mat(path: Path, key: str | None) -> ProbeFile:
    """PtychoShelves' ``probe`` (MATLAB (y, x[, modes, ...])) and pixel ``p.dx_spec`` (m): v7.3
    through h5py (which shows MATLAB's axes reversed), v5 through scipy where it is installed."""
    key = key or "probe"
    try:
        with h5py.File(path, "r") as f:
            if not isinstance(f.get(key), h5py.Dataset):
                raise DataError(f"{path}: no variable {key!r} (model.probe_init.key); variables: {', '.join(f)}")
            stored = _complex(f[key][()], f"{path}:{key}")
            pixel = f["p/dx_spec"][()] if isinstance(f.get("p/dx_spec"), h5py.Dataset) else None
            matlab = stored.transpose()  # MATLAB's own axes order
    except OSError:
        try:
            import scipy.io  # optional: only MATLAB v5 files need it
        except ImportError:
            raise DataError(f"{path}: a MATLAB v5 .mat file needs scipy to read (pip install scipy), or save it "
                            "from MATLAB with save(..., '-v7.3')") from None
        variables = scipy.io.loadmat(str(path), variable_names=[key, "p"])
        if key not in variables:
            raise DataError(f"{path}: no variable {key!r} (model.probe_init.key)") from None
        matlab = variables[key]
        p = variables.get("p")
        pixel = p["dx_spec"][0, 0] if p is not None and "dx_spec" in (p.dtype.names or ()) else None
    ky, kx = matlab.shape[:2]
    modes = np.moveaxis(matlab.reshape(ky, kx, -1, order="F"), -1, 0)
    return ProbeFile(_modes(modes, f"{path}:{key}"), None if pixel is None else float(np.ravel(pixel)[0]),
                     f"{path}:{key}")


def _complex(array: np.ndarray, where: str) -> np.ndarray:
    """A complex array from a complex one or a compound of (real, imag) or (r, i) fields."""
    names = array.dtype.names or ()
    for real, imag in (("real", "imag"), ("r", "i")):
        if real in names and imag in names:
            return array[real] + 1j * array[imag]
    if array.dtype.kind not in "fc":
        raise DataError(f"{where}: a probe must hold complex (or real) numbers, found dtype {array.dtype}")
    return array


def _modes(array: np.ndarray, where: str) -> np.ndarray:
    """(M, Ky, Kx) complex128 from (Ky, Kx) or (..., Ky, Kx), every leading axis a mode."""
    array = np.asarray(array)
    if array.ndim < 2 or array.dtype.kind not in "fc":
        raise DataError(f"{where}: expected a complex probe (Ky, Kx) or (modes, Ky, Kx), found shape {array.shape} "
                        f"dtype {array.dtype}")
    modes = array.reshape(-1, *array.shape[-2:]).astype(np.complex128)
    if not np.isfinite(modes).all() or not np.abs(modes).any():
        raise DataError(f"{where}: the probe holds NaN/Inf or only zeros")
    return modes


def probe_key(path: Path) -> str | None:
    """Where an HDF5/CXI (or MATLAB v7.3) data file carries a probe (``HDF5_KEYS``), or None."""
    try:
        with h5py.File(path, "r") as f:
            return next((k for k in HDF5_KEYS if isinstance(f.get(k), h5py.Dataset) and f[k].ndim >= 2), None)
    except OSError:
        return None
