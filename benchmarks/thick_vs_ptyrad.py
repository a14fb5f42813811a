"""Thick crystals against PtyRAD 1.0 (docs/how-to/tilt-thickness-distortion.md, 'Against PtyRAD on thick crystals').

Four steps, each in the Python that has what it needs:

    # 1. abTEM (tests/data/abtem/make_cases.py): a 12 x 12 scan, 0.5 Å steps, of 10 unit cells of
    #    SrTiO3 [001] (39 Å), untilted and tilted [2.0, -1.5] mrad; expected patterns, then Poisson
    #    counts at 1e5 and 1e6 electrons per pattern (about a minute a crystal)
    OMP_NUM_THREADS=1 /tmp/abtem-venv/bin/python benchmarks/thick_vs_ptyrad.py make --work /tmp/thk
    # 2. ptyacc: the config `ptyacc init` writes for each file, one slice per unit cell, 40 iterations
    OMP_NUM_THREADS=1 python benchmarks/thick_vs_ptyrad.py ptyacc --work /tmp/thk [--set KEY=VALUE ...]
    # 3. PtyRAD through ../shared/bench/run_ptyrad.py (benchmarks/grid/ptyrad_launch.py stands in for
    #    torchvision), same slices, same iterations; --variant picks its settings
    OMP_NUM_THREADS=1 /tmp/ptyrad-venv/bin/python benchmarks/thick_vs_ptyrad.py ptyrad --work /tmp/thk
    # 4. the Markdown table from the JSON files under WORK/results (--name gave each column its name)
    python benchmarks/thick_vs_ptyrad.py table --work /tmp/thk --columns ptyacc_defaults ptyrad_harness

Every reconstruction is scored the same way: the phase summed over slices against the file's
/ground_truth/phase (band-limited to the pattern's dx), zero-shift NCC over the scanned region with
the reconstruction placed at its exact sub-pixel place (ptyacc: ``placed_ncc`` at its ``origin_A``;
PtyRAD: the harness's canvas, whose pixels are the truth's pixels plus a whole offset, the
positions' fractions carried by its probe shifts).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO.parent / "shared" / "bench"
CRYSTALS = {"untilted": (0.0, 0.0), "tilted": (2.0, -1.5)}
DOSES = (1e5, 1e6)
CELLS, CELL_A, ITERATIONS = 10, 3.905, 40
# PtyRAD's settings: the harness's (Adam 5e-3 on the object, its blur regularisers), and those of
# its thick-crystal example (starter/params/examples/PSO.yaml: 4 probe modes, its default steps)
PTYRAD_VARIANTS = {"harness": [], "harness_p1e-3": ["--lr-probe", "1e-3"],
                   "pso_steps": ["--pmodes", "4", "--lr-objp", "5e-4", "--lr-obja", "5e-4"]}


def file_name(crystal: str, dose: float) -> str:
    return f"sto_{crystal}_{dose:.0e}.h5"


def make(work: Path, scan: int, seed: int) -> None:
    """Expected patterns from abTEM per crystal, then Poisson counts at each dose."""
    sys.path.insert(0, str(REPO / "tests" / "data" / "abtem"))
    import make_cases

    work.mkdir(parents=True, exist_ok=True)
    for crystal, tilt in CRYSTALS.items():
        expected_path = work / f"sto_{crystal}_expected.h5"
        make_cases.CASES[crystal] = dict(cells_deep=CELLS, tilt=tilt, defocus=60.0, scan=(scan, scan), step=0.5,
                                         rotation=0.0, dose=0.0)
        if not expected_path.is_file():
            make_cases.simulate(crystal, expected_path)
        counted_copies(expected_path, {dose: work / file_name(crystal, dose) for dose in DOSES}, seed)


def counted_copies(expected_path: Path, paths: dict[float, Path], seed: int) -> None:
    """Copies of an abTEM file of expected patterns with Poisson counts at each dose (electrons per pattern) of
    ``paths`` {dose: path}."""
    import h5py
    import numpy as np

    with h5py.File(expected_path) as f:
        expected = f["patterns"][()].astype(np.float64) / f.attrs["dose_per_pattern"]
    for dose, path in paths.items():
        path.write_bytes(expected_path.read_bytes())
        counts = np.random.default_rng(seed).poisson(expected * dose).astype(np.uint32)
        with h5py.File(path, "a") as f:
            del f["patterns"]
            f.create_dataset("patterns", data=counts, compression="gzip", shuffle=True)
            f.attrs["dose_per_pattern"] = dose
        print(path, flush=True)


def init_config(path: Path, config_path: Path, cells: int) -> dict:
    """The config ``ptyacc init`` writes for the file (kept at ``config_path``), one slice per unit cell."""
    import yaml

    subprocess.run([str(Path(sys.executable).with_name("ptyacc")), "init", str(path), "-o", str(config_path), "--force"],
                   check=True, capture_output=True)
    config = yaml.safe_load(config_path.read_text())
    config["data"]["path"] = str(path)
    config["model"] = {"slices": cells, "slice_thickness_A": CELL_A}
    config["runtime"] = {"progress": False}
    config.pop("output", None)
    return config


def file_frame_ncc(rec, path: Path, depth: bool = False) -> float:
    """The phase NCC of a run on an abTEM file with its truth: init reads the file's positions as the raster they
    form, which starts at zero, so the frame's translation shared with the positions is taken out (the truth lies
    in the file's frame). ``depth``: instead of the phase summed over slices, the vacancies' depth map, the phase
    of the top three slices less three slices' share of the whole, against the same of the truth's unit cells
    (make_cases.py empties an Sr and an O column in the top three cells): how much of the depth a run resolves,
    which the summed phase cannot tell (one slice per unit cell)."""
    import h5py
    import numpy as np

    from ptyacc.results.quality import placed_ncc, resampled

    with h5py.File(path) as f:
        truth, file_positions_A = f["ground_truth/phase"][()], f["positions_A"][()].reshape(-1, 2)
        cells, dx_A = f["ground_truth/cell_phase"][()], float(f["ground_truth"].attrs["dx_A"])
    phase = rec.results.phase
    if depth:
        slices = np.angle(rec.results.object[0])  # (S, Ny, Nx)
        phase = slices[:3].sum(0) - 3 / len(slices) * slices.sum(0)
        truth = cells[:3].sum(0) - 3 / len(cells) * cells.sum(0)
    frame_A = file_positions_A.mean(0) - rec.data.positions_A.mean(0)
    return float(placed_ncc(resampled(phase, rec.results.dx_A, dx_A), np.asarray(rec.results.origin_A) + frame_A,
                            dx_A, rec.data.positions_A + frame_A, truth))


def run_ptyacc(path: Path, out: Path, overrides: list[str]) -> dict:
    """The config ``ptyacc init`` writes for the file, one slice per unit cell, ITERATIONS."""
    import numpy as np

    import ptyacc

    config = init_config(path, out.with_suffix(".yaml"), CELLS)
    config["optim"]["iterations"] = ITERATIONS
    rec = ptyacc.reconstruct(ptyacc.load_config(config, overrides), write=False)
    ncc = file_frame_ncc(rec, path)
    times = rec.iteration_times_s
    return {"ncc": ncc, "s_per_iteration": float(np.median(times[1:] or times)), "overrides": overrides,
            "loss": float(np.asarray(rec.results.loss)[-1]), "auto": rec.results.attrs.get("auto_values", ""),
            "deviance": rec.poisson_deviance, "counts_per_counted_pixel": rec.results.attrs.get("counts_per_counted_pixel")}


def run_ptyrad(path: Path, out: Path, variant: str) -> dict:
    npy = out.with_suffix(".npy")
    command = [sys.executable, str(REPO / "benchmarks" / "grid" / "ptyrad_launch.py"), str(BENCH), str(path),
               "--iters", str(ITERATIONS), "--batch", "18", "--slices", str(CELLS), "--slice-thickness-A", str(CELL_A),
               "--threads", "1", "--out", str(npy), *PTYRAD_VARIANTS[variant]]
    subprocess.run(command, check=True, capture_output=True)
    result = json.loads(npy.with_suffix(".json").read_text())
    return {"ncc": result["gt_compare"]["ncc_zero_shift"], "s_per_iteration": result["s_per_iter_median_after_first"],
            "variant": variant, "loss": result["loss_final"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["make", "ptyacc", "ptyrad", "table"])
    parser.add_argument("--work", type=Path, default=Path("/tmp/thk"))
    parser.add_argument("--scan", type=int, default=12)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--crystals", nargs="+", default=list(CRYSTALS), choices=list(CRYSTALS))
    parser.add_argument("--doses", nargs="+", type=float, default=list(DOSES))
    parser.add_argument("--name", default=None, help="the column: ptyacc's (default 'defaults') or PtyRAD's variant")
    parser.add_argument("--variant", default="harness", choices=list(PTYRAD_VARIANTS))
    parser.add_argument("--set", nargs="*", default=[], help="ptyacc config overrides KEY=VALUE")
    parser.add_argument("--columns", nargs="*", default=None, help="table: these names only, in this order")
    args = parser.parse_args()
    if args.step == "make":
        return make(args.work, args.scan, args.seed)
    results = args.work / "results"
    if args.step == "table":
        return table(results, args.columns)
    results.mkdir(parents=True, exist_ok=True)
    name = args.name or ("ptyacc_defaults" if args.step == "ptyacc" else f"ptyrad_{args.variant}")
    for crystal in args.crystals:
        for dose in args.doses:
            path = args.work / file_name(crystal, dose)
            out = results / f"{name}__{crystal}__{dose:.0e}.json"
            if args.step == "ptyacc":
                result = run_ptyacc(path, out, args.set)
            else:
                result = run_ptyrad(path, out, args.variant)
            out.write_text(json.dumps(result))
            print(out.name, json.dumps(result), flush=True)


def table(results: Path, columns: list[str] | None = None) -> None:
    """NCC (s/iteration) per crystal and dose, a column per name (the JSON files' first part)."""
    rows: dict[tuple[str, str], dict[str, dict]] = {}
    for path in sorted(results.glob("*__*__*.json")):
        name, crystal, dose = path.stem.split("__")
        rows.setdefault((crystal, dose), {})[name] = json.loads(path.read_text())
    names = columns or sorted({name for row in rows.values() for name in row})
    print("| crystal | e/pattern | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for (crystal, dose), row in sorted(rows.items()):
        cells = [f"{row[n]['ncc']:.4f} ({row[n]['s_per_iteration']:.2f} s)" if n in row else "" for n in names]
        print(f"| {crystal} | {dose} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
