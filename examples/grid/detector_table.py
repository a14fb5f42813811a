"""The README's "Real data" table: one case of the independent simulator with a detector's and a
microscope's effects (simulate.py), reconstructed by ptyacc at 20 iterations with the file's nominal
values only, with each measurement from the data added in turn, and with the true positions and
flips (each also with the detector's blur refined from none); the phase NCC with the truth after the best
sub-pixel shift and the blur found, one JSON line per row.

    python examples/grid/detector_table.py WORKDIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import packages
import simulate

AUTOS = {"bad_pixels": "auto", "transform": {"orientation": "auto", "descan": "auto"}}
ROWS = {
    "nominal only": {},
    "+ bad_pixels": {"data": {"bad_pixels": "auto"}},
    "+ orientation, scan_rotation_deg": {"data": {"bad_pixels": "auto", "transform": {"orientation": "auto"}},
                                         "experiment": {"scan_rotation_deg": "auto"}},
    "+ descan (every auto)": {"data": AUTOS, "experiment": {"scan_rotation_deg": "auto"}},
    "+ detector blur refined (what ptyacc init writes)": {"data": AUTOS, "experiment": {"scan_rotation_deg": "auto"},
                                                          "optim": {"start": {"detector_blur": 0}}},
    "true positions and flips": {"data": {"bad_pixels": "auto", "transform": {"transpose": True, "descan": "auto"}},
                                 "experiment": {"positions": {"path": "true_positions.h5", "key": "positions_A"}}},
    "true positions and flips, blur refined": {
        "data": {"bad_pixels": "auto", "transform": {"transpose": True, "descan": "auto"}},
        "experiment": {"positions": {"path": "true_positions.h5", "key": "positions_A"}},
        "optim": {"start": {"detector_blur": 0}}},
}
SETTING = simulate.Setting(detector_px=48, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=60.0, edge_mrad=50.0,
                           seed=5, scan_rotation_deg=9.0, transpose=True, descan_offset_px=(0.3, -0.2),
                           descan_px_per_A=((0.04, 0.02), (-0.02, 0.05)), hot_pixels=4, dead_pixels=6, dead_column=10,
                           blur_px=0.6, write_positions=False)


def main(work: Path) -> None:
    import ptyacc

    work.mkdir(parents=True, exist_ok=True)
    path = work / "case.h5"
    simulate.write(str(path), SETTING)
    with h5py.File(path) as f:
        truth, dx = f["ground_truth/phase"][()].astype(float), float(f.attrs["dx_A"])
        positions = f["ground_truth/positions_A"][()]
    with h5py.File(work / "true_positions.h5", "w") as f:
        f["positions_A"] = positions
    for name, extra in ROWS.items():
        config = {"data": {"path": str(path)}, "optim": {"iterations": 20, "batch_size": 32},
                  "runtime": {"progress": False, "threads": 1}}
        for section, values in extra.items():
            config.setdefault(section, {}).update(values)
        if "positions" in config.get("experiment", {}):
            config["experiment"]["positions"]["path"] = str(work / "true_positions.h5")
        started = time.time()
        rec = ptyacc.reconstruct(ptyacc.load_config(config), write=False)
        offset = positions.mean(0) - np.asarray(rec.results.initial_positions_A).mean(0)  # the run's frame to the truth's
        found = packages.score(rec.results.phase, np.asarray(rec.results.origin_A) + offset, dx, positions, truth)
        print(json.dumps({"row": name, **found, "blur_px": rec.model.detector_blur_px(), "s": round(time.time() - started, 1)}),
              flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
