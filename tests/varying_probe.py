"""A scan whose probe varies from position to position, simulated by the benchmark grid's NumPy
multislice (benchmarks/grid/simulate.py, independent of ptyacc): the sample's height drifts, so the
defocus changes linearly along the slow scan axis, and the beam current fluctuates, so each
pattern's dose is the mean dose times a random factor. The file holds what a microscope records
(the patterns, the raster, the nominal defocus: the mean); ``/ground_truth`` the rest."""

from __future__ import annotations

import h5py
import numpy as np

import ptyacc
from ptyacc.results.quality import placed_ncc


def write_varying_case(simulator, path, defocus_A: tuple[float, float] = (60.0, 140.0), current_spread: float = 0.15,
                       scan_shape: tuple[int, int] = (14, 14), dose: float = 1e5, detector_px: int = 48,
                       seed: int = 0, sample: str = "random") -> dict:
    """Write the case to ``path``: the defocus goes from defocus_A[0] at the first row to
    defocus_A[1] at the last, the current factor is 1 + current_spread x a normal draw (kept
    above 0.3); ``sample`` the simulator's (random atoms, or a WSe2 monolayer: a crystal). Returns the
    truth: positions_A, phase, defocus_A (N,), current (N,)."""
    setting = simulator.Setting(defocus_A=float(np.mean(defocus_A)), dose=dose, scan_shape=scan_shape, seed=seed,
                                detector_px=detector_px, sample=sample)
    rng = np.random.default_rng(seed + 1000)
    lam = simulator.wavelength_A(setting.energy_eV)
    n = setting.detector_px
    dk = setting.edge_mrad * 1e-3 / lam / (n // 2)
    dx = 1.0 / (n * dk)
    span_A = (max(scan_shape) - 1) * setting.scan_step_A
    size = int(np.ceil(span_A / dx)) + n + 16
    size += size % 2
    sample_phase = simulator.wse2_monolayer if sample == "wse2" else simulator.random_atoms
    phase = sample_phase((size, size), dx, setting, rng)
    positions = simulator.scan_positions_A(setting, size * dx)
    rows = np.repeat(np.arange(scan_shape[0]), scan_shape[1])
    defocus = defocus_A[0] + (defocus_A[1] - defocus_A[0]) * rows / max(scan_shape[0] - 1, 1)
    current = np.clip(1.0 + current_spread * rng.standard_normal(len(positions)), 0.3, None)
    kernel = simulator.fresnel_kernel(n, dx, lam, setting.slice_thickness_A)
    transmission = np.exp(1j * phase)[None]
    clean = np.concatenate([simulator.patterns_at(simulator.probe_wave(n, dk, lam, setting.semiangle_mrad, focus),
                                                  transmission, position[None] / dx, kernel)
                            for position, focus in zip(positions, defocus, strict=True)])
    patterns = rng.poisson(clean * (dose * current)[:, None, None]).astype(np.float32)
    with h5py.File(path, "w") as f:
        f["patterns"] = patterns.reshape(*scan_shape, n, n)
        f["positions_A"] = positions
        f.attrs.update(energy_eV=setting.energy_eV, semiangle_mrad=setting.semiangle_mrad,
                       defocus_A=setting.defocus_A, dk_invA=dk)
        truth = f.create_group("ground_truth")
        truth["phase"], truth["defocus_A"], truth["current"] = phase, defocus, current
    return {"positions_A": positions, "phase": phase, "defocus_A": defocus, "current": current}


def phase_ncc(rec: ptyacc.Reconstruction, truth: dict) -> float:
    """The phase NCC with the truth over the scanned region, the reconstruction placed at its origin."""
    return placed_ncc(rec.results.phase, np.asarray(rec.results.origin_A), rec.results.dx_A, truth["positions_A"],
                      truth["phase"])
