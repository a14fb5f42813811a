"""Tests of the pure forward-model functions in ptyacc.physics (and orthogonalize_modes).

Numerics are checked against independent NumPy references written here, against known
values, by physical identities, or by finite differences (torch.autograd.gradcheck).
All arrays are tiny so that the file runs in a few seconds on one CPU core.
"""

import math

import numpy as np
import pytest
import torch

from ptyacc.physics import (
    aberration_phase,
    aperture,
    electron_wavelength_A,
    extract_patches,
    fourier_shift,
    fresnel_propagator,
    mixed_state_probe,
    multislice_intensities,
    shift_ramp,
    spatial_frequencies,
    stem_probe,
    transmission,
    wavelength_A,
    xray_wavelength_A,
)
from ptyacc.quantities.model import orthogonalize_modes

# ----------------------------------------------------------------------------------------------
# NumPy reference helpers
# ----------------------------------------------------------------------------------------------

# Every aberration coefficient of Krivanek's notation up to 5th order: (n, m).
ALL_ORDERS = [(1, 0), (1, 2), (2, 1), (2, 3), (3, 0), (3, 2), (3, 4),
              (4, 1), (4, 3), (4, 5), (5, 0), (5, 2), (5, 4), (5, 6)]


def rng(seed=0):
    return np.random.default_rng(seed)


def random_complex(shape, seed=0):
    r = rng(seed)
    return r.standard_normal(shape) + 1j * r.standard_normal(shape)


def k_grid(n, dx):
    """(ky, kx) broadcastable grids in cycles per unit of dx, unshifted FFT layout."""
    k = np.fft.fftfreq(n, d=dx)
    return k[:, None], k[None, :]


def chi_complex_reference(ky, kx, lam, coefficients):
    """chi(k) from the complex-angle form: omega = lambda (kx + i ky) and
    chi = 2 pi / lambda * sum Re[C_nm omega^((n+1+m)/2) conj(omega)^((n+1-m)/2)] / (n+1),
    with C_nm = C_nma - i C_nmb. ``coefficients`` maps (n, m) -> (a, b)."""
    omega = lam * (kx + 1j * ky)
    chi = np.zeros(np.broadcast(ky, kx).shape)
    for (n, m), (a, b) in coefficients.items():
        p, q = (n + 1 + m) // 2, (n + 1 - m) // 2
        chi = chi + np.real((a - 1j * b) * omega**p * np.conj(omega) ** q) / (n + 1)
    return 2 * np.pi / lam * chi


def soft_aperture_reference(ky, kx, k_max, dk):
    """Disk of radius k_max with a linear edge one pixel (dk) wide, centred on k_max."""
    return np.clip((k_max - np.hypot(ky, kx)) / dk + 0.5, 0.0, 1.0)


def probe_reference(n, dk, lam, semiangle_mrad, c10):
    """Centred, unit-intensity probe: aperture * exp(-i pi lambda C10 k^2) -> ifft2 -> fftshift."""
    ky, kx = k_grid(n, 1.0 / (n * dk))
    spectrum = soft_aperture_reference(ky, kx, semiangle_mrad * 1e-3 / lam, dk) * np.exp(
        -1j * np.pi * lam * c10 * (ky**2 + kx**2))
    probe = np.fft.fftshift(np.fft.ifft2(spectrum))
    return probe / np.sqrt(np.sum(np.abs(probe) ** 2))


def fresnel_reference(n, dx, lam, dz):
    ky, kx = k_grid(n, dx)
    return np.exp(-1j * np.pi * lam * dz * (ky**2 + kx**2))


def multislice_reference(probes, transmissions, propagator):
    """Explicit loops: for each pattern, probe mode and object mode, transmit slice by slice,
    propagate between slices (not after the last), then |fft2(ortho)|^2 summed over mode pairs."""
    n_batch, n_probe = probes.shape[:2]
    n_object, n_slices = transmissions.shape[1:3]
    out = np.zeros((n_batch,) + probes.shape[-2:])
    for b in range(n_batch):
        for p in range(n_probe):
            for o in range(n_object):
                wave = probes[b, p]
                for s in range(n_slices):
                    if s > 0:
                        wave = np.fft.ifft2(np.fft.fft2(wave) * propagator)
                    wave = wave * transmissions[b, o, s]
                out[b] += np.abs(np.fft.fft2(wave, norm="ortho")) ** 2
    return out


