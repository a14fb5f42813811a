"""Synthetic datasets from ptyacc's own forward model: a random-atom phase object under a
STEM probe, optionally with Poisson noise. For tests and tutorials; the demo data that ships
in examples/data comes from an independent simulator."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data.calibration import SourceFacts, calibrate
from ptyacc.data.dataset import PtychoData
from ptyacc.physics import (
    Detector,
    detected_intensities,
    fresnel_propagator,
    shift_ramp,
    stem_probe,
    transmission,
)
from ptyacc.physics.geometry import ObjectGeometry

DEFAULTS = {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 100.0, "scan_step_A": 0.5}
ATOM_SIGMA_A = 0.35


def simulate_dataset(config: Config) -> PtychoData:
    """Simulate the dataset that ``config.data.simulate`` describes. The ground truth (phase
    per slice on the object canvas, the probe, the canvas geometry) is kept in ``ground_truth``."""
    sim, exp = config.data.simulate, config.experiment
    rng = np.random.default_rng(sim.seed)
    k = sim.detector_px
    disk_radius_px = k / 4 if exp.radiation == "electron" else None  # sets dk unless dk_invA or dx_A is given
    calibration = calibrate(exp, SourceFacts("data.simulate", (*sim.scan_shape, k, k), {}), defaults=DEFAULTS,
                            bright_field_radius_px=disk_radius_px)
    dx, wavelength = calibration.stored_dx_A, calibration.wavelength_A
    geometry = ObjectGeometry.around(calibration.positions_A, dx, k, config.model.object_padding_px)
    phase = _random_atoms(geometry.shape, dx, config.model.slices, sim, rng)

    if exp.radiation == "xray":
        probe = _xray_probe(k, rng)
        calibration = dataclasses.replace(calibration, semiangle_mrad=None)
    else:
        probe = stem_probe(k, 1.0 / (k * dx), wavelength, calibration.semiangle_mrad, calibration.aberrations)
    true_positions_px = geometry.positions_px + rng.normal(0.0, sim.position_jitter_A / dx, geometry.positions_px.shape)
    dose = sim.dose if sim.dose is not None else 1e6
    probe = probe * math.sqrt(dose)
    propagator = fresnel_propagator(k, dx, wavelength, config.model.slice_thickness_A)
    near_distance = calibration.near_field_distance_A
    near = fresnel_propagator(k, dx, wavelength, near_distance) if near_distance is not None else None
    patterns = _forward(probe, torch.from_numpy(phase), true_positions_px, propagator, near)
    if sim.dose is not None:
        patterns = torch.poisson(patterns, generator=torch.Generator().manual_seed(sim.seed))
    truth = {"phase": phase, "probe": probe.numpy(), "geometry": geometry, "positions_A": geometry.to_A(true_positions_px)}
    return PtychoData.calibrated(patterns.to(torch.float32), calibration, dx, "simulated", ground_truth=truth)


def _random_atoms(shape: tuple[int, int], dx: float, slices: int, sim, rng: np.random.Generator) -> np.ndarray:
    """(slices, Ny, Nx) phase: Gaussian atoms at random positions, spread over the slices."""
    ny, nx = shape
    n_atoms = sim.atoms or max(1, int(ny * nx * dx * dx / 4.0))
    centres = rng.uniform([0, 0], [ny, nx], size=(n_atoms, 2))
    which = rng.integers(0, slices, n_atoms)
    y = np.arange(ny)[:, None]
    x = np.arange(nx)[None, :]
    sigma = max(ATOM_SIGMA_A / dx, 1.0)  # at least a pixel (X-ray pixels are far larger than atoms)
    phase = np.zeros((slices, ny, nx))
    for (cy, cx), s in zip(centres, which):
        phase[s] += sim.atom_phase_rad * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * sigma**2))
    return phase


def _xray_probe(k: int, rng: np.random.Generator) -> torch.Tensor:
    """A structured X-ray illumination (K, K), unit intensity: a soft-edged disk of 0.35 K
    radius with a curved, slightly random phase (like a beam through focusing optics)."""
    c = np.arange(k) - k // 2
    r = np.hypot(c[:, None], c[None, :]) / k
    amplitude = 1.0 / (1.0 + np.exp((r - 0.35) / 0.02))
    phase = 12.0 * r**2 + 0.2 * np.cos(7 * np.pi * c[:, None] / k) * np.sin(5 * np.pi * c[None, :] / k)
    probe = torch.from_numpy(amplitude * np.exp(1j * phase))
    return (probe / torch.sqrt((probe.abs() ** 2).sum())).to(torch.complex64)


def _forward(probe: torch.Tensor, phase: torch.Tensor, centres_px: np.ndarray, propagator: torch.Tensor,
             near: torch.Tensor | None = None, chunk: int = 256) -> torch.Tensor:
    """Noise-free intensities (N, K, K), model layout, in float64 for an accurate truth."""
    k = probe.shape[-1]
    probe = probe.to(torch.complex128)
    obj = transmission(torch.ones_like(phase), phase)[None]  # (1, S, Ny, Nx)
    centres = torch.from_numpy(centres_px)
    detector = Detector(propagator=near.to(torch.complex128) if near is not None else None)
    out = []
    for start in range(0, len(centres), chunk):
        c = centres[start:start + chunk]
        high = torch.tensor(phase.shape[-2:], dtype=c.dtype) - k
        corner = torch.minimum(torch.round(c - k // 2).clamp(min=0), high)
        out.append(detected_intensities(probe[None], obj, corner.long(), shift_ramp(c - k // 2 - corner, k),
                                        propagator.to(torch.complex128), detector))
    return torch.cat(out)
