"""The independent benchmark grid (issue 29): ptyacc's defaults against PtyRAD 1.0 tuned and Pty-chi
2.2 (LSQML and Autodiff, their own defaults) on data from benchmarks/grid/simulate.py (NumPy, not
ptyacc's forward model). Points: defocus -150 / 0 / +150 Å x detector edge 60 / 110 mrad x dose
(default 5e3, 1e5, 2e4 electrons per pattern, in that order) x 1 / 4 slices of 8 Å. Every package:
20 iterations, batch 32, one probe mode, the data's slices and thickness; every result scored by the same
``packages.score`` (zero-shift NCC with the canvas placed at its exact origin, and after the best
sub-pixel shift). One JSON per (point, package/variant) under WORK/cache, so the table is rebuilt
without re-running and a new ptyacc variant costs only its own runs.

    python benchmarks/grid/run_grid.py --work /tmp/grid/work --packages ptyacc          # defaults, poisson, recenter
    python benchmarks/grid/run_grid.py --work /tmp/grid/work --packages ptyrad ptychi \\
        --ptyrad-python /tmp/ptyrad-venv/bin/python --ptychi-python /tmp/ptychi-venv/bin/python
    python benchmarks/grid/run_grid.py --work /tmp/grid/work --ptyacc-variant lr02 --set optim.lr.object=0.02
    python benchmarks/grid/run_grid.py --work /tmp/grid/work --table                    # Markdown from the cache
    python benchmarks/grid/run_grid.py --work /tmp/grid/work --table --slices 4 --columns msbase ms_tv1  # a few columns
    python benchmarks/grid/run_grid.py --work /tmp/grid/work --slices 4 --ptyacc-variant blur \\
        --set optim.regularize.depth_blur_slices=1                                       # multislice points only
    python benchmarks/grid/run_grid.py --work /tmp/grid/work --timing 3 --doses 1e5 --packages ptyacc ptyrad ptychi \\
        --ptyrad-variants p1e-3_noreg                                                   # s/iteration, interleaved
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import packages  # noqa: E402
import simulate  # noqa: E402
import table  # noqa: E402

DEFOCI_A = (-150.0, 0.0, 150.0)
EDGES_MRAD = (60.0, 110.0)
SLICES = (1, 4)
THICKNESS_A = 8.0
PTYACC_VARIANTS = {"defaults": [], "poisson": ["optim.loss=poisson"], "recenter": ["model.recenter.probe=true"]}
# PtyRAD "tuned" as benchmarks/records/2026-11-27-benchmarks.md ("Convergence and low-dose data"): the best of probe learning
# rate 1e-3 and 3e-3, with and without its blur regularisers, picked per point by the NCC
PTYRAD_VARIANTS = {"p1e-3_noreg": ["--lr-probe", "1e-3", "--no-reg"], "p1e-3_reg": ["--lr-probe", "1e-3"],
                   "p3e-3_noreg": ["--lr-probe", "3e-3", "--no-reg"], "p3e-3_reg": ["--lr-probe", "3e-3"]}
PTYCHI_VARIANTS = {"lsqml": ["--algo", "lsqml"], "autodiff": ["--algo", "autodiff"]}


def point_name(defocus_A: float, edge_mrad: float, dose: float, slices: int) -> str:
    return f"df{defocus_A:+.0f}_edge{edge_mrad:.0f}_dose{dose:.0e}_s{slices}".replace("+", "p").replace("-", "m")


def points(doses: list[float], slices: list[int] = SLICES) -> list[tuple[float, float, float, int]]:
    """(defocus_A, edge_mrad, dose, slices), doses outermost so a partial run covers whole doses."""
    return [(f, e, d, s) for d, s, f, e in itertools.product(doses, slices, DEFOCI_A, EDGES_MRAD)]


def dataset(work: Path, point: tuple) -> Path:
    """The point's file, simulated once (seed 1 for every point)."""
    path = work / "data" / f"{point_name(*point)}.h5"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        defocus, edge, dose, slices = point
        simulate.write(str(path), simulate.Setting(defocus_A=defocus, edge_mrad=edge, dose=dose, slices=slices,
                                                   slice_thickness_A=THICKNESS_A, seed=1))
    return path


def truth(path: Path) -> dict:
    import h5py

    with h5py.File(path) as f:
        return {"phase": f["ground_truth/phase"][()].astype(float), "positions_A": f["positions_A"][()],
                "dx_A": float(f.attrs["dx_A"]), "counts_per_px": float(f["patterns"][()].mean())}


def run_one(args, point: tuple, package: str, variant: str, extra: list[str]) -> dict:
    """Reconstruct, score and describe one (point, package, variant)."""
    path = dataset(args.work, point)
    slices = point[3]
    if package == "ptyacc":
        found = packages.run_ptyacc(path, slices, THICKNESS_A, extra)
    else:
        python = args.ptyrad_python if package == "ptyrad" else args.ptychi_python
        found = packages.run_harness(package, python, path, slices, THICKNESS_A, extra, args.bench)
    gt = truth(path)
    origin_A = found.get("origin_A")
    if origin_A is None:  # a harness canvas: canvas pixel [i + off] is truth pixel [i]
        origin_A = [-v * gt["dx_A"] for v in found["offset_px"]]
    scores = packages.score(found["phase"], origin_A, gt["dx_A"], gt["positions_A"], gt["phase"])
    return {"point": dict(zip(("defocus_A", "edge_mrad", "dose", "slices"), point)), "package": package,
            "variant": variant, "settings": extra, **scores, "s_per_iter": found["s_per_iter"],
            "counts_per_px": gt["counts_per_px"], "loadavg": list(os.getloadavg()),
            "harness_ncc_zero_shift": found.get("harness_ncc_zero_shift"),
            "other_cpu_fraction": found.get("other_cpu_fraction"), "validation_error": found.get("validation_error"),
            "finished": time.strftime("%Y-%m-%d %H:%M:%S")}


