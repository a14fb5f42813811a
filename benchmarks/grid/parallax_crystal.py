"""The parallax on a crystal (its real-space shifts alone read the demo's 120 Å as 95 Å; with the Fourier
regions' scale, ptyacc/data/overlap_focus.py, 121 Å): the demo's own projected phase (MoS2, a
crystal; /ground_truth/phase of ptyacc/demo/demo_mos2.h5) through this directory's independent
simulator (one slice, no noise, the demo's probe and raster) against random atoms of the same phase
spread, at three defoci; and the demo file itself. One line per case: the parallax's defocus, its
error and whether it would be used.

    python benchmarks/grid/parallax_crystal.py
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import h5py
import numpy as np

from ptyacc.data.parallax import measure

HERE = Path(__file__).resolve().parent


def simulator():
    spec = importlib.util.spec_from_file_location("grid_simulate", HERE / "simulate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    sim = simulator()
    with h5py.File(HERE.parents[1] / "ptyacc" / "demo" / "demo_mos2.h5") as f:
        phase, positions, attrs = f["ground_truth/phase"][()], f["positions_A"][()], dict(f.attrs)
        demo = f["patterns"][()]
    n, (ny, nx) = demo.shape[-1], attrs["scan_shape"]
    wavelength, dk, dx = sim.wavelength_A(attrs["energy_eV"]), attrs["dk_invA"], attrs["dx_A"]

    def parallax(patterns: np.ndarray) -> str:
        found = measure(np.fft.ifftshift(patterns.reshape(-1, n, n), axes=(-2, -1)), (ny, nx),
                        np.eye(2) * attrs["scan_step_A"], wavelength, dk)
        return f"{found.defocus_A:.1f} +- {found.defocus_error_A:.1f} A, used: {found.reliable}"

    print(f"demo file (abTEM, {attrs['defocus_A']:g} A): {parallax(demo)}")
    amorphous = sim.random_atoms(phase.shape, dx, sim.Setting(), np.random.default_rng(0))
    amorphous *= phase.std() / amorphous.std()
    kernel = sim.fresnel_kernel(n, dx, wavelength, 1.0)
    for defocus in (80.0, 120.0, 200.0):
        probe = sim.probe_wave(n, dk, wavelength, attrs["semiangle_mrad"], defocus)
        for name, sample in (("MoS2", phase), ("MoS2 x 0.3", 0.3 * phase), ("random atoms", amorphous)):
            patterns = sim.patterns_at(probe, np.exp(1j * sample)[None], positions / dx, kernel)
            print(f"{defocus:g} A, {name}: {parallax(patterns)}")


if __name__ == "__main__":
    main()