def centroid(intensity):
    """Intensity-weighted (row, column) centre of mass in pixel indices of an (n, n) image.
    Row and column 0 are left out: they have no mirror partner about n/2 on the circular grid."""
    intensity = intensity.copy()
    intensity[0, :] = intensity[:, 0] = 0.0
    rows, cols = np.indices(intensity.shape)
    total = intensity.sum()
    return (rows * intensity).sum() / total, (cols * intensity).sum() / total


def gram(modes):
    """(M, M) matrix of inner products <mode_i, mode_j> of (M, ...) complex modes."""
    flat = modes.reshape(modes.shape[0], -1)
    return np.conj(flat) @ flat.T


def t(array):
    """NumPy -> torch (keeps float64 / complex128)."""
    return torch.from_numpy(np.ascontiguousarray(array))


# ----------------------------------------------------------------------------------------------
# 1. Wavelength
# ----------------------------------------------------------------------------------------------


def electron_wavelength_si(energy_eV):
    """lambda = h / sqrt(2 m0 e U (1 + e U / (2 m0 c^2))) from CODATA SI constants, in Å."""
    h, m0, e, c = 6.62607015e-34, 9.1093837015e-31, 1.602176634e-19, 299792458.0
    energy_J = e * energy_eV
    return h / math.sqrt(2 * m0 * energy_J * (1 + energy_J / (2 * m0 * c**2))) * 1e10


@pytest.mark.parametrize("energy_eV, expected_A", [
    (80e3, 0.0417572), (100e3, 0.0370144), (200e3, 0.0250793), (300e3, 0.0196875)])
def test_electron_wavelength_known_values(energy_eV, expected_A):
    """Relativistic electron wavelengths match tabulated values and the SI-constant formula."""
    assert electron_wavelength_A(energy_eV) == pytest.approx(expected_A, rel=1e-5)
    assert electron_wavelength_A(energy_eV) == pytest.approx(electron_wavelength_si(energy_eV), rel=1e-7)
    assert wavelength_A(energy_eV, "electron") == electron_wavelength_A(energy_eV)


def test_xray_wavelength_known_values():
    """hc = 12398.42 eV Å: 12.398 keV x-rays have a wavelength of 1.0000 Å."""
    assert xray_wavelength_A(12398.0) == pytest.approx(1.0000339, rel=1e-6)
    assert xray_wavelength_A(12398.419843320026) == pytest.approx(1.0, rel=1e-8)
    assert wavelength_A(8047.8, "xray") == pytest.approx(1.54060, rel=1e-4)  # Cu K-alpha1


@pytest.mark.parametrize("function", [electron_wavelength_A, xray_wavelength_A,
                                      lambda e: wavelength_A(e, "xray"), wavelength_A])
@pytest.mark.parametrize("energy_eV", [0.0, -200e3])
def test_wavelength_rejects_non_positive_energy(function, energy_eV):
    """A zero or negative energy raises ValueError."""
    with pytest.raises(ValueError):
        function(energy_eV)


def test_wavelength_rejects_unknown_radiation():
    """Only 'electron' and 'xray' radiation are accepted."""
    with pytest.raises(ValueError):
        wavelength_A(200e3, "neutron")


# ----------------------------------------------------------------------------------------------
# 2. Aberration phase
# ----------------------------------------------------------------------------------------------

LAM = 0.0250793  # Å, 200 keV


def test_spatial_frequencies_match_numpy_fftfreq():
    """spatial_frequencies equals np.fft.fftfreq (unshifted layout, cycles per unit dx)."""
    for n, dx in [(8, 0.3), (7, 1.0)]:
        np.testing.assert_allclose(spatial_frequencies(n, dx).numpy(), np.fft.fftfreq(n, d=dx), rtol=1e-15)


