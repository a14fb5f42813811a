"""An independent electron ptychography simulator for the benchmark grid (NumPy and h5py only; it
never imports ptyacc, so the grid does not score ptyacc on its own forward model).

Physics and conventions (those of ../shared/bench/make_sim.py, so run_ptyrad.py, run_ptychi.py and
ptyacc read the files unchanged):

* wavelength: relativistic, lambda = hc / sqrt(E (2 m c^2 + E)), E in eV;
* probe: psi(k) = A(k) exp(-i chi(k)), A = 1 for |k| <= semiangle / lambda (hard edge),
  chi = pi lambda C10 |k|^2 with C10 = -defocus_A (defocus_A > 0 = underfocus);
  probe(r) = fftshift(ifft2(ifftshift(psi))) normalised to sum |probe|^2 = 1, centre at (K/2, K/2);
* detector: K x K pixels of dk = edge_mrad / 1000 / lambda / (K/2) (the edge at K/2 pixels is the
  edge angle); object pixel dx = 1 / (K dk);
* object: ``n_slices`` slices, each a pure phase exp(+i phase_s) of random atoms (Gaussians of random
  strength at random positions at least ``min_distance_A`` apart), or with ``sample="wse2"`` one
  slice of a WSe2 monolayer seen down its c axis (a hexagonal lattice, a = 3.28 Å: W columns and
  Se2 columns on the two sites of a honeycomb, a/sqrt(3) apart, as Gaussians of peak phase
  ``wse2_phase_rad`` (W, Se2)), turned by a random angle and shifted by a random offset;
  ground-truth pixel [i, j] sits at (i dx, j dx) in Å;
* scan: a raster of probe centres (y, x) in Å, y slow, row-major, placed off the pixel grid; the
  window starts at round(c) - K/2 (c = centre in px) and the probe is moved by the remainder with
  exp(-2 pi i k.f) on its spectrum (exact for a band-limited probe);
* multislice: transmit slice 0, propagate by the slice thickness dz with the Fresnel kernel
  exp(-i pi lambda dz |k|^2) (a probe with defocus f comes to focus after dz = f), transmit slice
  1, ...; the last slice is not propagated (a phase in k, invisible in the intensity);
* pattern: fftshift(|fft2(exit wave, norm="ortho")|^2) times the dose (electrons per pattern: the
  pattern sums to it), then Poisson noise; zero frequency at (K/2, K/2), ky along rows.

Detector and microscope effects (each off by default, each alone or together; the file then holds
what a microscope records and ``/ground_truth`` the rest):

* ``scan_rotation_deg``: the true probe centres are the nominal raster turned about its centre by
  this angle from the +x axis towards +y (y' = x sin + y cos, x' = x cos - y sin); the file's
  ``/positions_A`` is the nominal raster (``write_positions=False`` leaves it out), the truth is
  ``/ground_truth/positions_A``;
* ``transpose``, ``flip_y``, ``flip_x``: the detector reads each pattern flipped along x, then
  along y, then transposed, so that transposing, then flipping y, then flipping x brings it back;
* ``descan_offset_px`` (dy, dx) and ``descan_px_per_A`` ((dy/dy, dy/dx), (dx/dy, dx/dx)): the
  pattern of the probe at p is shifted by offset + G (p - scan centre) detector pixels (a phase
  ramp on the exit wave, as a post-specimen tilt does), ``/ground_truth/descan_px`` (N, 2);
  ``descan_jump_px`` (dy, dx) is added to the second half of the raster's rows (a jump halfway) and
  ``descan_wave_px`` (dy, dx) times sin(2 pi x / the scan's width) (a sine over the scan), neither
  of them a plane;
* ``blur_px``: Gaussian point spread (sigma, px) of the detected intensity, before the noise;
* ``source_size_A`` and ``focal_spread_A``: partial coherence, an incoherent sum over probe
  centres displaced by a Gaussian of that sigma (each axis) and over defocus spread by a Gaussian
  of that sigma (three-point Gauss-Hermite quadrature each: 27 coherent simulations at most);
* ``dead_pixels``, ``hot_pixels``, ``dead_column``: that many random detector pixels read 0, or
  ``hot_fraction`` of the dose plus Poisson noise, and a column (stored layout) reads 0, after the
  noise; ``/ground_truth/bad_pixels`` (K, K) uint8 in the stored layout, 1 = planted;
* ``gain_sigma``: each detector pixel's gain 1 + gain_sigma N(0, 1) (stored layout, at least 0.05)
  multiplies what it counts, after the noise and before the bad pixels; ``/ground_truth/gain``;
* ``c12_A``: the probe's two-fold astigmatism (C12a, C12b) in Å (Krivanek, as the defocus:
  chi += pi lambda (C12a (kx^2 - ky^2) + 2 C12b kx ky)), ``/ground_truth`` attribute ``c12_A``;
* ``nominal_defocus_A``: the file's ``defocus_A`` attribute (what the microscope says) when not
  None; the true one is ``/ground_truth`` attribute ``defocus_A``.

File layout (make_sim.py's, plus the per-slice truth):
  /patterns (ny, nx, K, K) float32; /positions_A (ny*nx, 2) float64 (y, x) probe centres in Å;
  /ground_truth/phase (H, W) float32, the projected phase (sum over slices), attr dx_A;
  /ground_truth/potential_slices_phase (S, H, W) float32, attr slice_thickness_A;
  /ground_truth/probe (K, K) complex64; root attributes energy_eV, semiangle_mrad, defocus_A,
  scan_step_A, dk_invA, dx_A, wavelength_A, edge_mrad, dose_per_pattern, n_slices,
  slice_thickness_A, scan_shape, seed.

    python benchmarks/grid/simulate.py out.h5 --defocus-A 150 --edge-mrad 60 --dose 2e4 --slices 4
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

import h5py
import numpy as np

HC_EV_A = 12398.419843320026  # h c in eV Å
ELECTRON_REST_EV = 510998.95  # m c^2 in eV
EFFECTS = ("c12_A", "scan_rotation_deg", "transpose", "flip_y", "flip_x", "blur_px", "source_size_A", "focal_spread_A",
           "dead_pixels", "hot_pixels", "hot_fraction", "write_positions", "sample",
           "gain_sigma")  # in /ground_truth only


@dataclass
class Setting:
    """One dataset of the grid. Lengths in Å, angles in mrad, dose in electrons per pattern
    (0 = no noise)."""

    defocus_A: float = 0.0
    edge_mrad: float = 60.0
    dose: float = 1e5
    slices: int = 1
    slice_thickness_A: float = 8.0
    energy_eV: float = 80e3
    semiangle_mrad: float = 25.0
    detector_px: int = 64
    scan_shape: tuple[int, int] = (16, 16)
    scan_step_A: float = 0.5
    atoms_per_A2: float = 0.12
    atom_phase_rad: tuple[float, float] = (0.3, 0.7)
    atom_sigma_A: float = 0.35
    min_distance_A: float = 1.0
    seed: int = 0
    sample: str = "random"
    wse2_phase_rad: tuple[float, float] = (0.8, 0.45)
    scan_rotation_deg: float = 0.0
    transpose: bool = False
    flip_y: bool = False
    flip_x: bool = False
    descan_offset_px: tuple[float, float] = (0.0, 0.0)
    descan_px_per_A: tuple[tuple[float, float], tuple[float, float]] = ((0.0, 0.0), (0.0, 0.0))
    descan_jump_px: tuple[float, float] = (0.0, 0.0)
    descan_wave_px: tuple[float, float] = (0.0, 0.0)
    blur_px: float = 0.0
    source_size_A: float = 0.0
    focal_spread_A: float = 0.0
    dead_pixels: int = 0
    hot_pixels: int = 0
    hot_fraction: float = 0.05
    dead_column: int | None = None
    gain_sigma: float = 0.0
    nominal_defocus_A: float | None = None
    c12_A: tuple[float, float] = (0.0, 0.0)
    write_positions: bool = True


def wavelength_A(energy_eV: float) -> float:
    """Relativistic electron wavelength in Å."""
    return HC_EV_A / np.sqrt(energy_eV * (2.0 * ELECTRON_REST_EV + energy_eV))


def centred_frequencies(n: int, dk_invA: float) -> tuple[np.ndarray, np.ndarray]:
    """(ky, kx) grids (n, n) in 1/Å with zero frequency at index n // 2."""
    k = (np.arange(n) - n // 2) * dk_invA
    return np.meshgrid(k, k, indexing="ij")


def probe_wave(n: int, dk_invA: float, lam_A: float, semiangle_mrad: float, defocus_A: float,
               c12_A: tuple[float, float] = (0.0, 0.0), c30_A: float = 0.0) -> np.ndarray:
    """(n, n) complex probe, centre at (n/2, n/2), sum |p|^2 = 1; ``c12_A`` the two-fold
    astigmatism (C12a, C12b) in Å, Krivanek: chi += pi lambda (C12a (kx^2 - ky^2) + 2 C12b kx ky);
    ``c30_A`` the spherical aberration in Å: chi += pi / 2 lambda^3 C30 |k|^4."""
    ky, kx = centred_frequencies(n, dk_invA)
    k2 = ky ** 2 + kx ** 2
    aperture = np.sqrt(k2) <= semiangle_mrad * 1e-3 / lam_A
    chi = np.pi * lam_A * ((-defocus_A) * k2 + c12_A[0] * (kx ** 2 - ky ** 2) + 2 * c12_A[1] * kx * ky)
    chi = chi + 0.5 * np.pi * lam_A ** 3 * c30_A * k2 ** 2
    probe = np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(aperture * np.exp(-1j * chi))))
    return probe / np.sqrt(np.sum(np.abs(probe) ** 2))


