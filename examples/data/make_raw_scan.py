"""Write ``raw_scan.h5``: the own-data tutorial's file, a 4D-STEM scan as a detector stores it, with
every effect a detector and a microscope add that the file does not say: the scan turned by 9
degrees against the detector, the patterns transposed, a descan of up to 0.7 px, a blur of 0.6 px,
4 hot and 6 dead pixels and a dead column, and a defocus of 120 Å that the file gives as 96 Å.

It is made by the independent simulator of ``benchmarks/grid/simulate.py`` (NumPy only, it never
imports ptyacc): random atoms, 80 kV, 25 mrad, a 32 x 32 raster of 0.4 Å, 48 x 48 px patterns,
3e4 electrons per pattern, Poisson noise, seed 5.

Layout: ``/frames`` uint16 (32, 32, 48, 48) counts [scan_y, scan_x, ky, kx] as stored (gzip and
shuffle), root attributes as a microscope writes them (``energy_eV``, ``semiangle_mrad``,
``defocus_A`` (the nominal 96 Å), ``scan_step_A``, ``dk_invA``, ``scan_shape``), and the truth the
tutorial judges the reconstruction by, which a real file would not carry: ``/ground_truth/phase``
(H, W) float32 with attribute ``dx_A``, ``/ground_truth/positions_A`` (N, 2) and the true values as
attributes of ``/ground_truth``.

    python examples/data/make_raw_scan.py [OUT.h5]     # about 10 s; the file is about 2 MB
"""

from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "grid"))
import simulate  # noqa: E402  (benchmarks/grid/simulate.py)

SETTING = simulate.Setting(detector_px=48, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=120.0,
                           nominal_defocus_A=96.0, edge_mrad=50.0, seed=5, scan_rotation_deg=9.0, transpose=True,
                           descan_offset_px=(0.3, -0.2), descan_px_per_A=((0.04, 0.02), (-0.02, 0.05)), hot_pixels=4,
                           dead_pixels=6, dead_column=10, blur_px=0.6, write_positions=False)


def write(path: Path, setting: simulate.Setting = SETTING) -> None:
    """Simulate ``setting`` and write it to ``path`` in the layout of the module's docstring."""
    sim = simulate.simulate(setting)
    counts = np.rint(sim["patterns"]).astype(np.uint16)
    with h5py.File(path, "w") as f:
        f.create_dataset("frames", data=counts, compression="gzip", compression_opts=9, shuffle=True,
                         chunks=(1, setting.scan_shape[1], *counts.shape[2:]))
        f.attrs.update(energy_eV=setting.energy_eV, semiangle_mrad=setting.semiangle_mrad,
                       defocus_A=setting.nominal_defocus_A, scan_step_A=setting.scan_step_A, dk_invA=sim["dk_invA"],
                       scan_shape=np.array(setting.scan_shape),
                       simulator="benchmarks/grid/simulate.py (NumPy multislice, independent of ptyacc)")
        truth = f.create_group("ground_truth")
        truth.create_dataset("phase", data=sim["phases"].sum(0).astype(np.float32)).attrs["dx_A"] = sim["dx_A"]
        truth.create_dataset("positions_A", data=sim["positions_A"])
        truth.attrs.update(defocus_A=setting.defocus_A, scan_rotation_deg=setting.scan_rotation_deg,
                           blur_px=setting.blur_px, transpose=setting.transpose,
                           bad_pixels=int(sim["bad_pixels"].sum()))


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("raw_scan.h5"))
