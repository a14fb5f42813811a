"""The calibration py4DSTEM writes into its EMD 1.0 (HDF5) files, as ptyacc's attributes.

py4DSTEM keeps it in a metadata group named ``calibration`` (under a ``metadatabundle`` group
of the root or of the data cube), one scalar dataset per value: ``Q_pixel_size`` with
``Q_pixel_units`` (the detector pixel: ``A^-1`` or ``nm^-1``) and ``R_pixel_size`` with
``R_pixel_units`` (the scan step: ``A`` or ``nm``). Pixel units (py4DSTEM's default before
calibration) and angles (``mrad``, which need the energy) are not taken: ``ptyacc init`` then
asks for the value."""

from __future__ import annotations

import h5py
import numpy as np

TO_INV_A = {"A^-1": 1.0, "Å^-1": 1.0, "1/A": 1.0, "nm^-1": 0.1, "1/nm": 0.1}
TO_A = {"A": 1.0, "Å": 1.0, "nm": 10.0}
NAMES = {"Q_pixel_size": ("Q_pixel_units", TO_INV_A, "dk_invA"), "R_pixel_size": ("R_pixel_units", TO_A, "scan_step_A")}


def py4dstem_calibration(f: h5py.File) -> dict[str, float]:
    """ptyacc's ``dk_invA`` and ``scan_step_A`` from the first py4DSTEM calibration group in
    ``f`` (none when there is none or its units are pixels or angles)."""
    groups: list[h5py.Group] = []
    f.visititems(lambda name, obj: groups.append(obj) if isinstance(obj, h5py.Group) and name.split("/")[-1] ==
                 "calibration" and "Q_pixel_size" in obj else None)
    if not groups:
        return {}
    found = {}
    for size, (units, scale, key) in NAMES.items():
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