def fresnel_kernel(n: int, dx_A: float, lam_A: float, dz_A: float) -> np.ndarray:
    """(n, n) propagator exp(-i pi lambda dz |k|^2), unshifted layout (numpy fftfreq)."""
    k = np.fft.fftfreq(n, d=dx_A)
    return np.exp(-1j * np.pi * lam_A * dz_A * (k[:, None] ** 2 + k[None, :] ** 2))


def random_atoms(shape_px: tuple[int, int], dx_A: float, setting: Setting, rng: np.random.Generator) -> np.ndarray:
    """(H, W) phase of one slice: Gaussians of random peak phase at random positions (dart throwing
    with a minimum distance), covering the canvas and a margin."""
    height_A, width_A = shape_px[0] * dx_A, shape_px[1] * dx_A
    wanted = int(setting.atoms_per_A2 * height_A * width_A)
    sites: list[np.ndarray] = []
    for _ in range(50 * wanted):
        if len(sites) == wanted:
            break
        site = rng.uniform([-1.0, -1.0], [height_A + 1.0, width_A + 1.0])
        if not sites or np.min(np.hypot(*(np.asarray(sites) - site).T)) >= setting.min_distance_A:
            sites.append(site)
    y = np.arange(shape_px[0]) * dx_A
    x = np.arange(shape_px[1]) * dx_A
    phase = np.zeros(shape_px)
    for site, peak in zip(sites, rng.uniform(*setting.atom_phase_rad, size=len(sites))):
        phase += peak * np.exp(-(y[:, None] - site[0]) ** 2 / (2 * setting.atom_sigma_A ** 2)) \
                      * np.exp(-(x[None, :] - site[1]) ** 2 / (2 * setting.atom_sigma_A ** 2))
    return phase


