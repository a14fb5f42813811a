"""Two scans of one MoS2 monolayer, simulated by abTEM (never imports ptyacc): the case of issue 53's "several scans"
(benchmarks/records/2026-12-02-two-scans-mos2.md). 80 kV, 25 mrad; scan a at defocus DEF_A Å, scan b at DEF_B Å
turned TURN degrees about the scans' common centre; SCAN x SCAN positions 0.5 Å apart each.

    python benchmarks/two_scans_mos2.py FOLDER DOSE_A DOSE_B [SCAN] [DEF_A DEF_B TURN]

Writes FOLDER/a.h5, b.h5 (each scan at its dose), sum.h5 (a's focus and positions, both doses) and sumb.h5 (b's,
both doses). The noise-free patterns are kept in FOLDER/clean_{a,b}.npy and reused, so a new pair of doses costs
only the noise. Every file stores its true positions as positions_A, in one frame; /ground_truth holds the
band-limited projected phase of the whole cell (the same for every file) and the true positions. Needs abtem,
ase and h5py."""
import os
import sys

import h5py
import numpy as np

folder, dose_a, dose_b = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
scan = int(sys.argv[4]) if len(sys.argv) > 4 else 26
def_a, def_b, turn = (float(v) for v in sys.argv[5:8]) if len(sys.argv) > 7 else (-40.0, 120.0, 3.0)
ENERGY, SEMI, K, OVER, STEP = 80e3, 25.0, 96, 2, 0.5
os.makedirs(folder, exist_ok=True)


def cell():
    """The square MoS2 cell (Å) and the abTEM potential's slices."""
    import abtem
    import dask
    from mos2_cell import square_mos2

    abtem.config.set({"device": "cpu", "fft": "numpy", "precision": "float32", "diagnostics.progress_bar": False})
    dask.config.set(scheduler="synchronous")
    atoms, side = square_mos2()
    potential = abtem.Potential(atoms, gpts=(K * OVER, K * OVER), slice_thickness=1.0, projection="infinite",
                                parametrization="lobato")
    return side, potential.build().compute()


def raster(side: float, turn_deg: float) -> np.ndarray:
    """(N, 2) y, x Å: the SCAN x SCAN raster about the cell's centre, turned by ``turn_deg``."""
    iy, ix = np.meshgrid(np.arange(scan) - (scan - 1) / 2, np.arange(scan) - (scan - 1) / 2, indexing="ij")
    grid = np.stack([iy.ravel(), ix.ravel()], 1) * STEP
    c, s = np.cos(np.radians(turn_deg)), np.sin(np.radians(turn_deg))
    return grid @ np.array([[c, s], [-s, c]]) + side / 2


def clean(pot, side: float, defocus: float, positions: np.ndarray) -> np.ndarray:
    """(N, K, K) noise-free intensities, each summing to the share of the beam inside the detector."""
    import abtem

    sim = K * OVER
    probe = abtem.Probe(energy=ENERGY, semiangle_cutoff=SEMI, defocus=defocus)
    probe.grid.match(pot)
    incident = probe.build(scan=[(side / 2, side / 2)]).compute().array
    norm = float(np.sum(np.abs(incident) ** 2)) * sim**2
    waves = probe.multislice(pot, scan=positions[:, ::-1]).compute().array
    far = np.fft.fftshift(np.fft.fft2(np.swapaxes(waves, -1, -2)), axes=(-2, -1))
    c = sim // 2
    return np.abs(far[:, c - K // 2:c + K // 2, c - K // 2:c + K // 2]) ** 2 / norm


cache = os.path.join(folder, "clean.npz")
if not os.path.exists(cache):
    from abtem.core.energy import energy2sigma

    side, pot = cell()
    slices = pot.array  # (S, x, y)
    pos_a, pos_b = raster(side, 0.0), raster(side, turn)
    phase = energy2sigma(ENERGY) * np.swapaxes(slices, -1, -2).sum(0)
    sim = K * OVER
    spectrum = np.fft.fftshift(np.fft.fft2(phase))
    h, c = K // 2, sim // 2
    phase = np.real(np.fft.ifft2(np.fft.ifftshift(spectrum[c - h:c + h, c - h:c + h]))) * (K / sim) ** 2
    np.savez(cache, a=clean(pot, side, def_a, pos_a), b=clean(pot, side, def_b, pos_b), pos_a=pos_a, pos_b=pos_b,
             phase=phase, dx=side / K, defocus=np.array([def_a, def_b]))
saved = np.load(cache)
dx, phase = float(saved["dx"]), saved["phase"]
both = np.concatenate([saved["pos_a"], saved["pos_b"]])
low = np.floor((both.min(0) - K / 2 * dx) / dx).astype(int)  # one frame for every file
high = np.ceil((both.max(0) + K / 2 * dx) / dx).astype(int) + 1
rr, cc = np.arange(low[0], high[0]) % K, np.arange(low[1], high[1]) % K
rng = np.random.default_rng(int(os.environ.get("SEED", 3)))
for name, which, dose in (("a", "a", dose_a), ("b", "b", dose_b), ("sum", "a", dose_a + dose_b),
                          ("sumb", "b", dose_a + dose_b)):
    patterns = rng.poisson(saved[which] * dose).astype(np.float32)
    positions = saved[f"pos_{which}"] - low * dx
    with h5py.File(os.path.join(folder, f"{name}.h5"), "w") as f:
        f["patterns"] = patterns
        f["positions_A"] = positions
        f.attrs.update(energy_eV=ENERGY, semiangle_mrad=SEMI, defocus_A=float(saved["defocus"][int(which == "b")]),
                       dk_invA=1 / (K * dx))
        t = f.create_group("ground_truth")
        t["phase"], t["positions_A"] = phase[rr[:, None], cc[None, :]], positions
print(folder, dose_a, dose_b, dx)
