"""Make the abTEM test cases of ``tests/data/abtem/``: thick SrTiO3 [001] crystals simulated by
abTEM, a multislice code that never imports ptyacc, to check ptyacc's sign conventions (tilt,
defocus, scan rotation, pattern orientation, multislice order, slice thickness) against data
that ptyacc did not simulate itself.

What it simulates
-----------------
* Sample: SrTiO3 (cubic perovskite, a = 3.905 Å) along [001], ``CELLS`` x ``CELLS`` unit cells
  across (periodic), ``--cells-deep`` unit cells thick, sliced by abTEM into quarter cells
  (0.976 Å). Near the scan's centre a few atoms of the top unit cell are removed (an Sr and an O
  column's top atoms), which breaks the crystal's inversion and mirror symmetry, so that a
  flipped, transposed or point-inverted model cannot explain the data as well as the true one.
  No thermal vibrations, unless a case asks for ``phonons`` configurations of frozen phonons (atoms
  displaced by ``PHONON_SIGMA_A`` rms along each axis; the patterns are their configurations' mean
  intensity, the truth their mean potential). Lobato parametrisation, infinite projection.
* Probe: 300 keV, 20 mrad aperture (sharp), defocus ``--defocus`` Å (positive = underfocus,
  abTEM's and ptyacc's ``defocus = -C10``) at the entrance plane; tilt ``--tilt Y X`` mrad: the
  beam's direction against the zone axis, [y, x]. abTEM applies the tilt to every slice's
  propagator, exp(-2 pi i dz (kx tan t_x + ky tan t_y)), and keeps the direct beam at k = 0.
* Scan: ``--scan NY NX`` raster of ``--step`` Å, slow axis along the scan's y, rotated by
  ``--rotation`` degrees: the scan's fast (x) step is step (sin r, cos r) in (y, x), so that
  the rotation turns the x axis towards the y axis.
* Patterns: abTEM's exit waves on a grid three times finer than ptyacc's object pixel, |FFT|^2
  (numpy's forward FFT: a wave exp(+2 pi i k0.r) lands at +k0), the K x K lowest frequencies kept
  (the detector's pixels are the periodic cell's reciprocal pixels: dk = 1 / (K dx), the cell
  being one probe window wide), indexed [ky, kx] with ky along rows, fftshifted (zero frequency
  at (K/2, K/2)), in units of the incident intensity times ``--dose`` (Poisson counts when
  ``--noise``; else float32 expected counts).

File layout (ptyacc's demo layout)
----------------------------------
``/patterns`` (NY, NX, K, K); ``/positions_A`` (N, 2) (y, x) Å, in the frame of
``/ground_truth``; root attributes ``energy_eV``, ``semiangle_mrad``, ``defocus_A``,
``dk_invA``, ``dx_A``, ``scan_step_A``, ``scan_shape``, ``simulator``. The truth that a user
would not know is in ``/ground_truth``: ``phase`` (Ny, Nx) the projected phase sigma V summed
over the thickness, ``cell_phase`` (C, Ny, Nx) the same per unit cell of depth (the slices of a
one-cell model), both band-limited to the dx grid, pixel [r, c] at (r dx, c dx); attributes
``tilt_mrad`` [y, x], ``scan_rotation_deg``, ``cell_thickness_A``.

Run (abTEM is not a ptyacc dependency)::

    python3 -m venv /tmp/abtem-venv && /tmp/abtem-venv/bin/pip install abtem h5py
    OMP_NUM_THREADS=1 /tmp/abtem-venv/bin/python make_cases.py conventions
    OMP_NUM_THREADS=1 /tmp/abtem-venv/bin/python make_cases.py tilted

Made with abTEM 1.0.11, ase 3.29.0, numpy 2.4.6.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import h5py
import numpy as np

A_STO = 3.905
ENERGY_EV = 300e3
SEMIANGLE_MRAD = 20.0
K = 64                   # detector pixels; one probe window = the periodic cell
CELLS = 4                # unit cells across the periodic cell: dx = CELLS a / K = 0.244 Å
OVERSAMPLE = 3
SLICES_PER_CELL = 4
VACANT_CELLS = 3         # an Sr and an O column are empty in the top three cells
PHONON_SIGMA_A = 0.08    # rms displacement along each axis of a frozen-phonon case (about SrTiO3's at room temperature)

CASES = {
    # small: every convention's sign, from the forward model's loss at the truth
    "conventions": dict(cells_deep=10, tilt=(2.0, -1.5), defocus=60.0, scan=(5, 4), step=0.9, rotation=12.0,
                        dose=0.0),
    # the tilt refined from zero: a 2.5 mrad mistilt, 40 A thick, counted
    "tilted": dict(cells_deep=10, tilt=(2.0, -1.5), defocus=60.0, scan=(10, 10), step=0.5, rotation=0.0,
                   dose=1e6),
    "untilted": dict(cells_deep=10, tilt=(0.0, 0.0), defocus=60.0, scan=(10, 10), step=0.5, rotation=0.0,
                     dose=1e6),
    # a thinner crystal tilted along +y and +x (benchmarks/tilt/distribution.py's c6_a): a tilt refined from zero
    "thin_tilted": dict(cells_deep=6, tilt=(1.0, 1.0), defocus=60.0, scan=(10, 10), step=0.5, rotation=0.0,
                        dose=1e6),
    # thermal vibrations (8 frozen-phonon configurations): 3.4 % of the counts beyond the disk, where on several slices
    # the Poisson loss stopped short at many counts until its pull was capped
    # (benchmarks/records/2026-12-07-poisson-pull-cap.md)
    "vibrating": dict(cells_deep=6, tilt=(0.0, 0.0), defocus=60.0, scan=(12, 12), step=0.5, rotation=0.0,
                      dose=1e6, phonons=8),
    # the sampling a tilt needs (docs/how-to/tilt-and-sampling.md): 11 cells, a 20 x 20 scan; not shipped
    # (benchmarks/records/2026-12-02-tilt-sampling.md makes it)
    "wide": dict(cells_deep=11, tilt=(2.0, -1.5), defocus=60.0, scan=(20, 20), step=0.5, rotation=0.0,
                 dose=1e6),
}


def sto_atoms(cells_deep: int, vacancy_xy: tuple[float, float]):
    """SrTiO3 [001], CELLS x CELLS x cells_deep unit cells, (x, y, z) Å with z the beam's
    direction; the atoms of the Sr and O columns nearest ``vacancy_xy`` removed from the top cells."""
    import ase

    basis = {"Sr": [(0, 0, 0)], "Ti": [(0.5, 0.5, 0.5)], "O": [(0.5, 0.5, 0), (0.5, 0, 0.5), (0, 0.5, 0.5)]}
    symbols, positions = [], []
    for i in range(CELLS):
        for j in range(CELLS):
            for k in range(cells_deep):
                for element, sites in basis.items():
                    for site in sites:
                        symbols.append(element)
                        positions.append(((i + site[0]) * A_STO, (j + site[1]) * A_STO, (k + site[2] + 0.25) * A_STO))
    positions = np.array(positions)
    distance = np.linalg.norm(positions[:, :2] - np.asarray(vacancy_xy), axis=1)
    remove = set()
    for element in ("Sr", "O"):  # the columns nearest vacancy_xy, their atoms in the top VACANT_CELLS cells
        candidates = np.flatnonzero(np.array(symbols) == element)
        nearest = distance[candidates].min()
        column = candidates[np.abs(distance[candidates] - nearest) < 1e-6]
        remove.update(int(n) for n in column if positions[n, 2] < VACANT_CELLS * A_STO)
    keep = [n for n in range(len(symbols)) if n not in remove]
    atoms = ase.Atoms([symbols[n] for n in keep], positions=positions[keep],
                      cell=[CELLS * A_STO, CELLS * A_STO, cells_deep * A_STO], pbc=True)
    return atoms


def scan_positions_A(shape: tuple[int, int], step_A: float, rotation_deg: float, centre_A: float) -> np.ndarray:
    """(N, 2) (y, x) Å, row-major (slow = the scan's y), centred on ``centre_A``, rotated as the
    module docstring says."""
    iy, ix = np.meshgrid(np.arange(shape[0]) - (shape[0] - 1) / 2, np.arange(shape[1]) - (shape[1] - 1) / 2,
                         indexing="ij")
    r = math.radians(rotation_deg)
    fast, slow = np.array([math.sin(r), math.cos(r)]), np.array([math.cos(r), -math.sin(r)])
    yx = step_A * (ix.reshape(-1, 1) * fast + iy.reshape(-1, 1) * slow)
    return yx + centre_A


def band_limit(image: np.ndarray, n_out: int) -> np.ndarray:
    """A real periodic image (..., n, n) sampled on n_out x n_out points, its n_out lowest frequencies kept."""
    n = image.shape[-1]
    spectrum = np.fft.fftshift(np.fft.fft2(image), axes=(-2, -1))
    c, h = n // 2, n_out // 2
    small = np.fft.ifftshift(spectrum[..., c - h:c - h + n_out, c - h:c - h + n_out], axes=(-2, -1))
    return np.real(np.fft.ifft2(small)) * (n_out / n) ** 2


def simulate(name: str, out: Path, seed: int = 3, fine_truth: bool = False) -> None:
    import abtem
    import dask
    from abtem.core.energy import energy2sigma

    case = CASES[name]
    abtem.config.set({"device": "cpu", "fft": "numpy", "precision": "float64", "diagnostics.progress_bar": False})
    dask.config.set(scheduler="synchronous")
    cell_A = CELLS * A_STO
    dx_A = cell_A / K
    sim_px = K * OVERSAMPLE
    positions = scan_positions_A(case["scan"], case["step"], case["rotation"], cell_A / 2)  # (y, x)
    centre = positions.mean(0)
    atoms = sto_atoms(case["cells_deep"], (centre[1] + 0.4 * A_STO, centre[0] + 0.1 * A_STO))
    if case.get("phonons"):
        atoms = abtem.FrozenPhonons(atoms, num_configs=case["phonons"], sigmas=PHONON_SIGMA_A, seed=seed)
    potential = abtem.Potential(atoms, gpts=(sim_px, sim_px), slice_thickness=A_STO / SLICES_PER_CELL,
                                projection="infinite", parametrization="lobato")
    slices = potential.build().compute().array  # (S, x, y) eV Å; (configs, S, x, y) with frozen phonons
    if case.get("phonons"):
        slices = slices.mean(0)  # the truth: the configurations' mean potential
    ty, tx = case["tilt"]
    probe = abtem.Probe(energy=ENERGY_EV, semiangle_cutoff=SEMIANGLE_MRAD, defocus=case["defocus"], tilt=(tx, ty))
    probe.grid.match(potential)
    incident = probe.build(scan=[(cell_A / 2, cell_A / 2)]).compute().array
    norm = float(np.sum(np.abs(incident) ** 2)) * sim_px**2
    waves = probe.multislice(potential, scan=positions[:, ::-1]).compute().array  # (N, x, y); (configs, N, x, y)
    far = np.fft.fftshift(np.fft.fft2(np.swapaxes(waves, -1, -2)), axes=(-2, -1))  # [ky, kx]
    c = sim_px // 2
    intensity = np.abs(far[..., c - K // 2:c + K // 2, c - K // 2:c + K // 2]) ** 2 / norm
    if case.get("phonons"):
        intensity = intensity.mean(0)  # incoherent over the configurations
    rng = np.random.default_rng(seed)
    dose = case["dose"]
    patterns = rng.poisson(intensity * dose).astype(np.uint16) if dose else (intensity * 1e5).astype(np.float32)
    sigma = energy2sigma(ENERGY_EV)
    cell_phase = sigma * np.swapaxes(slices, -1, -2).reshape(case["cells_deep"], SLICES_PER_CELL, sim_px, sim_px).sum(1)
    cell_phase = band_limit(cell_phase, K)  # (C, K, K) one periodic cell, pixel [r, c] at (r dx, c dx)
    # the truth over the scanned area plus half a window on each side, in the positions' frame
    low = np.floor((positions.min(0) - K / 2 * dx_A) / dx_A).astype(int)
    high = np.ceil((positions.max(0) + K / 2 * dx_A) / dx_A).astype(int) + 1
    rows, cols = np.arange(low[0], high[0]) % K, np.arange(low[1], high[1]) % K
    canvas = cell_phase[:, rows[:, None], cols[None, :]]
    with h5py.File(out, "w") as f:
        f.create_dataset("patterns", data=patterns.reshape(*case["scan"], K, K), compression="gzip", shuffle=True)
        f["positions_A"] = positions - low * dx_A
        f.attrs.update(energy_eV=ENERGY_EV, semiangle_mrad=SEMIANGLE_MRAD, defocus_A=case["defocus"],
                       dk_invA=1 / (K * dx_A), dx_A=dx_A, scan_step_A=case["step"], scan_shape=case["scan"],
                       dose_per_pattern=dose if dose else 1e5, simulator=f"abTEM {abtem.__version__}",
                       sample=f"SrTiO3 [001], {case['cells_deep']} unit cells thick, "
                              "an Sr and an O column empty in the top 3 cells"
                              + (f", {case['phonons']} frozen-phonon configurations of {PHONON_SIGMA_A} A rms"
                                 if case.get("phonons") else ""))
        truth = f.create_group("ground_truth")
        truth.create_dataset("phase", data=canvas.sum(0).astype(np.float32), compression="gzip")
        truth.create_dataset("cell_phase", data=canvas.astype(np.float32), compression="gzip")
        # the incident probe at the window's centre, band-limited to the detector: (K, K) complex, unit intensity
        spectrum = np.fft.fftshift(np.fft.fft2(np.swapaxes(incident.reshape(sim_px, sim_px), -1, -2)))
        spectrum = spectrum[c - K // 2:c + K // 2, c - K // 2:c + K // 2]
        small = np.fft.ifft2(np.fft.ifftshift(spectrum))
        truth.create_dataset("probe", data=(small / np.sqrt(np.sum(np.abs(small) ** 2))).astype(np.complex64))
        if fine_truth:  # one periodic cell per abTEM slice (a quarter unit cell): (S, K, K)
            fine = band_limit(sigma * np.swapaxes(slices, -1, -2), K)
            truth.create_dataset("slice_phase", data=np.roll(fine, -low, axis=(-2, -1)).astype(np.float32))
        truth.attrs.update(tilt_mrad=case["tilt"], scan_rotation_deg=case["rotation"], cell_thickness_A=A_STO,
                           dx_A=dx_A)
    print(f"{out}: {len(positions)} patterns of {K}^2, mean total {patterns.reshape(len(positions), -1).sum(1).mean():.4g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", choices=sorted(CASES))
    parser.add_argument("--dir", type=Path, default=Path(__file__).parent)
    parser.add_argument("--fine-truth", action="store_true", help="also store the truth per abTEM slice")
    args = parser.parse_args()
    for name in args.cases:
        simulate(name, args.dir / f"sto_{name}.h5", fine_truth=args.fine_truth)


if __name__ == "__main__":
    main()
