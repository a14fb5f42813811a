"""The detector's gain (``data.flat_field``): an image of the detector's response per pixel, as the
detector stores its patterns (before any ``data.transform``), by which every measured pattern is
divided as it is read (``prepare.pattern_preparation``). A pixel whose gain is not a positive
finite number cannot be corrected: it reads 0 and is left out of the loss, as a bad pixel."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ptyacc.data.readers import read_hdf5_array
from ptyacc.errors import DataError


def read_flat_field(path: Path, key: str, stored_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(the factor (ky, kx) float32 that corrects a stored pattern, 1 / gain where the gain is a
    positive finite number and 0 elsewhere; the pixels (ky, kx) bool where it is) of the gain
    image in ``path`` (.npy, or the HDF5 dataset ``key``), which must have ``stored_shape``."""
    if not path.is_file():
        raise DataError(f"data.flat_field: {path} does not exist")
    if path.suffix.lower() == ".npy":
        gain = np.load(path)
    else:
        gain = read_hdf5_array(path, key, "data.flat_field_key")
    gain = np.asarray(gain, dtype=np.float64)
    if gain.ndim == 3 and gain.shape[0] == 1:
        gain = gain[0]
    if gain.shape != tuple(stored_shape):
        raise DataError(f"data.flat_field: {path} holds a gain image of shape {list(gain.shape)}, but the patterns "
                        f"are {stored_shape[0]} x {stored_shape[1]} px as stored; give the gain of each detector "
                        "pixel as the detector stores its patterns (before data.transform's crop, bin and flips)")
    usable = np.isfinite(gain) & (gain > 0)
    if not usable.any():
        raise DataError(f"data.flat_field: {path} has no pixel with a positive finite gain")
    factor = np.where(usable, 1.0 / np.where(usable, gain, 1.0), 0.0).astype(np.float32)
    return factor, usable
