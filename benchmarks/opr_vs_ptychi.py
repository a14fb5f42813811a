"""A probe that varies across the scan (docs/how-to/varying-probe-and-scans.md, 'A probe that varies'): ptyacc with and
without ``model.probe_variation`` against Pty-chi's LSQML with and without its OPR, on one file.

The case is the tests' (tests/varying_probe.py): the benchmark grid's independent NumPy simulator
(benchmarks/grid/simulate.py), random atoms at 80 kV, the defocus drifting from 60 to 140 Å along the
slow axis (the file says 100), the beam current 15 % rms from pattern to pattern, 1e5 electrons.

    python benchmarks/opr_vs_ptychi.py write /tmp/opr/case.h5
    python benchmarks/opr_vs_ptychi.py ptyacc /tmp/opr/case.h5 20 2      # iterations, eigen-probes (0: none)
    /tmp/ptychi-venv/bin/python benchmarks/opr_vs_ptychi.py ptychi /tmp/opr/case.h5 20 2 ../shared/bench

Each run prints one JSON line: the phase NCC with the truth at zero shift (each package placed as its
harness places it: ptyacc at its exact ``origin_A``, Pty-chi on the bench harness's canvas), the
median seconds per iteration after the first, and the correlation of the fitted main weight with the
true current (ptyacc's ``amplitudes`` squared; Pty-chi's first OPR weight squared).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def write(path: str) -> None:
    import importlib.util

    import h5py

    sys.path.insert(0, str(ROOT / "tests"))
    from varying_probe import write_varying_case

    spec = importlib.util.spec_from_file_location("grid_simulate", ROOT / "benchmarks" / "grid" / "simulate.py")
    simulator = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = simulator  # dataclasses look their module up while the class is built
    spec.loader.exec_module(simulator)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_varying_case(simulator, path)
    with h5py.File(path, "a") as f:  # what the bench harness's reader also wants
        k = f["patterns"].shape[-1]
        f.attrs["dx_A"] = 1.0 / (k * f.attrs["dk_invA"])
        positions = f["positions_A"][()]
        f.attrs["scan_step_A"] = float(np.diff(np.unique(np.round(positions[:, 1], 6)))[0])
        f["ground_truth/phase"].attrs["dx_A"] = f.attrs["dx_A"]


def run_ptyacc(path: str, iterations: int, variation: int) -> dict:
    import h5py

    import ptyacc
    from ptyacc.results.quality import placed_ncc

    config = {"data": {"path": path}, "experiment": {"positions": {"key": "positions_A"}},
              "model": {"probe_variation": variation}, "optim": {"iterations": iterations},
              "runtime": {"progress": False}}
    rec = ptyacc.reconstruct(ptyacc.load_config(config), write=False)
    with h5py.File(path) as f:
        truth, current = f["ground_truth/phase"][()], f["ground_truth/current"][()]
    ncc = placed_ncc(rec.results.phase, np.asarray(rec.results.origin_A), rec.results.dx_A, rec.data.positions_A, truth)
    out = {"package": "ptyacc", "probe_variation": variation, "iterations": iterations, "ncc": ncc,
           "s_per_iteration": float(np.median(rec.iteration_times_s[1:]))}
    if variation:
        weights = rec.results.quantities["probe_variation"]["weights"][:, 0]
        out["current_correlation"] = float(np.corrcoef(weights ** 2, current)[0, 1])
    return out


def run_ptychi(path: str, iterations: int, variation: int, bench: str) -> dict:
    """Pty-chi's LSQML as the bench harness sets it up (its probe recipe, canvas and scoring), with
    ``variation`` OPR eigenmodes (random start, Pty-chi's own helpers) and the main mode's weight
    refined as the intensity variation; batch 32, as ptyacc's default."""
    out_npy = str(Path(path).with_suffix("")) + f"_ptychi_opr{variation}.npy"
    sys.argv = ["run_ptychi.py", path, "--out", out_npy, "--iters", str(iterations), "--batch", "32",
                "--algo", "lsqml", "--threads", "2"]
    sys.path.insert(0, bench)
    import h5py
    import run_ptychi as rp  # parses the sys.argv above; imports Pty-chi after its torchvision stand-in
    import torch

    args, ds = rp.ARGS, rp.load_dataset(path)
    k, patterns = ds["K"], rp.read_patterns(path)
    shape, off, pos, c_px, _ = rp.canvas_geometry(ds, k, args.extra_px)
    torch.manual_seed(args.seed)
    probe = np.zeros((1, 1, k, k), dtype=np.complex64)
    probe[0, 0] = rp.make_stem_probe(k, ds["dx_A"], ds["energy_eV"], ds["semiangle_mrad"], ds["defocus_A"])
    probe = rp.putils.rescale_probe(probe, patterns).astype(np.complex64)
    options, _ = rp.build_options(args, ds, ds["dx_A"] * 1e-10, rp.wavelength_A(ds["energy_eV"]) * 1e-10, 1, 1.0)
    if variation:
        probe = rp.putils.add_additional_opr_probe_modes_to_probe(torch.from_numpy(probe), variation).numpy()
        weights = options.opr_mode_weight_options
        weights.optimizable, weights.optimize_intensity_variation = True, True
        weights.initial_weights = rp.putils.generate_initial_opr_mode_weights(len(pos), variation + 1).numpy()
    task = rp.make_task(options, patterns, np.ones((1, *shape), dtype=np.complex64), probe, pos)
    seconds = []
    for _ in range(iterations):
        started = time.perf_counter()
        task.run(1)
        seconds.append(time.perf_counter() - started)
    phase = np.angle(task.get_data_to_cpu("object", as_numpy=True)).sum(0).astype(np.float64)
    scores = rp.compare_to_gt(phase, ds["gt_phase"], off, c_px, 1, False)
    out = {"package": "pty-chi", "opr_modes": variation, "iterations": iterations, "ncc": scores["ncc_zero_shift"],
           "s_per_iteration": float(np.median(seconds[1:]))}
    if variation:
        with h5py.File(path) as f:
            current = f["ground_truth/current"][()]
        fitted = task.get_data_to_cpu("opr_mode_weights", as_numpy=True)[:, 0]
        out["current_correlation"] = float(np.corrcoef(np.abs(fitted) ** 2, current)[0, 1])
    return out


if __name__ == "__main__":
    verb, path = sys.argv[1:3]
    if verb == "write":
        write(path)
    elif verb == "ptyacc":
        print(json.dumps(run_ptyacc(path, int(sys.argv[3]), int(sys.argv[4]))))
    else:
        print(json.dumps(run_ptychi(path, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])))