def test_aberration_phase_all_orders_matches_complex_form():
    """chi for random coefficients of every order up to 5 equals the complex-angle reference."""
    n_px, dx = 12, 0.4
    ky, kx = k_grid(n_px, dx)
    alpha_max = LAM * np.hypot(ky, kx).max()
    r = rng(1)
    coefficients, named = {}, {}
    for n, m in ALL_ORDERS:
        # scale so that each term contributes O(1) radians at the edge of the grid
        scale = (n + 1) / (2 * np.pi / LAM * alpha_max ** (n + 1))
        a, b = scale * r.standard_normal(2)
        if m == 0:
            b = 0.0
            named[f"C{n}{m}"] = a
        else:
            named[f"C{n}{m}a"], named[f"C{n}{m}b"] = a, b
        coefficients[(n, m)] = (a, b)
    assert len(named) == 25  # 3 round (C10, C30, C50) + 11 non-round coefficients x (a, b)
    expected = chi_complex_reference(ky, kx, LAM, coefficients)
    assert np.abs(expected).max() > 1.0  # the test compares non-trivial phases
    got = aberration_phase(t(ky), t(kx), LAM, named).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9 * np.abs(expected).max())


@pytest.mark.parametrize("n, m", ALL_ORDERS)
def test_aberration_phase_each_coefficient_alone(n, m):
    """Each single coefficient (a and b part separately) matches the complex-angle reference."""
    ky, kx = k_grid(10, 0.5)
    parts = [("", (2.0, 0.0))] if m == 0 else [("a", (2.0, 0.0)), ("b", (0.0, 2.0))]
    for suffix, ab in parts:
        expected = chi_complex_reference(ky, kx, LAM, {(n, m): ab})
        got = aberration_phase(t(ky), t(kx), LAM, {f"C{n}{m}{suffix}": 2.0}).numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12 * max(1.0, np.abs(expected).max()))


def test_aberration_phase_defocus_only():
    """With only C10, chi = pi lambda C10 |k|^2."""
    ky, kx = k_grid(9, 0.3)
    c10 = -123.4
    got = aberration_phase(t(ky), t(kx), LAM, {"C10": c10}).numpy()
    np.testing.assert_allclose(got, np.pi * LAM * c10 * (ky**2 + kx**2), rtol=1e-12, atol=1e-12)


def test_aberration_phase_empty_is_zero():
    """No coefficients give zero phase of the broadcast shape."""
    ky, kx = k_grid(6, 1.0)
    got = aberration_phase(t(ky), t(kx), LAM, {})
    assert got.shape == (6, 6)
    assert torch.count_nonzero(got) == 0


@pytest.mark.parametrize("name", ["C11a", "C13a", "C10a", "C12", "C21", "C22a", "C34c", "C1", "defocus", "c10"])
def test_aberration_phase_rejects_invalid_names(name):
    """Names that do not exist in Krivanek notation raise ValueError."""
    ky, kx = k_grid(4, 1.0)
    with pytest.raises(ValueError):
        aberration_phase(t(ky), t(kx), LAM, {name: 1.0})


# ----------------------------------------------------------------------------------------------
# 3-4. Aperture and STEM probe
# ----------------------------------------------------------------------------------------------

N_PROBE, DK, SEMIANGLE = 32, 0.8 / 6, 20.0  # aperture radius ~6 pixels in k
K_MAX = SEMIANGLE * 1e-3 / LAM


