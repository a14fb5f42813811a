"""The README's "Real data" table: one case of the independent simulator with a detector's and a
microscope's effects (simulate.py), reconstructed by ptyacc at 20 iterations with the file's nominal
values only, with each measurement from the data added in turn, and with the true positions and
flips (each also with the detector's blur refined from none); the phase NCC with the truth after the best
sub-pixel shift and the blur found, one JSON line per row.

    python benchmarks/grid/detector_table.py WORKDIR
    python benchmarks/grid/detector_table.py WORKDIR --defocus   # the defocus alone: nominal / parallax / true, 30 iterations
    python benchmarks/grid/detector_table.py WORKDIR --astigmatism   # the same with C12b -20 Å the file does not mention
    python benchmarks/grid/detector_table.py WORKDIR --every   # every effect, the defocus 120 Å (nominal 96 Å), 20 iterations
    python benchmarks/grid/detector_table.py WORKDIR --every --crystal   # the same on a WSe2 monolayer
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


DEFOCUS_SETTING = simulate.Setting(detector_px=48, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=120.0,
                                   edge_mrad=50.0, seed=5, scan_rotation_deg=9.0, nominal_defocus_A=96.0,
                                   write_positions=False)
DEFOCUS_ROWS = {  # the defocus alone (the true rotation given): the file's nominal value 20 % off, the parallax, the truth
    "defocus nominal (20 % off)": {"experiment": {"scan_rotation_deg": 9.0}},
    "defocus auto (parallax)": {"experiment": {"scan_rotation_deg": 9.0, "defocus_A": "auto"}},
    "defocus true": {"experiment": {"scan_rotation_deg": 9.0, "defocus_A": DEFOCUS_SETTING.defocus_A}},
    "defocus auto, rotation auto": {"experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto"}},
}

ASTIGMATIC_SETTING = simulate.Setting(**{**DEFOCUS_SETTING.__dict__, "c12_A": (0.0, -20.0)})
ASTIGMATIC_ROWS = {  # and a two-fold astigmatism the file does not mention
    "astigmatic, nominal": DEFOCUS_ROWS["defocus nominal (20 % off)"],
    "astigmatic, auto (parallax)": DEFOCUS_ROWS["defocus auto (parallax)"],
    "astigmatic, true": {"experiment": {"scan_rotation_deg": 9.0, "defocus_A": DEFOCUS_SETTING.defocus_A,
                                        "aberrations": {"C12a": 0.0, "C12b": -20.0}}},
}

EVERY_SETTING = simulate.Setting(**{**SETTING.__dict__, "defocus_A": 120.0, "nominal_defocus_A": 96.0})
EVERY_ROWS = {  # every effect of SETTING, the defocus 120 Å with the file's nominal 96 Å
    "every auto, defocus nominal": ROWS["+ descan (every auto)"],
    "every auto and defocus auto (what ptyacc init writes)": {"data": AUTOS, "experiment": {
        "scan_rotation_deg": "auto", "defocus_A": "auto"}},
    "true positions, flips and defocus": {**ROWS["true positions and flips"], "experiment": {
        **ROWS["true positions and flips"]["experiment"], "defocus_A": 120.0}},
}
CRYSTAL_SETTING = simulate.Setting(**{**EVERY_SETTING.__dict__, "sample": "wse2"})  # a WSe2 monolayer, not random atoms


def write_case(work: Path, setting: simulate.Setting, again: bool = True) -> tuple[Path, np.ndarray, float, np.ndarray]:
    """``setting``'s case written to WORK/case.h5 (``again``: also where it exists), its true positions to
    WORK/true_positions.h5 and its planted bad pixels as a flat field of gain 0 there, 1 elsewhere, to
    WORK/true_flat.npy; the file, the true phase, its pixel (Å) and the true positions (N, 2) Å."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "case.h5"
    if again or not path.exists():
        simulate.write(str(path), setting)
    with h5py.File(path) as f:
        truth, dx = f["ground_truth/phase"][()].astype(float), float(f.attrs["dx_A"])
        positions = f["ground_truth/positions_A"][()]
        gain = f["ground_truth/gain"][()] if "gain" in f["ground_truth"] else np.ones(f["patterns"].shape[-2:])
        np.save(work / "true_flat.npy", (gain * (1 - f["ground_truth/bad_pixels"][()])).astype(np.float32))
    with h5py.File(work / "true_positions.h5", "w") as f:
        f["positions_A"] = positions
    return path, truth, dx, positions


def main(work: Path, setting: simulate.Setting = SETTING, rows: dict = ROWS, iterations: int = 20) -> None:
    import ptyacc

    path, truth, dx, positions = write_case(work, setting)
    for name, extra in rows.items():
        config = {"data": {"path": str(path)}, "optim": {"iterations": iterations, "batch_size": 32},
                  "runtime": {"progress": False, "threads": 1}}
        for section, values in extra.items():
            config.setdefault(section, {}).update(values)
        if "positions" in config.get("experiment", {}):
            config["experiment"]["positions"]["path"] = str(work / "true_positions.h5")
        started = time.time()
        rec = ptyacc.reconstruct(ptyacc.load_config(config), write=False)
        offset = positions.mean(0) - np.asarray(rec.results.initial_positions_A).mean(0)  # the run's frame to the truth's
        found = packages.score(rec.results.phase, np.asarray(rec.results.origin_A) + offset, dx, positions, truth)
        defocus = rec.results.calibration.get("defocus_A") if hasattr(rec.results, "calibration") else None
        print(json.dumps({"row": name, **found, "blur_px": rec.model.detector_blur_px(), "defocus_A": defocus,
                          "s": round(time.time() - started, 1)}), flush=True)


if __name__ == "__main__":
    if sys.argv[2:] == ["--defocus"]:
        main(Path(sys.argv[1]), DEFOCUS_SETTING, DEFOCUS_ROWS, iterations=30)
    elif sys.argv[2:] == ["--every"]:
        main(Path(sys.argv[1]), EVERY_SETTING, EVERY_ROWS)
    elif sys.argv[2:] == ["--every", "--crystal"]:
        main(Path(sys.argv[1]), CRYSTAL_SETTING, EVERY_ROWS)
    elif sys.argv[2:] == ["--astigmatism"]:
        main(Path(sys.argv[1]), ASTIGMATIC_SETTING, ASTIGMATIC_ROWS, iterations=30)
    else:
        main(Path(sys.argv[1]))