def jobs(args) -> list[tuple[str, str, list[str]]]:
    """(package, variant, settings) to run at every point."""
    out = []
    if args.ptyacc_variant:
        return [("ptyacc", args.ptyacc_variant, args.set)]
    if "ptyacc" in args.packages:
        out += [("ptyacc", name, settings) for name, settings in PTYACC_VARIANTS.items()]
    if "ptyrad" in args.packages:
        out += [("ptyrad", name, settings) for name, settings in PTYRAD_VARIANTS.items()
                if name in args.ptyrad_variants]
    if "ptychi" in args.packages:
        out += [("ptychi", name, settings) for name, settings in PTYCHI_VARIANTS.items()]
    return out


def timing(args, rounds: int) -> None:
    """Seconds per iteration of every job, interleaved (A, B, C, A, B, C, ...) at one point per slice
    count (defocus 0, edge 60 mrad, the first dose), so that a machine's drifting load hits all alike."""
    seconds: dict[tuple, list[float]] = {}
    for _ in range(rounds):
        for point in [(0.0, 60.0, args.doses[0], slices) for slices in SLICES]:
            for package, variant, settings in jobs(args):
                result = run_one(args, point, package, variant, settings)
                seconds.setdefault((point_name(*point), package, variant), []).append(result["s_per_iter"])
                print(f"{point_name(*point)} {package}/{variant}: {result['s_per_iter']:.3f} s/it, load "
                      f"{result['loadavg'][0]:.1f}", flush=True)
    (args.work / "timing.json").write_text(json.dumps({" ".join(k): v for k, v in seconds.items()}, indent=1))
    for key, values in seconds.items():
        print(" ".join(key), "median s/iteration", f"{sorted(values)[len(values) // 2]:.3f}", values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="data/ and cache/ go here")
    parser.add_argument("--doses", type=float, nargs="+", default=[5e3, 1e5, 2e4])
    parser.add_argument("--slices", type=int, nargs="+", default=list(SLICES), choices=SLICES,
                        help="only the points with these slice counts (a multislice-only candidate: --slices 4)")
    parser.add_argument("--packages", nargs="+", default=["ptyacc"], choices=["ptyacc", "ptyrad", "ptychi"])
    parser.add_argument("--ptyrad-variants", nargs="+", default=list(PTYRAD_VARIANTS), choices=list(PTYRAD_VARIANTS))
    parser.add_argument("--ptyacc-variant", help="a named ptyacc variant with the --set overrides (ptyacc only)")
    parser.add_argument("--set", action="append", default=[], help="ptyacc override key=value (repeatable)")
    parser.add_argument("--ptyrad-python", default="/tmp/ptyrad-venv/bin/python")
    parser.add_argument("--ptychi-python", default="/tmp/ptychi-venv/bin/python")
    parser.add_argument("--bench", type=Path, default=packages.BENCH, help="the harnesses' folder (../shared/bench)")
    parser.add_argument("--rerun", action="store_true", help="ignore the cache")
    parser.add_argument("--table", action="store_true", help="print the Markdown table from the cache and stop")
    parser.add_argument("--columns", nargs="+", help="with --table: only these ptyacc variants, beside PtyRAD tuned "
                                                     "and Pty-chi LSQML, on the points of --doses and --slices")
    parser.add_argument("--timing", type=int, metavar="ROUNDS",
                        help="time the jobs interleaved, ROUNDS times, without the cache, and stop")
    args = parser.parse_args(argv)
    if args.timing:
        timing(args, args.timing)
        return 0
    if args.table and args.columns:
        print(table.chosen(args.work / "cache", [point_name(*p) for p in points(args.doses, args.slices)], args.columns))
        return 0
    if args.table:
        print(table.markdown(args.work / "cache", [point_name(*p) for p in points(args.doses)]))
        return 0
    for point in points(args.doses, args.slices):
        for package, variant, settings in jobs(args):
            cached = args.work / "cache" / point_name(*point) / f"{package}__{variant}.json"
            if cached.is_file() and not args.rerun:
                continue
            try:
                result = run_one(args, point, package, variant, settings)
            except Exception as exc:  # one failing run must not stop a grid that takes hours
                print(f"FAILED {point_name(*point)} {package}/{variant}: {exc}", flush=True)
                continue
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(result, indent=1))
            print(f"{point_name(*point)} {package}/{variant}: zero {result['ncc_zero_shift']:.4f} best "
                  f"{result['ncc_best_shift']:.4f} {result['s_per_iter']:.3f} s/it load {result['loadavg'][0]:.1f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
