"""Writing a dataset in ptyacc's own HDF5 layout, which `data.path` reads with no other keys:

- ``patterns``    float32 (N, K, K): diffraction patterns with zero frequency at the centre,
  near-field images as they are
- ``positions_A`` float64 (N, 2) probe centres (y, x) in Å
- attributes ``energy_eV`` (of an electron or a photon, as ``radiation`` says), ``radiation``,
  ``semiangle_mrad``, ``defocus_A`` (= -C10), ``dk_invA``, ``dx_A``, ``scan_shape`` when known, and
  ``aberrations`` (YAML text)
- ``ground_truth/phase`` (slices summed) and ``ground_truth/potential_slices_phase`` for simulations
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import torch
import yaml

from ptyacc.data.dataset import PtychoData
from ptyacc.physics import wavelength_A as physics_wavelength_A


def write_dataset(path: Path, data: PtychoData) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        far_field = data.near_field_distance_A is None
        patterns = torch.fft.fftshift(data.patterns, dim=(-2, -1)) if far_field else data.patterns
        f.create_dataset("patterns", data=patterns.numpy(), compression="gzip", shuffle=True)
        f["positions_A"] = data.positions_A
        energy = _energy_eV(data.wavelength_A, data.radiation)
        f.attrs.update(energy_eV=energy, radiation=data.radiation, dk_invA=data.dk_invA, dx_A=data.dx_A,
                       aberrations=yaml.safe_dump({k: float(v) for k, v in data.aberrations.items()}))
        if data.semiangle_mrad is not None:
            f.attrs["semiangle_mrad"] = data.semiangle_mrad
        if "C10" in data.aberrations:
            f.attrs["defocus_A"] = -float(data.aberrations["C10"])
        if data.scan_shape is not None:
            f.attrs["scan_shape"] = np.asarray(data.scan_shape)
        truth = data.ground_truth
        if "phase" in truth:
            geometry = truth["geometry"]
            group = f.create_group("ground_truth")
            group["phase"] = truth["phase"].sum(0).astype(np.float32)
            group["potential_slices_phase"] = truth["phase"].astype(np.float32)
            group["positions_A"] = truth["positions_A"]
            for name in ("phase", "potential_slices_phase"):
                group[name].attrs.update(dx_A=data.dx_A, origin_A=np.asarray(geometry.origin_A))


def _energy_eV(wavelength_A: float, radiation: str) -> float:
    """The energy of ``radiation`` of this wavelength (bisection: the wavelength falls with energy)."""
    low, high = 1e-3, 1e9
    for _ in range(200):
        mid = (low * high) ** 0.5
        if physics_wavelength_A(mid, radiation) > wavelength_A:
            low = mid
        else:
            high = mid
    return float((low * high) ** 0.5)
