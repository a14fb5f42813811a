"""A scan whose probe varies, simulated by abTEM (never imports ptyacc): a 2H-MoS2 monolayer, 80 kV, 25 mrad, the
defocus from D0 Å at the first row to D1 at the last, each pattern's dose 5e4 x (1 + CURRENT x a normal draw), as
tests/varying_probe.py makes with the project's own simulator (benchmarks/records/2026-12-02-opr-safeguard.md).

    python benchmarks/varying_probe_mos2.py OUT.h5 D0 D1 CURRENT [SCAN [SEED]]

SEED (3 unless given) draws the currents and the Poisson counts.

Needs abtem, ase and h5py. The file holds what a microscope records (patterns, positions_A, the mean defocus);
/ground_truth the band-limited projected phase, each position's defocus and current factor."""
import sys

import abtem
import dask
import h5py
import numpy as np
from abtem.core.energy import energy2sigma
from mos2_cell import square_mos2

out, d0, d1, current = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
scan = int(sys.argv[5]) if len(sys.argv) > 5 else 26
seed = int(sys.argv[6]) if len(sys.argv) > 6 else 3
abtem.config.set({"device": "cpu", "fft": "numpy", "precision": "float32", "diagnostics.progress_bar": False})
dask.config.set(scheduler="synchronous")
ENERGY, SEMI, K, OVER, STEP, DOSE = 80e3, 25.0, 96, 2, 0.5, 5e4
atoms, side = square_mos2()
dx = side / K
sim = K * OVER
potential = abtem.Potential(atoms, gpts=(sim, sim), slice_thickness=1.0, projection="infinite",
                            parametrization="lobato")
slices = potential.build().compute().array  # (S, x, y)
pot = abtem.PotentialArray(slices, sampling=potential.sampling, slice_thickness=potential.slice_thickness)
iy, ix = np.meshgrid(np.arange(scan) - (scan - 1) / 2, np.arange(scan) - (scan - 1) / 2, indexing="ij")
positions = np.stack([iy.ravel(), ix.ravel()], 1) * STEP + side / 2  # (N, 2) y, x
rows = np.repeat(np.arange(scan), scan)
defocus = d0 + (d1 - d0) * rows / (scan - 1)
probe0 = abtem.Probe(energy=ENERGY, semiangle_cutoff=SEMI, defocus=float(np.mean(defocus)))
probe0.grid.match(pot)
incident = probe0.build(scan=[(side / 2, side / 2)]).compute().array
norm = float(np.sum(np.abs(incident) ** 2)) * sim**2
c = sim // 2
intensity = np.zeros((len(positions), K, K))
for r in range(scan):
    probe = abtem.Probe(energy=ENERGY, semiangle_cutoff=SEMI, defocus=float(defocus[r * scan]))
    probe.grid.match(pot)
    mine = positions[r * scan:(r + 1) * scan]
    waves = probe.multislice(pot, scan=mine[:, ::-1]).compute().array
    far = np.fft.fftshift(np.fft.fft2(np.swapaxes(waves, -1, -2)), axes=(-2, -1))
    intensity[r * scan:(r + 1) * scan] = np.abs(far[:, c - K // 2:c + K // 2, c - K // 2:c + K // 2]) ** 2 / norm
rng = np.random.default_rng(seed)
factor = np.clip(1 + current * rng.standard_normal(len(positions)), 0.3, None)
patterns = rng.poisson(intensity * (DOSE * factor)[:, None, None]).astype(np.float32)
sigma = energy2sigma(ENERGY)
phase = sigma * np.swapaxes(slices, -1, -2).sum(0)
spectrum = np.fft.fftshift(np.fft.fft2(phase))
h = K // 2
phase = np.real(np.fft.ifft2(np.fft.ifftshift(spectrum[c - h:c + h, c - h:c + h]))) * (K / sim) ** 2
low = np.floor((positions.min(0) - K / 2 * dx) / dx).astype(int)
high = np.ceil((positions.max(0) + K / 2 * dx) / dx).astype(int) + 1
rr, cc = np.arange(low[0], high[0]) % K, np.arange(low[1], high[1]) % K
with h5py.File(out, "w") as f:
    f["patterns"] = patterns.reshape(scan, scan, K, K)
    f["positions_A"] = positions - low * dx
    f.attrs.update(energy_eV=ENERGY, semiangle_mrad=SEMI, defocus_A=float(np.mean(defocus)), dk_invA=1 / (K * dx))
    t = f.create_group("ground_truth")
    t["phase"], t["defocus_A"], t["current"] = phase[rr[:, None], cc[None, :]], defocus, factor
print(out, patterns.shape, patterns.reshape(len(positions), -1).sum(1).mean(), dx)