def test_aperture_inside_outside_and_edge():
    """1 well inside, 0 well outside, 0.5 exactly at k_max, linear over one pixel in between."""
    k = torch.tensor([0.0, 0.5 * K_MAX, K_MAX - DK, K_MAX - DK / 4, K_MAX, K_MAX + DK / 4, K_MAX + DK, 2 * K_MAX],
                     dtype=torch.float64)
    got = aperture(k * 0.6, k * 0.8, LAM, SEMIANGLE, DK)  # |k| unchanged: 0.6^2 + 0.8^2 = 1
    expected = torch.tensor([1.0, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("c10", [0.0, -50.0, 80.0])
def test_stem_probe_matches_numpy_reference(c10):
    """Defocus-only probe equals aperture * exp(-i chi) -> ifft2 -> fftshift -> normalise."""
    got = stem_probe(N_PROBE, DK, LAM, SEMIANGLE, {"C10": c10}, dtype=torch.complex128).numpy()
    expected = probe_reference(N_PROBE, DK, LAM, SEMIANGLE, c10)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("aberrations", [None, {"C10": 60.0}, {"C10": -60.0}])
def test_stem_probe_unit_intensity_and_centred(aberrations):
    """Unit total intensity (also in complex64) and intensity centroid at (n/2, n/2)."""
    probe = stem_probe(N_PROBE, DK, LAM, SEMIANGLE, aberrations, dtype=torch.complex128).numpy()
    intensity = np.abs(probe) ** 2
    assert intensity.sum() == pytest.approx(1.0, abs=1e-12)
    row, col = centroid(intensity)
    assert abs(row - N_PROBE / 2) < 1e-9 and abs(col - N_PROBE / 2) < 1e-9
    assert np.unravel_index(intensity.argmax(), intensity.shape) == (N_PROBE // 2, N_PROBE // 2)
    probe32 = stem_probe(N_PROBE, DK, LAM, SEMIANGLE, aberrations)
    assert probe32.dtype == torch.complex64
    assert float((probe32.abs() ** 2).sum()) == pytest.approx(1.0, abs=1e-5)


def test_stem_probe_coma_moves_centroid():
    """The centroid test can fail: coma (C21a) displaces the probe's intensity from the centre."""
    probe = stem_probe(N_PROBE, DK, LAM, SEMIANGLE, {"C21a": 3000.0}, dtype=torch.complex128).numpy()
    row, col = centroid(np.abs(probe) ** 2)
    assert abs(col - N_PROBE / 2) > 0.1


@pytest.mark.parametrize("defocus", [40.0, 120.0])
def test_defocused_probe_comes_to_focus_after_propagation(defocus):
    """A probe with defocus f (C10 = -f) propagated by f equals the in-focus probe."""
    dx = 1.0 / (N_PROBE * DK)
    defocused = stem_probe(N_PROBE, DK, LAM, SEMIANGLE, {"C10": -defocus}, dtype=torch.complex128).numpy()
    focused = stem_probe(N_PROBE, DK, LAM, SEMIANGLE, None, dtype=torch.complex128).numpy()
    H = fresnel_propagator(N_PROBE, dx, LAM, defocus, dtype=torch.complex128).numpy()
    # fftshift is a real-space translation, which commutes with the shift-invariant propagation
    propagated = np.fft.ifft2(np.fft.fft2(defocused) * H)
    assert np.abs(defocused - focused).max() > 1e-2  # the defocus is visible before propagating
    np.testing.assert_allclose(propagated, focused, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# 5-6. Fresnel propagator and Fourier shifts
# ----------------------------------------------------------------------------------------------


def test_fresnel_propagator_matches_numpy():
    """H = exp(-i pi lambda dz |k|^2) on the fftfreq grid, unit modulus, default complex64."""
    n, dx, dz = 10, 0.37, 55.0
    got = fresnel_propagator(n, dx, LAM, dz, dtype=torch.complex128).numpy()
    np.testing.assert_allclose(got, fresnel_reference(n, dx, LAM, dz), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.abs(got), 1.0, rtol=0, atol=1e-14)
    assert fresnel_propagator(n, dx, LAM, dz).dtype == torch.complex64


def test_fresnel_propagator_composes():
    """Propagating by a then by b equals propagating by a + b; by 0 is identity."""
    n, dx = 8, 0.5
    Ha = fresnel_propagator(n, dx, LAM, 30.0, dtype=torch.complex128)
    Hb = fresnel_propagator(n, dx, LAM, -75.0, dtype=torch.complex128)
    Hab = fresnel_propagator(n, dx, LAM, -45.0, dtype=torch.complex128)
    torch.testing.assert_close(Ha * Hb, Hab, rtol=0, atol=1e-12)
    torch.testing.assert_close(fresnel_propagator(n, dx, LAM, 0.0, dtype=torch.complex128),
                               torch.ones(n, n, dtype=torch.complex128))


@pytest.mark.parametrize("shift", [(1, 0), (0, 1), (-2, 3), (5, -7)])
@pytest.mark.parametrize("shape", [(8, 8), (7, 10)])
def test_fourier_shift_integer_equals_roll(shift, shape):
    """An integer shift (dy, dx) equals np.roll: +dy moves content to larger row index; also on
    images that are not square (a reconstruction of a scan that is not square is not)."""
    images = random_complex((2, 3, *shape), seed=3)
    shifts = torch.tensor([shift, (-shift[0], 2)], dtype=torch.float64)
    got = fourier_shift(t(images), shifts).numpy()
    for b in range(2):
        expected = np.roll(images[b], tuple(int(s) for s in shifts[b]), axis=(-2, -1))
        np.testing.assert_allclose(got[b], expected, rtol=0, atol=1e-12)


def test_fourier_shift_direction_single_pixel():
    """A delta at (2, 2) shifted by (+1, 0) lands at (3, 2)."""
    image = torch.zeros(1, 6, 6, dtype=torch.complex128)
    image[0, 2, 2] = 1.0
    got = fourier_shift(image, torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    assert tuple(np.unravel_index(int(got.abs().argmax()), (6, 6))) == (3, 2)


def band_limited(y, x, n):
    """A few low-frequency cosines with integer cycles per window (below Nyquist)."""
    terms = [(1.0, 1, 0, 0.3), (0.5, 0, 2, -1.1), (0.7, 2, -1, 0.4), (0.2, 3, 3, 2.0)]
    return sum(amp * np.cos(2 * np.pi * (fy * y + fx * x) / n + ph) for amp, fy, fx, ph in terms)


@pytest.mark.parametrize("shift", [(0.5, 0.0), (0.0, -0.5), (0.5, 1.5), (-0.3, 0.77)])
def test_fourier_shift_subpixel_band_limited(shift):
    """A sub-pixel shift of a band-limited signal equals the analytic f(r - shift)."""
    n = 16
    y, x = np.indices((n, n))
    signal = band_limited(y, x, n).astype(complex)
    expected = band_limited(y - shift[0], x - shift[1], n)
    got = fourier_shift(t(signal[None]), torch.tensor([shift], dtype=torch.float64)).numpy()[0]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_fourier_shift_round_trip_is_identity():
    """Shifting by s and then by -s gives back the image."""
    images = random_complex((3, 2, 8, 8), seed=4)
    shifts = t(rng(5).uniform(-3, 3, size=(3, 2)))
    back = fourier_shift(fourier_shift(t(images), shifts), -shifts).numpy()
    np.testing.assert_allclose(back, images, rtol=0, atol=1e-12)
    moved = fourier_shift(t(images), shifts).numpy()
    assert np.abs(moved - images).max() > 0.1


def test_shift_ramp_matches_numpy():
    """ramp[b] = exp(-2 pi i (dy ky + dx kx)), k = fftfreq(n), shape (B, n, n)."""
    n = 7
    shifts = rng(6).uniform(-2, 2, size=(2, 2))
    ky, kx = k_grid(n, 1.0)
    expected = np.stack([np.exp(-2j * np.pi * (dy * ky + dx * kx)) for dy, dx in shifts])
    got = shift_ramp(t(shifts), n).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# 7-8. Multislice and patch extraction
# ----------------------------------------------------------------------------------------------


def random_model(B, P, O, S, K, seed):
    probes = random_complex((B, P, K, K), seed=seed)
    r = rng(seed + 1)
    trans = r.uniform(0.5, 1.0, size=(B, O, S, K, K)) * np.exp(1j * r.uniform(-np.pi, np.pi, size=(B, O, S, K, K)))
    return probes, trans


def test_multislice_matches_numpy_loops():
    """Mixed-state multislice (B=2, P=2, O=2, S=3, K=8) equals an explicit NumPy loop."""
    K = 8
    probes, trans = random_model(2, 2, 2, 3, K, seed=7)
    H = fresnel_reference(K, 0.3, LAM, 200.0)
    assert np.abs(np.angle(H)).max() > 0.5  # propagation is not close to identity
    got = multislice_intensities(t(probes), t(trans), t(H))
    assert got.shape == (2, K, K) and got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), multislice_reference(probes, trans, H), rtol=1e-12, atol=1e-12)


def test_multislice_single_slice_without_propagator():
    """With S=1 the propagator may be None and the result is sum |fft2(P * T)|^2."""
    probes, trans = random_model(2, 3, 2, 1, 6, seed=8)
    got = multislice_intensities(t(probes), t(trans), None).numpy()
    np.testing.assert_allclose(got, multislice_reference(probes, trans, None), rtol=1e-12, atol=1e-12)


def test_multislice_conserves_flux():
    """Unimodular slices conserve intensity: sum of each pattern = sum of all probe-mode powers times O."""
    probes, trans = random_model(2, 2, 3, 2, 8, seed=9)
    trans = trans / np.abs(trans)
    got = multislice_intensities(t(probes), t(trans), t(fresnel_reference(8, 0.5, LAM, 80.0))).numpy()
    expected = 3 * (np.abs(probes) ** 2).sum(axis=(1, 2, 3))
    np.testing.assert_allclose(got.sum(axis=(1, 2)), expected, rtol=1e-12)


def test_transmission_is_amplitude_times_exp_i_phase():
    """transmission(a, phi) = a exp(+i phi)."""
    a, phi = rng(10).uniform(0.1, 2, size=(2, 5)), rng(11).uniform(-4, 4, size=(2, 5))
    np.testing.assert_allclose(transmission(t(a), t(phi)).numpy(), a * np.exp(1j * phi), rtol=1e-14)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_extract_patches_matches_slicing(dtype):
    """Patches with leading (O, S) dims equal NumPy slicing, including the image edges."""
    O, S, ny, nx, size = 2, 3, 7, 9, 4
    image = random_complex((O, S, ny, nx), seed=12)
    image = image.real.copy() if dtype == torch.float64 else image
    corners = [(0, 0), (ny - size, nx - size), (0, nx - size), (ny - size, 0), (1, 2)]
    got = extract_patches(t(image), torch.tensor(corners, dtype=torch.long), size)
    assert got.shape == (len(corners), O, S, size, size) and got.dtype == dtype
    expected = np.stack([image[..., r:r + size, c:c + size] for r, c in corners])
    np.testing.assert_array_equal(got.numpy(), expected)


def test_extract_patches_no_leading_dims():
    """A plain (Ny, Nx) image gives (B, size, size) windows."""
    image = np.arange(30.0).reshape(5, 6)
    got = extract_patches(t(image), torch.tensor([[1, 3], [2, 0]]), 3).numpy()
    np.testing.assert_array_equal(got, np.stack([image[1:4, 3:6], image[2:5, 0:3]]))


# ----------------------------------------------------------------------------------------------
# 9-10. Mixed-state probe and mode orthogonalisation
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_modes, first_power", [(2, 0.8), (4, 0.7), (12, 0.5)])
def test_mixed_state_probe_orthogonal_power_preserving(n_modes, first_power):
    """Modes are orthogonal, share the power as documented, keep the total, mode 0 ∝ probe."""
    probe = t(probe_reference(16, 0.2, LAM, 25.0, 30.0) * 3.0)  # total intensity 9
    modes = mixed_state_probe(probe, n_modes, first_power)
    assert modes.shape == (n_modes, 16, 16) and modes.dtype == probe.dtype
    g = gram(modes.numpy())
    total = 9.0
    powers = [first_power] + [(1 - first_power) / (n_modes - 1)] * (n_modes - 1)
    np.testing.assert_allclose(g, np.diag(powers) * total, rtol=0, atol=1e-10)
    p = probe.numpy().ravel()
    m0 = modes[0].numpy().ravel()
    ratio = m0 @ np.conj(p) / (p @ np.conj(p))  # best scalar fit m0 ≈ ratio * p
    np.testing.assert_allclose(m0, ratio * p, rtol=0, atol=1e-12)
    assert abs(ratio) == pytest.approx(math.sqrt(first_power), rel=1e-10)


@pytest.mark.parametrize("modes, power", [(4, None), (21, None), (3, 0.1), (2, 0.4)])
def test_the_initial_probe_modes_start_with_model_probe_mode_power_each(tmp_path, modes, power):
    """A built model's modes start orthogonal with model.probe_mode_power of the total intensity each
    after the first (auto: 0.02, and 0.2 shared beyond 10 further modes), the first with the rest; the
    total is the single-mode start's."""
    from conftest import tiny_config

    import ptyacc
    from ptyacc.data import load_data
    from ptyacc.physics.geometry import ObjectGeometry
    from ptyacc.reconstruction.initial import build_model

    def probe(n_modes: int, given: dict) -> np.ndarray:
        config = ptyacc.load_config(tiny_config(tmp_path, model={"probe_modes": n_modes, **given}))
        data = load_data(config)
        model = build_model(config, data, ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px))
        return model.complex_probe().detach().numpy().astype(np.complex128)

    share = (0.02 if modes <= 11 else 0.2 / (modes - 1)) if power is None else power
    total = float((np.abs(probe(1, {})) ** 2).sum())
    expected = np.diag([1 - share * (modes - 1)] + [share] * (modes - 1)) * total
    np.testing.assert_allclose(gram(probe(modes, {} if power is None else {"probe_mode_power": power})), expected,
                               rtol=0, atol=1e-5 * total)


@pytest.mark.parametrize("modes, power", [(4, 0.34), (2, 0.0), (3, -0.1)])
def test_probe_mode_power_that_leaves_the_first_mode_nothing_is_refused(modes, power):
    import ptyacc
    from ptyacc.errors import ConfigError

    with pytest.raises(ConfigError, match="model.probe_mode_power: must be auto, or > 0 with"):
        ptyacc.load_config(None, [f"model.probe_modes={modes}", f"model.probe_mode_power={power}"])


@pytest.mark.parametrize("n, n_modes", [(12, 13), (16, 20)])
def test_mixed_state_probe_many_modes_on_small_grid(n, n_modes):
    """Many modes on a small grid are still finite and orthogonal."""
    probe = t(probe_reference(n, 0.2, LAM, 25.0, 0.0))
    modes = mixed_state_probe(probe, n_modes).numpy()
    assert modes.shape[0] == n_modes and np.all(np.isfinite(modes))
    g = gram(modes)
    np.testing.assert_allclose(g - np.diag(np.diag(g)), 0, atol=1e-10)


def test_mixed_state_probe_refuses_more_modes_than_pixels():
    """A probe on a 4 x 4 window cannot carry 17 independent modes: a clear error, not NaN."""
    probe = t(random_complex((4, 4), seed=3))
    with pytest.raises(ValueError, match="cannot carry 17 independent modes"):
        mixed_state_probe(probe, 17)


def test_mixed_state_probe_complex64_total_intensity():
    """In complex64 the total intensity is kept to float precision."""
    probe = stem_probe(16, 0.2, LAM, 25.0, {"C10": 30.0})
    modes = mixed_state_probe(probe, 3)
    assert modes.dtype == torch.complex64
    assert float((modes.abs() ** 2).sum()) == pytest.approx(1.0, abs=1e-5)


def test_mixed_state_probe_single_mode_returns_probe():
    """One mode is the probe itself, with a leading mode axis, and a copy."""
    probe = t(random_complex((6, 6), seed=13))
    modes = mixed_state_probe(probe, 1)
    assert modes.shape == (1, 6, 6)
    torch.testing.assert_close(modes[0], probe, rtol=0, atol=0)
    modes[0, 0, 0] = 99.0
    assert probe[0, 0] != 99.0


def test_orthogonalize_modes_diagonal_sorted_incoherent_sum():
    """Output modes are orthogonal, sorted by decreasing power, and keep sum_m |mode_m|^2."""
    modes = random_complex((4, 6, 6), seed=14)
    modes[2] *= 3.0  # make the input clearly non-orthogonal and unsorted
    modes[1] = modes[1] + 0.8 * modes[2]
    assert np.abs(gram(modes) - np.diag(np.diag(gram(modes)))).max() > 1.0
    out = orthogonalize_modes(t(modes)).numpy()
    assert out.shape == modes.shape
    g = gram(out)
    powers = np.real(np.diag(g))
    np.testing.assert_allclose(g - np.diag(np.diag(g)), 0, atol=1e-10)
    assert np.all(np.diff(powers) <= 1e-12)
    np.testing.assert_allclose((np.abs(out) ** 2).sum(0), (np.abs(modes) ** 2).sum(0), rtol=1e-12)
    # the powers are the eigenvalues of the input Gram matrix, largest first
    np.testing.assert_allclose(powers, np.linalg.eigvalsh(gram(modes))[::-1], rtol=1e-10)


def test_orthogonalize_modes_keeps_complex64():
    """complex64 in gives complex64 out, with the incoherent sum kept to float precision."""
    modes = t(random_complex((3, 5, 5), seed=15)).to(torch.complex64)
    out = orthogonalize_modes(modes)
    assert out.dtype == torch.complex64
    torch.testing.assert_close((out.abs() ** 2).sum(0), (modes.abs() ** 2).sum(0), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# 11. Gradients (finite differences in float64)
# ----------------------------------------------------------------------------------------------


def test_gradcheck_multislice_intensities():
    """Autograd through transmission + 2-slice multislice matches finite differences (P=2, O=2)."""
    B, P, O, S, K = 1, 2, 2, 2, 6
    r = rng(16)
    amplitude = torch.tensor(r.uniform(0.5, 1.0, size=(B, O, S, K, K)), requires_grad=True)
    phase = torch.tensor(r.uniform(-np.pi, np.pi, size=(B, O, S, K, K)), requires_grad=True)
    probe_re = torch.tensor(r.standard_normal((B, P, K, K)), requires_grad=True)
    probe_im = torch.tensor(r.standard_normal((B, P, K, K)), requires_grad=True)
    H = t(fresnel_reference(K, 0.4, LAM, 150.0))

    def forward(amp, ph, re, im):
        return multislice_intensities(torch.complex(re, im), transmission(amp, ph), H)

    assert torch.autograd.gradcheck(forward, (amplitude, phase, probe_re, probe_im), eps=1e-6, atol=1e-6)


def test_gradcheck_shift():
    """d|ifft2(fft2(probe) * shift_ramp(s))|^2 / ds matches finite differences."""
    K = 8
    spectrum = torch.fft.fft2(t(random_complex((K, K), seed=17)))
    shifts = torch.tensor([[0.3, -1.2], [2.5, 0.1]], dtype=torch.float64, requires_grad=True)

    def forward(s):
        return torch.fft.ifft2(spectrum * shift_ramp(s, K)).abs() ** 2

    assert torch.autograd.gradcheck(forward, (shifts,), eps=1e-6, atol=1e-6)


def test_gradcheck_aberration_phase_coefficients():
    """chi is differentiable in coefficients passed as 0-d tensors (finite-difference check)."""
    ky, kx = (t(a) for a in k_grid(6, 0.5))
    c10 = torch.tensor(40.0, dtype=torch.float64, requires_grad=True)
    c23b = torch.tensor(500.0, dtype=torch.float64, requires_grad=True)
    c30 = torch.tensor(1e4, dtype=torch.float64, requires_grad=True)

    def forward(a, b, c):
        return aberration_phase(ky, kx, LAM, {"C10": a, "C23b": b, "C30": c})

    assert torch.autograd.gradcheck(forward, (c10, c23b, c30), eps=1e-4, atol=1e-6)
