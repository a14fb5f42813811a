"""A thick crystal simulated for the tests: atomic columns on a lattice, the same in every
slice (a crystal on its zone axis), seen by a 300 kV probe with a beam tilt and a slice
thickness of the test's choosing. Probe, positions and calibration come from a simulated
config; the patterns are made again with ptyacc's forward chain (noise-free, float64)."""

import dataclasses

import numpy as np
import torch

import ptyacc
from ptyacc.data import load_data
from ptyacc.data.simulate import _forward
from ptyacc.physics import spatial_frequencies
from ptyacc.physics.tilt import tilted_propagator
from ptyacc.results.quality import placed_ncc


def crystal_config(slices=4, thickness_A=10.0, scan=12, **optim) -> dict:
    return {"data": {"simulate": {"scan_shape": [scan, scan], "detector_px": 32, "seed": 2}},
            "experiment": {"energy_eV": 300e3, "semiangle_mrad": 20.0, "defocus_A": 40.0, "scan_step_A": 0.5,
                           "dx_A": 0.2},
            "model": {"slices": slices, "slice_thickness_A": thickness_A},
            "optim": {"iterations": 30, **optim},
            "runtime": {"progress": False, "threads": 2}}


def column_phase(shape, dx_A, spacing_A=1.6, peak_rad=0.12, sigma_A=0.3) -> np.ndarray:
    """(Ny, Nx) phase of one slice: Gaussian columns on a centred rectangular lattice."""
    ny, nx = shape
    y, x = np.arange(ny)[:, None] * dx_A, np.arange(nx)[None, :] * dx_A
    phase = np.zeros((ny, nx))
    for row, cy in enumerate(np.arange(0, ny * dx_A, spacing_A)):
        for cx in np.arange(0.5 * spacing_A * (row % 2), nx * dx_A, spacing_A):
            phase += peak_rad * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * sigma_A**2))
    return phase


def tilted_crystal(config: dict, tilt_mrad=(0.0, 0.0)):
    """The dataset of ``config`` (``crystal_config``) made again from a crystal tilted by
    ``tilt_mrad`` [y, x]; its ground truth's phase is the crystal's (S, Ny, Nx)."""
    loaded = ptyacc.load_config(config)
    data = load_data(loaded)
    geometry = data.ground_truth["geometry"]
    slices, thickness = loaded.model.slices, loaded.model.slice_thickness_A
    phase = np.repeat(column_phase(geometry.shape, data.dx_A)[None], slices, 0)
    freqs = spatial_frequencies(data.detector_px, data.dx_A)
    propagator = tilted_propagator(freqs, freqs, data.wavelength_A, torch.tensor(thickness), torch.tensor(tilt_mrad))
    patterns = _forward(torch.from_numpy(data.ground_truth["probe"]), torch.from_numpy(phase),
                        geometry.positions_px, propagator.to(torch.complex128))
    truth = dict(data.ground_truth, phase=phase)
    return dataclasses.replace(data, patterns=patterns.float(), ground_truth=truth)

def phase_ncc(rec, shift_px=(0.0, 0.0)) -> float:
    """``placed_ncc`` of the reconstruction's phase summed over slices with the truth's (whose
    pixel [0, 0] sits at its canvas's origin_A), moved by ``shift_px`` (y, x) more."""
    truth = rec.data.ground_truth
    frame = np.asarray(truth["geometry"].origin_A)
    return placed_ncc(rec.results.phase, np.asarray(rec.results.origin_A) - frame, rec.results.dx_A,
                      rec.data.positions_A - frame, truth["phase"].sum(0), shift_px)


def best_shift_ncc(rec, span_px=1.0, step_px=0.1) -> float:
    """The highest ``phase_ncc`` over shifts up to ``span_px`` in steps of ``step_px``."""
    steps = np.arange(-span_px, span_px + 1e-9, step_px)
    return max(phase_ncc(rec, (dy, dx)) for dy in steps for dx in steps)
