"""The benchmark grid's independent simulator (benchmarks/grid/simulate.py) against independent
references: ptyacc's forward model for the same object, probe and positions, a direct NumPy
propagation, and the focus a defocused probe reaches."""

import h5py
import numpy as np
import pytest
import torch

from ptyacc.physics import Detector, aberration_phase, detected_intensities, fresnel_propagator, shift_ramp


@pytest.fixture(scope="module")
def sim(grid_simulator):
    return grid_simulator


def small(sim, **changes):
    fields = dict(detector_px=32, scan_shape=(3, 3), scan_step_A=0.9, dose=0.0, defocus_A=60.0, edge_mrad=80.0, seed=4)
    return sim.Setting(**{**fields, **changes})


def ptyacc_patterns(result: dict, setting) -> np.ndarray:
    """ptyacc.physics.detected_intensities for the simulator's object, probe and positions,
    fftshifted like the file's patterns: (N, K, K)."""
    n = setting.detector_px
    centres_px = torch.from_numpy(result["positions_A"] / result["dx_A"])
    whole = torch.round(centres_px)
    obj = torch.from_numpy(np.exp(1j * result["phases"]))[None]  # (1, S, H, W)
    propagator = fresnel_propagator(n, result["dx_A"], result["wavelength_A"], setting.slice_thickness_A,
                                    dtype=torch.complex128)
    found = detected_intensities(torch.from_numpy(result["probe"])[None], obj, (whole - n // 2).long(),
                                 shift_ramp(centres_px - whole, n), propagator, Detector())
    return torch.fft.fftshift(found, dim=(-2, -1)).numpy()


@pytest.mark.parametrize("slices", [1, 3])
def test_patterns_equal_ptyacc_forward_model(sim, slices):
    setting = small(sim, slices=slices, slice_thickness_A=6.0)
    result = sim.simulate(setting)
    mine = result["patterns"].reshape(-1, 32, 32).astype(np.float64)
    theirs = ptyacc_patterns(result, setting)
    assert np.abs(mine - theirs).max() < 1e-6 * theirs.max()
    # the comparison sees a half-pixel slip of the positions and a mirrored pattern
    moved = dict(result, positions_A=result["positions_A"] + 0.5 * result["dx_A"])
    assert np.abs(mine - ptyacc_patterns(moved, setting)).max() > 1e-3 * theirs.max()
    assert np.abs(mine[:, ::-1, ::-1] - theirs).max() > 1e-3 * theirs.max()


def test_multislice_equals_direct_numpy_propagation(sim):
    """The exit wave against a propagation written out with a centred frequency grid."""
    rng = np.random.default_rng(1)
    n, dx, lam, dz = 24, 0.3, 0.0418, 7.0
    probe = rng.normal(size=(n, n)) + 1j * rng.normal(size=(n, n))
    slices = np.exp(1j * rng.uniform(0, 1, size=(3, n, n)))
    k = (np.arange(n) - n // 2) / (n * dx)
    kernel = np.exp(-1j * np.pi * lam * dz * (k[:, None] ** 2 + k[None, :] ** 2))
    wave = probe * slices[0]
    for transmission in slices[1:]:
        spectrum = np.fft.fftshift(np.fft.fft2(wave))
        wave = np.fft.ifft2(np.fft.ifftshift(spectrum * kernel)) * transmission
    found = sim.exit_wave(probe, slices, sim.fresnel_kernel(n, dx, lam, dz))
    assert np.abs(found - wave).max() < 1e-12 * np.abs(wave).max()
    assert np.abs(sim.exit_wave(probe, slices, sim.fresnel_kernel(n, dx, lam, -dz)) - wave).max() > 1e-3


def test_underfocused_probe_focuses_after_its_defocus(sim):
    """defocus_A > 0 = underfocus: a probe with defocus f propagated by f in vacuum is the focused probe."""
    n, dk, lam = 64, 0.06, sim.wavelength_A(80e3)
    focused = sim.probe_wave(n, dk, lam, 25.0, 0.0)
    defocused = sim.probe_wave(n, dk, lam, 25.0, 90.0)
    kernel = sim.fresnel_kernel(n, 1 / (n * dk), lam, 30.0)
    arrived = sim.exit_wave(defocused, np.ones((4, n, n)), kernel)  # three gaps of 30 Å
    assert np.abs(arrived - focused).max() < 1e-10
    assert np.abs(sim.exit_wave(sim.probe_wave(n, dk, lam, 25.0, -90.0), np.ones((4, n, n)), kernel)
                  - focused).max() > 0.01
    # and ptyacc's aberration phase has the same sign: psi(k) = A exp(-i chi), C10 = -defocus
    k = torch.fft.fftfreq(n, d=1 / (n * dk), dtype=torch.float64)
    chi = aberration_phase(k[:, None], k[None, :], lam, {"C10": -90.0}).numpy()
    spectrum = np.fft.fft2(np.fft.ifftshift(defocused))
    inside = np.abs(spectrum) > 0.5 * np.abs(spectrum).max()
    ratio = spectrum[inside] / np.exp(-1j * chi[inside])
    assert np.abs(ratio / ratio[0] - 1).max() < 1e-9


def test_file_layout_dose_and_detector_edge(sim, tmp_path):
    setting = small(sim, dose=4e4, slices=2)
    path = tmp_path / "grid.h5"
    sim.write(str(path), setting)
    with h5py.File(path) as f:
        patterns, attrs = f["patterns"][()], dict(f.attrs)
        slices = f["ground_truth/potential_slices_phase"][()]
        assert np.allclose(f["ground_truth/phase"][()], slices.sum(0), atol=1e-5)
        assert f["ground_truth/potential_slices_phase"].attrs["slice_thickness_A"] == setting.slice_thickness_A
    assert patterns.shape == (3, 3, 32, 32) and np.all(patterns == np.round(patterns))
    sums = patterns.sum((-2, -1))
    assert abs(sums.mean() - 4e4) < 4 * np.sqrt(4e4 / sums.size)  # Poisson around the dose
    assert attrs["dk_invA"] * 16 * attrs["wavelength_A"] * 1e3 == pytest.approx(80.0)  # edge at K/2 px
    assert attrs["dx_A"] == pytest.approx(1 / (32 * attrs["dk_invA"]))


def test_wse2_monolayer_lattice_and_columns(sim):
    """The WSe2 monolayer: its phase's strongest spatial frequencies are the {100} ones, 2 / (sqrt(3) a),
    and the {110} ones, sqrt(3) times that; the W columns peak at the W phase, above the Se2 columns."""
    setting = sim.Setting(sample="wse2", atom_sigma_A=0.3)
    dx, n = 0.1, 256
    phase = sim.wse2_monolayer((n, n), dx, setting, np.random.default_rng(1))
    spectrum = np.abs(np.fft.fft2(phase - phase.mean()))
    q = np.hypot(*np.meshgrid(np.fft.fftfreq(n, dx), np.fft.fftfreq(n, dx), indexing="ij"))
    strongest = q.ravel()[np.argsort(spectrum.ravel())[-12:]]
    q100 = 2 / (np.sqrt(3) * 3.28)
    assert np.all(np.minimum(abs(strongest - q100), abs(strongest - np.sqrt(3) * q100)) < 1 / (n * dx))  # {100}, {110}
    inner = phase[20:-20, 20:-20]
    assert inner.max() == pytest.approx(setting.wse2_phase_rad[0], rel=0.02)
    columns = inner[(inner > 0.9 * setting.wse2_phase_rad[1]) & (inner < 1.1 * setting.wse2_phase_rad[1])]
    assert columns.size > 0  # the Se2 columns' peaks, lower than W's
    with pytest.raises(ValueError, match="one slice"):
        sim.simulate(sim.Setting(sample="wse2", slices=2, detector_px=16, scan_shape=(2, 2)))
