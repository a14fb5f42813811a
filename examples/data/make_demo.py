"""Make ``demo_mos2.h5``: a small electron 4D-STEM (ptychography) dataset of monolayer MoS2,
simulated with abTEM, a multislice code that is independent of ptyacc.

What it simulates
-----------------
* Sample: one 2H-MoS2 monolayer (``ase.build.mx2``, a = 3.16 Å, S-S thickness 3.17 Å),
  orthogonalised with ``abtem.orthogonalize_cell``, tiled over a square 38.4 Å x 38.4 Å
  periodic cell, with ONE sulfur atom removed from the top layer near the middle of the scan
  (a single S vacancy: its S2 column keeps half its phase). The vacancy breaks the lattice's
  symmetry, so a reconstruction's position and orientation can be checked by eye.
  No thermal vibrations (one frozen configuration, atoms at rest).
  The orthogonal cell (3.16 x 5.47 Å) does not tile 38.4 Å exactly (12.15 x 7.02 cells), so the
  periodic cell has a seam along its edges, 14.6 Å from the nearest probe position: a row of
  atoms doubled 0.09 Å apart and a column squeezed to 0.48 Å. Only the probe's far tails reach
  it. Measured on the middle scan row: replacing the seam by a 2 Å vacuum frame changes the
  noise-free patterns by at most 0.17 Poisson sigma at this dose (73 of 1e5 counts per pattern,
  0.5% of the outer dark field), so the file keeps it.
* Potential: abTEM ``Potential``, Lobato parametrisation, infinite projection, three slices
  of 1.72 Å (top S layer, Mo layer, bottom S layer each in their own slice): abTEM runs its own
  multislice (transmit, then Fresnel-propagate) through them.
* Probe: 80 keV, 25 mrad aperture semi-angle, no aberrations except defocus. ``defocus_A``
  = 120 Å underfocus, measured at the middle (Mo) slice, where a single-slice model puts the
  object; abTEM's probe, defined at the entrance plane one slice (1.72 Å) above it, is given
  defocus = 120 + 1.72 Å. abTEM's convention: ``defocus = -C10``, positive = underfocus
  (the beam still converges at the sample and focuses ``defocus`` Å below the entrance plane).
* Scan: 24 x 24 raster, 0.4 Å step, slow axis y (rows), no position errors.
* Detector: 64 x 64 pixels of dk_invA = 1 / (64 * 0.2 Å) = 0.078125 1/Å (so dx_A = 0.2 Å),
  covering |k_x|, |k_y| <= 2.5 1/Å (104 mrad); the bright-field disk radius is 7.66 pixels.
* Noise: Poisson counts for a dose of 1e5 electrons per pattern (incident), seed 7.

How the 64 x 64 patterns are made
---------------------------------
abTEM computes each exit wave on the whole periodic cell: 576 x 576 points of
dx_A / 3 = 0.0667 Å (fine enough that abTEM's 2/3-Nyquist antialiasing aperture, 5 1/Å,
lies outside the detector's corners). This script then, in NumPy, takes
|FFT2(exit wave)|^2 on that grid (reciprocal pixel 1/38.4 Å = dk_invA / 3), normalised to the
incident probe's total intensity, and sums it over 3 x 3 blocks centred on multiples of
dk_invA (the 64 x 64 detector pixels: a detector integrates the intensity over its pixels).
FFT convention: numpy's forward FFT, F(k) = sum_r psi(r) exp(-2 pi i k.r), so a wave
exp(+2 pi i k0.r) lands at +k0. Axes: ky along rows, kx along columns, fftshifted, so zero
frequency is at pixel (32, 32). abTEM stores arrays as [x, y]; they are transposed to [y, x].

Ground truth
------------
``/ground_truth/phase`` = sigma * V_proj (radians), the sum of the three slices' projected
potentials of the same abTEM potential times abTEM's interaction parameter sigma(80 keV),
band-limited by Fourier cropping from the 0.0667 Å grid to the dx_A = 0.2 Å grid (the
detector's band), and cut to 110 x 110 pixels: the scanned area plus half a 64-pixel probe
window on each side. Pixel [r, c] sits at (y, x) = (r * dx_A, c * dx_A); ``/positions_A`` are
in this frame (the first probe at (6.4, 6.4) Å, the last at (15.6, 15.6) Å). abTEM's object
transmission is exp(+i sigma V_proj) per slice.

How to run
----------
In a separate virtual environment (abTEM is not a dependency of ptyacc):

    python3 -m venv /tmp/abtem-venv
    /tmp/abtem-venv/bin/pip install abtem ase h5py
    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 /tmp/abtem-venv/bin/python make_demo.py

It writes ``demo_mos2.h5`` beside this script (``--out`` to change) in under two minutes on one
core. Made with abTEM 1.0.11, ase 3.29.0, numpy 2.4.6, h5py 3.16.0, Python 3.11. The demo runs the
copy that ships inside the package, ``ptyacc/demo/demo_mos2.h5``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import h5py
import numpy as np

# ---- parameters -------------------------------------------------------------------------
ENERGY_EV = 80e3
SEMIANGLE_MRAD = 25.0
DEFOCUS_A = 120.0          # at the middle (Mo) slice; positive = underfocus
SCAN_SHAPE = (24, 24)      # (slow = y, fast = x)
SCAN_STEP_A = 0.4
DETECTOR_PX = 64
DX_A = 0.2                 # object pixel; dk_invA = 1 / (DETECTOR_PX * DX_A)
OVERSAMPLE = 3             # simulation pixel = DX_A / OVERSAMPLE
BIN = 3                    # detector pixel = BIN reciprocal pixels of the simulation cell
DOSE = 1e5                 # incident electrons per pattern
SEED = 7
LATTICE_A, THICKNESS_A = 3.16, 3.17
VACUUM_A = 1.0             # space above and below the layer inside the potential's box
N_SLICES = 3

CELL_PX = DETECTOR_PX * BIN                    # object pixels across the simulation cell (192)
CELL_A = CELL_PX * DX_A                        # 38.4 Å, periodic
SIM_PX = CELL_PX * OVERSAMPLE                  # 576
GT_PX = (SCAN_SHAPE[0] - 1) * round(SCAN_STEP_A / DX_A) + DETECTOR_PX  # 110
GT_ORIGIN_PX = (CELL_PX - GT_PX) // 2          # ground-truth pixel 0 in cell pixels (41)


def electron_wavelength_A(energy_eV: float) -> float:
    """Relativistic electron wavelength (Å)."""
    h, c, e, m0c2 = 6.62607015e-34, 2.99792458e8, 1.602176634e-19, 510998.95
    return h * c / math.sqrt(energy_eV * e * (energy_eV * e + 2 * m0c2 * e)) * 1e10


def build_sample():
    """MoS2 monolayer on the CELL_A x CELL_A cell, top S layer VACUUM_A below the entrance
    plane, one top-layer S atom removed near the middle of the scan."""
    import ase
    from abtem import orthogonalize_cell
    from ase.build import mx2

    unit = orthogonalize_cell(mx2("MoS2", kind="2H", a=LATTICE_A, thickness=THICKNESS_A, vacuum=2.0))
    a, b = unit.cell[0, 0], unit.cell[1, 1]
    tiled = unit * (math.ceil(CELL_A / a) + 1, math.ceil(CELL_A / b) + 1, 1)
    pos = tiled.get_positions()
    keep = (pos[:, 0] < CELL_A) & (pos[:, 1] < CELL_A)
    atoms = ase.Atoms(tiled.get_chemical_symbols(), positions=pos, cell=tiled.cell)[keep]
    atoms.positions[:, 2] += VACUUM_A - atoms.positions[:, 2].min()
    atoms.set_cell([CELL_A, CELL_A, 2 * VACUUM_A + np.ptp(atoms.positions[:, 2])])
    atoms.pbc = True
    # the sulfur vacancy: the top-layer S (smallest z, the beam enters there) nearest to a
    # point 1.5 Å right of and 1.0 Å above the scan centre
    z = atoms.positions[:, 2]
    top_s = np.flatnonzero((atoms.numbers == 16) & (z < z.min() + 0.1))
    target = np.array([CELL_A / 2 + 1.5, CELL_A / 2 + 1.0])
    vacancy = top_s[np.argmin(np.linalg.norm(atoms.positions[top_s, :2] - target, axis=1))]
    removed = atoms.positions[vacancy].copy()
    del atoms[int(vacancy)]
    return atoms, removed


def scan_positions_cell_A() -> np.ndarray:
    """(scan_y, scan_x, 2) probe centres (y, x) in Å in the simulation cell's frame."""
    first = (GT_ORIGIN_PX + DETECTOR_PX // 2) * DX_A
    iy, ix = np.meshgrid(np.arange(SCAN_SHAPE[0]), np.arange(SCAN_SHAPE[1]), indexing="ij")
    return np.stack([first + iy * SCAN_STEP_A, first + ix * SCAN_STEP_A], axis=-1)


def detector_patterns(exit_waves_xy: np.ndarray, incident_intensity: float) -> np.ndarray:
    """(n, SIM_PX, SIM_PX) exit waves indexed [x, y] -> (n, 64, 64) detector intensities
    indexed [ky, kx], zero frequency at (32, 32), in units of the incident intensity."""
    waves = np.swapaxes(exit_waves_xy, -1, -2)                       # [y, x]
    far = np.fft.fftshift(np.fft.fft2(waves), axes=(-2, -1))        # zero at SIM_PX / 2
    intensity = np.abs(far) ** 2 / (incident_intensity * SIM_PX**2)  # Parseval: sums to 1
    # detector pixel j covers fine pixels centre + BIN*(j - 32) + (-1, 0, 1)
    lo = SIM_PX // 2 - BIN * (DETECTOR_PX // 2) - BIN // 2
    block = intensity[:, lo:lo + BIN * DETECTOR_PX, lo:lo + BIN * DETECTOR_PX]
    n = block.shape[0]
    return block.reshape(n, DETECTOR_PX, BIN, DETECTOR_PX, BIN).sum(axis=(2, 4))


def fourier_crop(image: np.ndarray, n_out: int) -> np.ndarray:
    """Band-limit a real periodic image to its n_out x n_out lowest frequencies and sample it
    on the n_out grid (pixel 0 stays at the origin)."""
    n = image.shape[0]
    spec = np.fft.fftshift(np.fft.fft2(image))
    c, h = n // 2, n_out // 2
    small = np.fft.ifftshift(spec[c - h:c - h + n_out, c - h:c - h + n_out])
    return np.real(np.fft.ifft2(small)) * (n_out / n) ** 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("demo_mos2.h5"))
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--dose", type=float, nargs="+", default=[DOSE],
                        help="incident electrons per pattern; several: one file each (the simulation runs once); "
                             "0: noise-free (float32 expected counts at the default dose). A dose other than the "
                             "default writes demo_mos2_dose<D>.h5 (demo_mos2_noisefree.h5) beside --out")
    args = parser.parse_args()

    import abtem
    import dask
    from abtem.core.energy import energy2sigma

    abtem.config.set({"device": "cpu", "fft": "numpy", "precision": "float64",
                      "diagnostics.progress_bar": False})
    dask.config.set(scheduler="synchronous")
    t0 = time.time()

    atoms, removed = build_sample()
    slice_A = atoms.cell[2, 2] / N_SLICES
    potential = abtem.Potential(atoms, gpts=(SIM_PX, SIM_PX), slice_thickness=slice_A,
                                projection="infinite", parametrization="lobato")
    assert np.allclose(potential.sampling, DX_A / OVERSAMPLE)
    slices = potential.build().compute().array                      # (S, x, y), eV Å
    sigma = energy2sigma(ENERGY_EV)                                  # rad / (eV Å)

    # the middle slice (Mo) is transmitted at z = slice_A below the entrance plane
    probe = abtem.Probe(energy=ENERGY_EV, semiangle_cutoff=SEMIANGLE_MRAD,
                        defocus=DEFOCUS_A + slice_A)
    probe.grid.match(potential)
    incident = probe.build(scan=[(CELL_A / 2, CELL_A / 2)]).compute().array
    incident_intensity = float(np.sum(np.abs(incident) ** 2))

    positions = scan_positions_cell_A()                              # (sy, sx, 2) (y, x)
    rows = []
    for iy in range(SCAN_SHAPE[0]):
        xy = positions[iy][:, ::-1]                                  # abTEM wants (x, y)
        waves = probe.multislice(potential, scan=xy).compute()
        exit_waves = waves.array
        rows.append(detector_patterns(exit_waves, incident_intensity))
        if iy == 0:
            # cross-check against abTEM's own diffraction patterns (unbinned, uncropped)
            ref = waves[0].diffraction_patterns(max_angle="full", parity="none").array
            mine = np.abs(np.fft.fftshift(np.fft.fft2(exit_waves[0]))) ** 2
            assert ref.shape == mine.shape and np.allclose(ref * mine.sum() / ref.sum(), mine,
                               atol=1e-6 * mine.max()), "FFT convention differs from abTEM's"
    clean = np.stack(rows)                                           # (sy, sx, 64, 64)

    phase_cell = fourier_crop(sigma * slices.sum(axis=0).T, CELL_PX)  # [y, x], dx_A pixels
    g = slice(GT_ORIGIN_PX, GT_ORIGIN_PX + GT_PX)
    phase = phase_cell[g, g].astype(np.float32)
    positions_gt = (positions - GT_ORIGIN_PX * DX_A).reshape(-1, 2)
    print(f"abTEM {abtem.__version__}: {len(atoms)} atoms, S vacancy at (y, x) = "
          f"({removed[1] - GT_ORIGIN_PX * DX_A:.2f}, {removed[0] - GT_ORIGIN_PX * DX_A:.2f}) Å "
          f"in the ground-truth frame; {N_SLICES} slices of {slice_A:.3f} Å")
    wavelength = electron_wavelength_A(ENERGY_EV)
    dk = 1.0 / (DETECTOR_PX * DX_A)
    print(f"sigma = {sigma:.6g} rad/(eV Å), lambda = {wavelength:.6f} Å, dk = {dk:.6f} 1/Å, "
          f"dx = {DX_A} Å, bright-field radius = {SEMIANGLE_MRAD / (1000 * wavelength * dk):.3f} px")
    print(f"ground-truth phase {phase.shape}, {phase.min():.3f} .. {phase.max():.3f} rad")
    for dose in args.dose:
        out = args.out if dose == DOSE else args.out.with_name(dose_file_name(dose))
        counts = noisy_counts(clean, dose, args.seed)
        write_demo(out, counts, phase, positions_gt, dose, f"abTEM {abtem.__version__}")
        totals = counts.reshape(-1, DETECTOR_PX**2).sum(axis=1)
        print(f"dose {dose:g}: patterns {counts.shape} {counts.dtype}, max count {counts.max():.0f}, "
              f"mean total counts {totals.mean():.1f} (noise-free fraction on the detector "
              f"{clean.sum(axis=(-2, -1)).mean():.4f}); wrote {out} ({out.stat().st_size / 1e6:.2f} MB) "
              f"in {time.time() - t0:.0f} s")