def wse2_monolayer(shape_px: tuple[int, int], dx_A: float, setting: Setting, rng: np.random.Generator,
                   a_A: float = 3.28) -> np.ndarray:
    """(H, W) phase of a WSe2 monolayer down [001]: W at the lattice points of a hexagonal lattice
    (a_A), the Se2 pair's column at a third of the long diagonal (a_A / sqrt(3) from W), each a
    Gaussian of ``atom_sigma_A`` with peak ``wse2_phase_rad`` (W, Se2); the lattice turned by a
    random angle and shifted by a random fraction of a cell."""
    turn = rng.uniform(0.0, 2 * np.pi)
    shift = rng.uniform(0.0, 1.0, size=2)
    basis = a_A * np.array([[1.0, 0.0], [0.5, np.sqrt(3.0) / 2]])  # rows: a1, a2 as (x, y)
    basis = basis @ np.array([[np.cos(turn), np.sin(turn)], [-np.sin(turn), np.cos(turn)]])
    height_A, width_A = shape_px[0] * dx_A, shape_px[1] * dx_A
    reach = int(np.ceil(np.hypot(height_A, width_A) / a_A)) + 2
    i, j = np.meshgrid(np.arange(-reach, reach + 1), np.arange(-reach, reach + 1), indexing="ij")
    centre = np.array([width_A, height_A]) / 2
    lattice = (np.stack([i.ravel(), j.ravel()], 1) + shift) @ basis + centre  # (M, 2) (x, y) Å
    y = np.arange(shape_px[0]) * dx_A
    x = np.arange(shape_px[1]) * dx_A
    phase = np.zeros(shape_px)
    for fraction, peak in zip((0.0, 1.0 / 3.0), setting.wse2_phase_rad):
        sites = lattice + fraction * (basis[0] + basis[1])
        inside = (sites[:, 0] > -2.0) & (sites[:, 0] < width_A + 2.0) & (sites[:, 1] > -2.0) & (sites[:, 1] < height_A + 2.0)
        for sx, sy in sites[inside]:
            phase += peak * np.exp(-(y[:, None] - sy) ** 2 / (2 * setting.atom_sigma_A ** 2)) \
                          * np.exp(-(x[None, :] - sx) ** 2 / (2 * setting.atom_sigma_A ** 2))
    return phase


