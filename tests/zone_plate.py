"""A far-field X-ray dataset of a defocused Fresnel zone plate's beam, simulated with NumPy alone
(not with ptyacc's forward model or probe builder): the beam is the zone plate's pupil (a disk of
numerical aperture lambda / (2 outer zone width) with a central stop) propagated by the defocus with
NumPy's FFT and an angular-spectrum kernel; the object a Siemens star in phase; the patterns
Poisson counts; the scan an interleaved raster (consecutive positions far apart, neighbours close)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WAVELENGTH_M = 1.5498e-10  # 8 keV
ENERGY_EV = 8000.0
DETECTOR_PIXEL_M = 75e-6


@dataclass
class ZonePlateCase:
    patterns: np.ndarray       # (N, K, K) whole-number counts, zero frequency at the centre
    positions_A: np.ndarray    # (N, 2) probe centres (y, x) in Å; truth pixel [i, j] sits at (i, j) dx
    probe: np.ndarray          # (K, K) complex, the beam at the sample, photons per pattern = sum |probe|^2
    phase: np.ndarray          # (Ny, Nx) the object's true phase
    dx_m: float
    detector_distance_m: float
    outer_zone_width_m: float
    central_stop_fraction: float
    defocus_m: float


def zone_plate_beam(k: int, dx_m: float, outer_zone_width_m: float, central_stop_fraction: float,
                    defocus_m: float) -> np.ndarray:
    """(k, k) complex beam, unit total intensity, centred at pixel (k/2, k/2): the pupil of NA
    lambda / (2 dr) with a central stop, propagated by ``defocus_m`` beyond the focus."""
    f = np.fft.fftfreq(k, dx_m)
    q = np.hypot(f[:, None], f[None, :])
    cutoff = 1.0 / (2 * outer_zone_width_m)  # NA / lambda
    pupil = ((q <= cutoff) & (q >= central_stop_fraction * cutoff)).astype(complex)
    kernel = np.exp(-1j * np.pi * WAVELENGTH_M * defocus_m * q**2)
    beam = np.fft.fftshift(np.fft.ifft2(pupil * kernel))
    return beam / np.sqrt((np.abs(beam) ** 2).sum())


def siemens_star(shape: tuple[int, int], spokes: int = 16, phase_rad: float = 0.6) -> np.ndarray:
    y, x = np.indices(shape, dtype=float)
    cy, cx = (shape[0] - 1) / 2, (shape[1] - 1) / 2
    angle, radius = np.arctan2(y - cy, x - cx), np.hypot(y - cy, x - cx)
    star = (np.cos(spokes * angle) > 0) & (radius > 2) & (radius < 0.45 * min(shape))
    return phase_rad * star.astype(float)


def simulate(k: int = 64, grid: int = 10, step_px: int = 7, photons: float = 1e7, defocus_m: float = 160e-6,
             outer_zone_width_m: float = 53e-9, central_stop_fraction: float = 0.4, dx_m: float = 20e-9,
             seed: int = 0) -> ZonePlateCase:
    """A ``grid`` x ``grid`` raster ``step_px`` apart, visited in interleaved order (position n
    is raster point n (2 grid + 17) mod grid^2), ``photons`` per pattern on average, Poisson counts."""
    rng = np.random.default_rng(seed)
    beam = zone_plate_beam(k, dx_m, outer_zone_width_m, central_stop_fraction, defocus_m) * np.sqrt(photons)
    raster = np.array([(k // 2 + 4 + r * step_px, k // 2 + 4 + c * step_px) for r in range(grid) for c in range(grid)])
    centres = raster[(np.arange(grid**2) * (2 * grid + 17)) % grid**2]  # consecutive positions rows apart
    size = int(centres.max()) + k // 2 + 4
    phase = siemens_star((size, size))
    obj = np.exp(1j * phase) * (1 - 0.2 * phase)
    patterns = np.empty((len(centres), k, k))
    for n, (cy, cx) in enumerate(centres):
        patch = obj[cy - k // 2:cy - k // 2 + k, cx - k // 2:cx - k // 2 + k]
        patterns[n] = np.abs(np.fft.fftshift(np.fft.fft2(beam * patch, norm="ortho"))) ** 2
    distance_m = dx_m * k * DETECTOR_PIXEL_M / WAVELENGTH_M
    return ZonePlateCase(rng.poisson(patterns).astype(np.float32), centres * dx_m * 1e10, beam, phase, dx_m,
                         distance_m, outer_zone_width_m, central_stop_fraction, defocus_m)


def write_cxi(path, case: ZonePlateCase, probe: np.ndarray | None = None) -> None:
    """The case as a CXI file (SI units; CXI moves the sample, so translation = -positions),
    with ``probe`` at entry_1/instrument_1/source_1/probe when given."""
    import h5py

    with h5py.File(path, "w") as f:
        f["entry_1/instrument_1/detector_1/data"] = case.patterns.astype(np.uint32)
        f["entry_1/instrument_1/detector_1/distance"] = case.detector_distance_m
        f["entry_1/instrument_1/detector_1/x_pixel_size"] = DETECTOR_PIXEL_M
        f["entry_1/instrument_1/detector_1/y_pixel_size"] = DETECTOR_PIXEL_M
        f["entry_1/instrument_1/source_1/energy"] = ENERGY_EV * 1.602176634e-19
        translation = np.zeros((len(case.positions_A), 3))
        translation[:, :2] = -case.positions_A[:, [1, 0]] * 1e-10
        f["entry_1/sample_1/geometry_1/translation"] = translation
        if probe is not None:
            f["entry_1/instrument_1/source_1/probe"] = probe