def dose_file_name(dose: float) -> str:
    """demo_mos2_dose2e4.h5 for 2e4, demo_mos2_noisefree.h5 for 0."""
    return "demo_mos2_noisefree.h5" if dose == 0 else f"demo_mos2_dose{dose:.0e}.h5".replace("e+0", "e").replace("e+", "e")


def noisy_counts(clean: np.ndarray, dose: float, seed: int) -> np.ndarray:
    """Poisson counts at ``dose`` incident electrons per pattern (uint16 where they fit);
    ``dose`` 0: the noise-free expected counts at the default dose, float32."""
    if dose == 0:
        return (DOSE * clean).astype(np.float32)
    counts = np.random.default_rng(seed).poisson(dose * clean)
    return counts.astype(np.uint16 if counts.max() < 2**16 else np.uint32)


def write_demo(out: Path, counts: np.ndarray, phase: np.ndarray, positions_gt: np.ndarray, dose: float,
               simulator: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(out, "w") as f:
        f.create_dataset("patterns", data=counts, chunks=(1, SCAN_SHAPE[1], DETECTOR_PX, DETECTOR_PX),
                         compression="gzip", compression_opts=9, shuffle=True)
        f.create_dataset("positions_A", data=positions_gt.astype(np.float64))
        gt = f.create_group("ground_truth")
        d = gt.create_dataset("phase", data=phase, compression="gzip", compression_opts=9, shuffle=True)
        d.attrs["dx_A"] = DX_A
        f.attrs["energy_eV"] = ENERGY_EV
        f.attrs["semiangle_mrad"] = SEMIANGLE_MRAD
        f.attrs["defocus_A"] = DEFOCUS_A
        f.attrs["scan_step_A"] = SCAN_STEP_A
        f.attrs["dk_invA"] = 1.0 / (DETECTOR_PX * DX_A)
        f.attrs["dx_A"] = DX_A
        f.attrs["dose_per_pattern"] = dose if dose else DOSE
        if not dose:
            f.attrs["noise"] = "none (expected counts)"
        f.attrs["simulator"] = simulator
        f.attrs["sample"] = "MoS2 monolayer"
        f.attrs["scan_shape"] = np.array(SCAN_SHAPE, dtype=np.int64)


if __name__ == "__main__":
    main()
