"""Position refinement side by side: ptyacc, PtyRAD 1.0 and Pty-chi 2.2 on the same drifting,
jittering scan, 20 iterations each, scored the same way.

The scan is tests/test_position_refinement.py's: the grid's independent NumPy simulator
(benchmarks/grid/simulate.py), 14 x 14 positions 0.5 Å apart, 80 kV, 100 Å underfocus, 1e5
electrons per pattern; the probes sat 0.02 Å further per row (drift) and 0.15 Å rms off at random
(jitter); the file gives the nominal raster (``/positions_A``) and keeps the truth under
``/ground_truth`` (the harness layout of ../shared/bench). Each package runs in its own venv and
leaves an .npz (phase on its canvas, the canvas origin in the truth's frame, refined positions,
seconds per iteration); ``score`` prints one Markdown row per run: positions rms from the truth
after removing the common shift, and the phase NCC over the scanned region with the
reconstruction placed where its positions' common shift puts it
(``ptyacc.results.quality.placed_ncc``, as the test scores ptyacc).

    P=.venv/bin/python; D=/tmp/positions
    $P benchmarks/positions_vs_peers.py write $D --seed 0                 # drift_s0.h5, exact_s0.h5
    $P benchmarks/positions_vs_peers.py ptyacc $D/drift_s0.h5 $D/ptyacc.npz optim.start.positions=1 \
        optim.start.scan_affine=1
    /tmp/ptyrad_venv/bin/python benchmarks/positions_vs_peers.py ptyrad $D/drift_s0.h5 $D/ptyrad.npz --lr-pos 5e-4
    /tmp/ptychi-venv/bin/python benchmarks/positions_vs_peers.py ptychi $D/drift_s0.h5 $D/ptychi.npz --pos-step 0.1
    $P benchmarks/positions_vs_peers.py score $D/drift_s0.h5 $D/*.npz
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parents[1] / "shared" / "bench"
DRIFT_A_PER_ROW = 0.02
JITTER_A = 0.15


def module_from(path: Path, name: str, argv: list[str] | None = None):
    """The Python file ``path`` imported as module ``name`` (with ``sys.argv`` = ``argv`` while it
    loads: the harnesses read their arguments at import)."""
    saved = sys.argv
    sys.argv = [str(path), *(argv or [])]
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    finally:
        sys.argv = saved
    return module


# ----------------------------------------------------------------------------- the data
def write(folder: Path, seed: int, dose: float = 1e5) -> None:
    """drift_s<seed>.h5 (the distorted scan, nominal positions in the file) and exact_s<seed>.h5
    (the same atoms scanned without errors), bench layout, truth under /ground_truth; ``dose``
    electrons per pattern (other than 1e5: ``_d<dose>`` in the names)."""
    import h5py

    simulator = module_from(HERE / "grid" / "simulate.py", "grid_simulate")
    nominal_raster = simulator.scan_positions_A
    folder.mkdir(parents=True, exist_ok=True)
    for name, drift_A, jitter_A in (("drift", DRIFT_A_PER_ROW, JITTER_A), ("exact", 0.0, 0.0)):
        rng = np.random.default_rng(seed + 100)  # the same errors as the test's write_scan
        nominal = {}

        def distorted(setting, canvas_A, drift_A=drift_A, jitter_A=jitter_A, rng=rng, nominal=nominal):
            nominal["A"] = nominal_raster(setting, canvas_A)
            rows = np.repeat(np.arange(setting.scan_shape[0]), setting.scan_shape[1])
            return nominal["A"] + drift_A * rows[:, None] + rng.normal(0.0, jitter_A, nominal["A"].shape)

        simulator.scan_positions_A = distorted
        path = folder / (f"{name}_s{seed}.h5" if dose == 1e5 else f"{name}_s{seed}_d{dose:g}.h5")
        simulator.write(str(path), simulator.Setting(defocus_A=100.0, dose=dose, scan_shape=(14, 14), seed=seed))
        with h5py.File(path, "r+") as f:
            f["positions_A"][...] = nominal["A"]  # the file says the nominal raster; the truth stays below
        print(f"{path}: nominal {rms_A(nominal['A'], h5py.File(path)['ground_truth/positions_A'][()]):.3f} Å rms off")


def rms_A(positions: np.ndarray, true: np.ndarray) -> float:
    """The rms distance (Å) after the common shift, which moves the object alike and is not an error."""
    error = positions - true
    error -= error.mean(0)
    return float(np.sqrt((error**2).sum(1).mean()))


# ----------------------------------------------------------------------------- the runs
def run_ptyacc(path: Path, out: Path, overrides: list[str]) -> None:
    import ptyacc

    config = {"data": {"path": str(path)}, "experiment": {"positions": {"key": "positions_A"}},
              "optim": {"iterations": 20}, "runtime": {"progress": False, "threads": 1}}
    rec = ptyacc.reconstruct(ptyacc.load_config(config, overrides), write=False)
    times = np.asarray(rec.results.iteration_time_s, dtype=float)
    np.savez(out, package="ptyacc", settings=json.dumps(overrides), phase=rec.results.phase,
             origin_A=np.asarray(rec.results.origin_A), dx_A=rec.results.dx_A, positions_A=rec.results.positions_A,
             s_per_iter=float(np.median(times[1:])), load=os.getloadavg()[0])


def run_ptyrad(path: Path, out: Path, lr_pos: float, extra: list[str]) -> None:
    """../shared/bench/run_ptyrad.py (its settings: Adam, object 5e-3, probe 1e-4, batch 32) with
    the sub-pixel position shifts refined from the first iteration at Adam step ``lr_pos`` (PtyRAD's
    templates: 5e-4) and its pos_recenter; the refined positions read from the model it ran."""
    launch = module_from(HERE / "grid" / "ptyrad_launch.py", "ptyrad_launch")
    launch.install_gaussian_blur(BENCH)  # a torchvision that cannot load on the CPU torch
    harness_out = out.with_suffix(".phase.npy")
    harness = module_from(BENCH / "run_ptyrad.py", "run_ptyrad",
                          [str(path), "--iters", "20", "--batch", "32", "--threads", "1", "--lr-pos", str(lr_pos),
                           "--out", str(harness_out), *extra])
    ran = {}
    loop = harness.recon_loop

    def kept(model, *args, **kwargs):
        ran["model"] = model
        return loop(model, *args, **kwargs)

    harness.recon_loop = kept
    harness.main()
    report = json.loads(harness_out.with_suffix(".json").read_text())
    model, ds = ran["model"], harness.load_dataset(str(path))
    dx, k = ds["dx_A"], ds["K"]
    off = np.asarray(report["canvas_offset_px"], dtype=float)
    corner = (model.crop_pos + model.opt_probe_pos_shifts).detach().cpu().numpy()  # window corner, canvas px
    np.savez(out, package="PtyRAD 1.0", settings=json.dumps({"lr_pos": lr_pos, "extra": extra}),
             phase=np.load(harness_out), origin_A=-off * dx, dx_A=dx, positions_A=(corner + k // 2 - off) * dx,
             s_per_iter=report["s_per_iter_median_after_first"], load=os.getloadavg()[0])


def run_ptychi(path: Path, out: Path, args: argparse.Namespace, extra: list[str]) -> None:
    """../shared/bench/run_ptychi.py (LSQML, its docs' settings) with Pty-chi's position correction:
    SGD of step ``--pos-step`` on its gradient (or cross-correlation) update, each update clipped
    to ``--pos-limit`` px, from epoch ``--pos-start``, optionally its affine constraint."""
    harness_out = out.with_suffix(".phase.npy")
    harness = module_from(BENCH / "run_ptychi.py", "run_ptychi",
                          [str(path), "--iters", "20", "--batch", "32", "--threads", "1", "--out", str(harness_out),
                           *extra])
    import ptychi.api as api

    build, make = harness.build_options, harness.make_task
    ran = {}

    def with_positions(*a, **k):
        options, settings = build(*a, **k)
        positions = options.probe_position_options
        positions.optimizable = args.pos_step > 0  # 0: fixed, the harness's default
        positions.optimizer = api.Optimizers.SGD
        positions.step_size = args.pos_step
        positions.optimization_plan.start = args.pos_start
        positions.correction_options.correction_type = getattr(api.PositionCorrectionTypes, args.pos_type)
        positions.correction_options.update_magnitude_limit = args.pos_limit
        positions.affine_transform_constraint.enabled = args.affine
        settings["positions"] = vars(args)
        return options, settings

    def kept(*a, **k):
        ran["task"] = make(*a, **k)
        return ran["task"]

    harness.build_options, harness.make_task = with_positions, kept
    harness.main()
    report = json.loads(harness_out.with_suffix(".json").read_text())
    ds = harness.load_dataset(str(path))
    dx = ds["dx_A"]
    off = np.asarray(report["canvas_offset_px"], dtype=float)
    origin = np.asarray(report["ptychi_pos_origin_coords"], dtype=float)
    pos = ran["task"].get_data_to_cpu("probe_positions", as_numpy=True)  # (N, 2) (y, x) px from the origin
    np.savez(out, package="Pty-chi 2.2 LSQML", settings=json.dumps(vars(args)), phase=np.load(harness_out),
             origin_A=-off * dx, dx_A=dx, positions_A=(pos + origin + 0.5 - off) * dx,
             s_per_iter=report["s_per_iter_median_after_first"], load=os.getloadavg()[0])


# ----------------------------------------------------------------------------- the scores
def score(path: Path, results: list[Path]) -> None:
    import h5py

    from ptyacc.results.quality import placed_ncc

    with h5py.File(path) as f:
        truth, true, nominal = f["ground_truth/phase"][()], f["ground_truth/positions_A"][()], f["positions_A"][()]
    print(f"{path.name}: nominal positions {rms_A(nominal, true):.3f} Å rms from the truth")
    print("| run | settings | positions rms (Å) | phase NCC | s/iteration (load) |")
    print("|---|---|---|---|---|")
    for result in results:
        r = np.load(result)
        shift_px = (r["positions_A"] - true).mean(0) / float(r["dx_A"])
        placed = (r["phase"], r["origin_A"], float(r["dx_A"]), true, truth)
        ncc = placed_ncc(*placed, shift_px)
        print(f"| {r['package']} | {r['settings']} | {rms_A(r['positions_A'], true):.3f} | {ncc:.4f} "
              f"| {float(r['s_per_iter']):.3f} ({float(r['load']):.1f}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    w = verbs.add_parser("write")
    w.add_argument("folder", type=Path)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--dose", type=float, default=1e5)
    for name in ("ptyacc", "ptyrad", "ptychi"):
        v = verbs.add_parser(name)
        v.add_argument("data", type=Path)
        v.add_argument("out", type=Path)
        if name == "ptyrad":
            v.add_argument("--lr-pos", type=float, default=5e-4)
        if name == "ptychi":
            v.add_argument("--pos-step", type=float, default=0.1)
            v.add_argument("--pos-limit", type=float, default=2.0)
            v.add_argument("--pos-start", type=int, default=0)
            v.add_argument("--pos-type", choices=["GRADIENT", "CROSS_CORRELATION"], default="GRADIENT")
            v.add_argument("--affine", action="store_true")
    s = verbs.add_parser("score")
    s.add_argument("data", type=Path)
    s.add_argument("results", type=Path, nargs="+")
    args, extra = parser.parse_known_args()
    started = time.perf_counter()
    if args.verb == "write":
        write(args.folder, args.seed, args.dose)
    elif args.verb == "ptyacc":
        run_ptyacc(args.data, args.out, extra)
    elif args.verb == "ptyrad":
        run_ptyrad(args.data, args.out, args.lr_pos, extra)
    elif args.verb == "ptychi":
        options = argparse.Namespace(**{k: v for k, v in vars(args).items() if k.startswith("pos_") or k == "affine"})
        run_ptychi(args.data, args.out, options, extra)
    else:
        score(args.data, args.results)
    print(f"({args.verb}: {time.perf_counter() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
