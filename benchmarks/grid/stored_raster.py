"""A raster stored as positions, end to end: ``ptyacc init`` + ``ptyacc run`` on WSe2 files of the
independent simulator (simulate.py here: the scan turned 9 degrees, the defocus read 20 % off,
descan, blur, gain, dead and hot pixels, partial coherence, 3e4 counts) that store their nominal
raster as positions_A, against the same files without positions, the config an init that left the
autos out wrote (the file's positions, no autos), and ptyacc told the truth. Prints the phase NCC
of each (best shift over the scanned region).

    python benchmarks/grid/stored_raster.py WORKDIR [--iterations N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import simulate  # noqa: E402

import ptyacc  # noqa: E402
from ptyacc.results.quality import best_shift_ncc  # noqa: E402

BASE = dict(detector_px=48, scan_step_A=0.4, dose=3e4, edge_mrad=50.0, blur_px=0.6, descan_offset_px=(0.3, -0.2),
            hot_pixels=3, dead_pixels=4, gain_sigma=0.05, sample="wse2", scan_rotation_deg=9.0, defocus_A=120.0,
            nominal_defocus_A=96.0, source_size_A=0.2, focal_spread_A=10.0)
FILES = {"wse2-28": dict(scan_shape=(28, 28), seed=3), "wse2-32": dict(scan_shape=(32, 32), seed=4)}


def ncc(results: Path, truth: dict) -> float:
    found = ptyacc.load_results(results)
    offset = truth["positions_A"].mean(0) - found.initial_positions_A.mean(0)
    value, _ = best_shift_ncc(found.phase, np.asarray(found.origin_A) + offset, truth["dx_A"], truth["positions_A"],
                              truth["phase"], levels=((0.5, 4), (0.1, 4)))
    return float(value)


def ptyacc_cli(*args: str, cwd: Path) -> str:
    done = subprocess.run([str(Path(sys.executable).parent / "ptyacc"), *args], cwd=cwd, capture_output=True,
                          text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode:
        raise SystemExit(done.stderr)
    return done.stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("work", type=Path)
    parser.add_argument("--iterations", type=int, default=40)
    args = parser.parse_args(argv)
    for name, extra in FILES.items():
        folder = args.work / name
        folder.mkdir(parents=True, exist_ok=True)
        setting = simulate.Setting(**{**BASE, **extra})
        simulate.write(str(folder / "stored.h5"), setting)
        simulate.write(str(folder / "bare.h5"), simulate.Setting(**{**BASE, **extra, "write_positions": False}))
        with h5py.File(folder / "stored.h5") as f:
            truth = {"phase": f["ground_truth/phase"][()].astype(float), "dx_A": float(f.attrs["dx_A"]),
                     "positions_A": f["ground_truth/positions_A"][()]}
        with h5py.File(folder / "truth.h5", "w") as f:
            f["positions_A"] = truth["positions_A"]
        for stem in ("stored", "bare"):
            ptyacc_cli("init", f"{stem}.h5", "--force", cwd=folder)
        config = yaml.safe_load((folder / "stored.yaml").read_text())
        told = {**config, "data": {**config["data"], "transform": {"descan": "auto"}},
                "experiment": {"radiation": "electron", "defocus_A": setting.defocus_A,
                               "positions": {"path": "truth.h5", "key": "positions_A"}},
                "output": {"dir": "results/truth"}}
        (folder / "truth.yaml").write_text(yaml.safe_dump(told))
        no_autos = {**config, "data": {**config["data"], "transform": {"descan": "auto"}},
                    "experiment": {"radiation": "electron", "positions": {"key": "positions_A"}},
                    "output": {"dir": "results/no_autos"}}
        (folder / "no_autos.yaml").write_text(yaml.safe_dump(no_autos))
        for stem in ("stored", "bare", "no_autos", "truth"):
            said = ptyacc_cli("run", f"{stem}.yaml", "--overwrite", "--set", f"optim.iterations={args.iterations}",
                              "--set", "output.figures=false", cwd=folder)
            warnings = sum("warning:" in line for line in said.splitlines())
            result = folder / "results" / stem / "results.h5"
            with h5py.File(result) as f:
                autos = yaml.safe_load(f.attrs["auto_values"])
            picked = {k: autos[k] for k in ("experiment.scan_rotation_deg", "experiment.defocus_A") if k in autos}
            print(f"{name} {stem:9s} NCC {ncc(result, truth):.3f}  warnings {warnings}  {picked}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