def exit_wave(probe: np.ndarray, slices: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Multislice: (K, K) probe through (S, K, K) complex transmissions, the kernel between slices."""
    wave = probe * slices[0]
    for transmission in slices[1:]:
        wave = np.fft.ifft2(np.fft.fft2(wave) * kernel) * transmission
    return wave


def scan_positions_A(setting: Setting, canvas_A: float) -> np.ndarray:
    """(N, 2) raster of probe centres (y, x) in Å, centred on the canvas, off the pixel grid."""
    ny, nx = setting.scan_shape
    start = canvas_A / 2 - (np.array([ny, nx]) - 1) * setting.scan_step_A / 2 + np.array([0.137, 0.061])
    iy, ix = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    return np.stack([start[0] + iy.ravel() * setting.scan_step_A, start[1] + ix.ravel() * setting.scan_step_A], 1)


def patterns_at(probe: np.ndarray, transmissions: np.ndarray, positions_px: np.ndarray, kernel: np.ndarray,
                descan_px: np.ndarray | None = None) -> np.ndarray:
    """(N, K, K) noise-free fftshifted intensities (each sums to 1) of the probe at each centre
    (N, 2) in object pixels through the (S, H, W) transmissions, each shifted on the detector by
    ``descan_px`` (N, 2) (dy, dx) pixels when given."""
    n = probe.shape[0]
    q = np.fft.fftfreq(n)
    r = np.arange(n) / n
    spectrum = np.fft.fft2(probe)
    out = np.empty((len(positions_px), n, n))
    for j, centre in enumerate(positions_px):
        whole = np.round(centre).astype(int)
        frac = centre - whole
        moved = np.fft.ifft2(spectrum * np.exp(-2j * np.pi * (frac[0] * q[:, None] + frac[1] * q[None, :])))
        top, left = whole - n // 2
        if top < 0 or left < 0 or top + n > transmissions.shape[1] or left + n > transmissions.shape[2]:
            raise ValueError(f"probe window at {centre} px leaves the object {transmissions.shape[1:]}")
        wave = exit_wave(moved, transmissions[:, top:top + n, left:left + n], kernel)
        if descan_px is not None:
            wave = wave * np.exp(2j * np.pi * (descan_px[j, 0] * r[:, None] + descan_px[j, 1] * r[None, :]))
        out[j] = np.fft.fftshift(np.abs(np.fft.fft2(wave, norm="ortho")) ** 2)
    return out


def simulate(setting: Setting) -> dict:
    """Everything the file holds, as arrays and attributes."""
    rng = np.random.default_rng(setting.seed)
    lam = wavelength_A(setting.energy_eV)
    n = setting.detector_px
    dk = setting.edge_mrad * 1e-3 / lam / (n // 2)
    dx = 1.0 / (n * dk)
    span_A = (max(setting.scan_shape) - 1) * setting.scan_step_A
    size = int(np.ceil(span_A / dx)) + n + 16
    size += size % 2
    if setting.sample == "wse2":
        if setting.slices != 1:
            raise ValueError("a WSe2 monolayer is one slice: set slices=1")
        phases = wse2_monolayer((size, size), dx, setting, rng)[None]
    elif setting.sample == "random":
        phases = np.stack([random_atoms((size, size), dx, setting, rng) for _ in range(setting.slices)])
    else:
        raise ValueError(f"sample {setting.sample!r}: 'random' or 'wse2'")
    probe = probe_wave(n, dk, lam, setting.semiangle_mrad, setting.defocus_A, setting.c12_A)
    nominal = scan_positions_A(setting, size * dx)
    positions = rotated(nominal, setting.scan_rotation_deg)
    kernel = fresnel_kernel(n, dx, lam, setting.slice_thickness_A)
    descan = descan_px(setting, positions)
    clean = np.zeros((len(positions), n, n))
    for shift, focus, weight in coherence_quadrature(setting):
        variant = probe if focus == 0 else probe_wave(n, dk, lam, setting.semiangle_mrad, setting.defocus_A + focus,
                                                      setting.c12_A)
        clean += weight * patterns_at(variant, np.exp(1j * phases), (positions + shift) / dx, kernel, descan)
    clean = blurred(clean, setting.blur_px)
    patterns = rng.poisson(clean * setting.dose).astype(np.float64) if setting.dose > 0 else clean
    patterns = read_out(patterns, setting)
    gain = np.maximum(1.0 + setting.gain_sigma * rng.standard_normal((n, n)), 0.05) if setting.gain_sigma else None
    if gain is not None:
        patterns = patterns * gain
    bad = np.zeros((n, n), dtype=bool)
    if setting.dead_pixels or setting.hot_pixels:
        picked = rng.choice(n * n, setting.dead_pixels + setting.hot_pixels, replace=False)
        dead, hot = np.unravel_index(picked[:setting.dead_pixels], (n, n)), np.unravel_index(picked[setting.dead_pixels:], (n, n))
        patterns[:, dead[0], dead[1]] = 0
        level = setting.hot_fraction * (setting.dose if setting.dose > 0 else 1.0)
        patterns[:, hot[0], hot[1]] = rng.poisson(level, size=(len(patterns), len(hot[0]))) if setting.dose > 0 else level
        bad[dead], bad[hot] = True, True
    if setting.dead_column is not None:
        patterns[:, :, setting.dead_column], bad[:, setting.dead_column] = 0, True
    return {"patterns": patterns.reshape(*setting.scan_shape, n, n).astype(np.float32), "positions_A": positions,
            "nominal_positions_A": nominal, "descan_px": descan, "bad_pixels": bad, "gain": gain,
            "phases": phases, "probe": probe, "dk_invA": dk, "dx_A": dx, "wavelength_A": lam}


def rotated(positions_A: np.ndarray, angle_deg: float) -> np.ndarray:
    """``positions_A`` (N, 2) (y, x) turned about their centre by ``angle_deg`` from +x towards +y."""
    centre = positions_A.mean(0)
    t = np.radians(angle_deg)
    y, x = (positions_A - centre).T
    return centre + np.stack([x * np.sin(t) + y * np.cos(t), x * np.cos(t) - y * np.sin(t)], 1)


def descan_px(setting: Setting, positions_A: np.ndarray) -> np.ndarray | None:
    """(N, 2) detector shift (dy, dx) px of each pattern: offset + G (p - scan centre), the jump on
    the second half of the rows and the sine over the scan's width; None if none."""
    gradient = np.asarray(setting.descan_px_per_A, dtype=np.float64)
    jump, wave = np.asarray(setting.descan_jump_px), np.asarray(setting.descan_wave_px)
    if not (np.any(gradient) or np.any(setting.descan_offset_px) or np.any(jump) or np.any(wave)):
        return None
    row = np.arange(len(positions_A)) // setting.scan_shape[1]
    column = np.arange(len(positions_A)) % setting.scan_shape[1]
    return (np.asarray(setting.descan_offset_px) + (positions_A - positions_A.mean(0)) @ gradient.T
            + (row >= setting.scan_shape[0] // 2)[:, None] * jump
            + np.sin(2 * np.pi * column / setting.scan_shape[1])[:, None] * wave)


def coherence_quadrature(setting: Setting) -> list[tuple[np.ndarray, float, float]]:
    """(centre shift (2,) Å, defocus change Å, weight) of the incoherent sum: a three-point
    Gauss-Hermite rule (nodes 0, +-sqrt(3) sigma; weights 2/3, 1/6, 1/6) per Gaussian spread."""
    def rule(sigma: float) -> list[tuple[float, float]]:
        return [(0.0, 1.0)] if sigma == 0 else [(0.0, 2 / 3), (-np.sqrt(3.0) * sigma, 1 / 6), (np.sqrt(3.0) * sigma, 1 / 6)]
    return [(np.array([dy, dx]), focus, wy * wx * wf) for dy, wy in rule(setting.source_size_A)
            for dx, wx in rule(setting.source_size_A) for focus, wf in rule(setting.focal_spread_A)]


def blurred(patterns: np.ndarray, sigma_px: float) -> np.ndarray:
    """(N, K, K) patterns convolved (periodically) with a Gaussian of ``sigma_px`` sampled on the
    pixel grid and normalised to sum 1 (positive, no ringing); unchanged for 0."""
    if sigma_px == 0:
        return patterns
    d = np.fft.fftfreq(patterns.shape[-1]) * patterns.shape[-1]  # periodic pixel distance from pixel 0
    kernel = np.exp(-(d[:, None] ** 2 + d[None, :] ** 2) / (2 * sigma_px ** 2))
    return np.maximum(np.fft.ifft2(np.fft.fft2(patterns) * np.fft.fft2(kernel / kernel.sum())).real, 0.0)


def read_out(patterns: np.ndarray, setting: Setting) -> np.ndarray:
    """The patterns as the detector stores them: flipped along x, then y, then transposed (the
    inverse of transposing, then flipping y, then flipping x)."""
    if setting.flip_x:
        patterns = patterns[..., ::-1]
    if setting.flip_y:
        patterns = patterns[..., ::-1, :]
    if setting.transpose:
        patterns = np.swapaxes(patterns, -1, -2)
    return np.ascontiguousarray(patterns)


def write(path: str, setting: Setting) -> None:
    """Simulate and write the bench layout to ``path``."""
    sim = simulate(setting)
    with h5py.File(path, "w") as f:
        f.create_dataset("patterns", data=sim["patterns"])
        if setting.write_positions:
            f.create_dataset("positions_A", data=sim["nominal_positions_A"])
        truth = f.create_group("ground_truth")
        truth.create_dataset("positions_A", data=sim["positions_A"])
        truth.create_dataset("bad_pixels", data=sim["bad_pixels"].astype(np.uint8))
        if sim["descan_px"] is not None:
            truth.create_dataset("descan_px", data=sim["descan_px"])
        if sim["gain"] is not None:
            truth.create_dataset("gain", data=sim["gain"].astype(np.float32))
        truth.attrs.update(defocus_A=setting.defocus_A, c12_A=np.asarray(setting.c12_A),
                           scan_rotation_deg=setting.scan_rotation_deg, blur_px=setting.blur_px,
                           transpose=setting.transpose, flip_y=setting.flip_y, flip_x=setting.flip_x)
        if setting.sample != "random":
            truth.attrs["sample"] = setting.sample
        truth.create_dataset("phase", data=sim["phases"].sum(0).astype(np.float32)).attrs["dx_A"] = sim["dx_A"]
        slices = truth.create_dataset("potential_slices_phase", data=sim["phases"].astype(np.float32))
        slices.attrs["slice_thickness_A"] = setting.slice_thickness_A
        slices.attrs["dx_A"] = sim["dx_A"]
        truth.create_dataset("probe", data=sim["probe"].astype(np.complex64))
        attrs = {key: value for key, value in asdict(setting).items()
                 if key not in EFFECTS and not isinstance(value, (tuple, list, type(None)))}
        if setting.nominal_defocus_A is not None:
            attrs["defocus_A"] = setting.nominal_defocus_A
        attrs.update(dk_invA=sim["dk_invA"], dx_A=sim["dx_A"], wavelength_A=sim["wavelength_A"],
                     dose_per_pattern=setting.dose, n_slices=setting.slices, scan_shape=np.array(setting.scan_shape),
                     simulator="benchmarks/grid/simulate.py (NumPy multislice, independent of ptyacc)")
        for key, value in attrs.items():
            f.attrs[key] = value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--defocus-A", type=float, default=0.0)
    parser.add_argument("--edge-mrad", type=float, default=60.0)
    parser.add_argument("--dose", type=float, default=1e5, help="electrons per pattern; 0 = no noise")
    parser.add_argument("--slices", type=int, default=1)
    parser.add_argument("--slice-thickness-A", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write(args.out, Setting(defocus_A=args.defocus_A, edge_mrad=args.edge_mrad, dose=args.dose, slices=args.slices,
                            slice_thickness_A=args.slice_thickness_A, seed=args.seed))


if __name__ == "__main__":
    main()
