"""A tilt given, refined from zero, or left out, on a small distribution of mistilted thick crystals.

Every case is SrTiO3 [001] simulated by abTEM (``tests/data/abtem/make_cases.py``, which never imports
ptyacc): 300 kV, 20 mrad, 60 A underfocus, 64 x 64 patterns, 10 x 10 positions 0.5 A apart, an Sr and an O
column empty in the top three cells. The cases differ in thickness (6, 10 or 14 unit cells), in the beam's
mistilt (0.5-3 mrad in every direction) and in the dose (1e5 or 1e6 electrons per pattern).

Each case is reconstructed with the config a user writes (the file's positions, one slice per unit cell,
every other key at its default) in one of these modes:

* ``truth``: ``experiment.tilt_mrad`` the true tilt, not refined;
* ``zero``: ``experiment.tilt_mrad`` [0, 0], not refined (the tilt left out);
* ``refine``: from [0, 0], refined from ``optim.start.tilt`` (3 unless the variant says otherwise);
* ``refine_from_truth``: the same from the true tilt (does the fit keep it?).

A variant (``--optim JSON``) adds optim keys to every run, e.g. ``'{"start": {"tilt": 1}}'``.
Scored: the final loss (the run's own), the final tilt and its distance from the truth (the larger of the
two components' errors, mrad), the phase NCC against abTEM's projected potential at the exact origin.

    python benchmarks/tilt/distribution.py simulate --dir /tmp/tilt-cases        # in a venv with abTEM 1.0.11
    python benchmarks/tilt/distribution.py run --dir /tmp/tilt-cases --modes truth zero refine
    python benchmarks/tilt/distribution.py run --dir /tmp/tilt-cases --modes refine --optim '{"start": {"tilt": 1}}'
    python benchmarks/tilt/distribution.py table --dir /tmp/tilt-cases

One JSON line per run is appended to ``DIR/runs.jsonl``; ``table`` prints them as Markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CELL_THICKNESS_A = 3.905
COMMON = dict(defocus=60.0, scan=(10, 10), step=0.5, rotation=0.0)
# name: unit cells deep, the beam's tilt [y, x] mrad, electrons per pattern
CASES = {
    "c6_a": dict(cells_deep=6, tilt=(1.0, 1.0), dose=1e6),
    "c6_b": dict(cells_deep=6, tilt=(-2.5, 1.0), dose=1e5),
    "c10_a": dict(cells_deep=10, tilt=(-1.5, -2.0), dose=1e6),
    "c10_b": dict(cells_deep=10, tilt=(0.5, 0.2), dose=1e5),
    "c10_c": dict(cells_deep=10, tilt=(0.0, 3.0), dose=1e6),
    "c14_a": dict(cells_deep=14, tilt=(0.7, -0.5), dose=1e6),
    "c14_b": dict(cells_deep=14, tilt=(-1.0, 2.5), dose=1e5),
    "c14_c": dict(cells_deep=14, tilt=(2.0, 0.0), dose=1e5),
    "u10": dict(cells_deep=10, tilt=(0.0, 0.0), dose=1e6),  # untilted: what a change does where no tilt acts
    "u14": dict(cells_deep=14, tilt=(0.0, 0.0), dose=1e5),
}


def simulate(directory: Path, names: list[str]) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "data" / "abtem"))
    import make_cases

    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        out = directory / f"{name}.h5"
        if out.exists():
            continue
        make_cases.CASES[name] = {**COMMON, **CASES[name]}
        start = time.time()
        make_cases.simulate(name, out)
        print(f"{name}: {time.time() - start:.0f} s", flush=True)


def config_of(path: Path, mode: str, optim: dict, iterations: int) -> dict:
    import h5py

    with h5py.File(path) as f:
        cells = f["ground_truth/cell_phase"].shape[0]
        true_tilt = [float(t) for t in f["ground_truth"].attrs["tilt_mrad"]]
    tilt = {"truth": true_tilt, "zero": [0.0, 0.0], "refine": [0.0, 0.0], "refine_from_truth": true_tilt}[mode]
    optim = {"iterations": iterations, **optim}
    if mode.startswith("refine"):
        optim["start"] = {"tilt": 3, **optim.get("start", {})}
    return {"data": {"path": str(path)}, "experiment": {"positions": {"key": "positions_A"}, "tilt_mrad": tilt},
            "model": {"slices": cells, "slice_thickness_A": CELL_THICKNESS_A}, "optim": optim,
            "runtime": {"progress": False, "threads": 1}}


def score(path: Path, rec) -> float:
    import h5py

    from ptyacc.results.quality import placed_ncc, resampled

    with h5py.File(path) as f:
        truth_phase, positions_A = f["ground_truth/phase"][()], f["positions_A"][()]
        dx_A = float(f["ground_truth"].attrs["dx_A"])
    phase = resampled(rec.results.phase, rec.results.dx_A, dx_A)
    return float(placed_ncc(phase, rec.results.origin_A, dx_A, positions_A, truth_phase))


def reconstruct_with_trail(config) -> tuple:
    """The run, and the tilt [y, x] mrad at the first step of every 10th iteration (where refined)."""
    from ptyacc.reconstruction.engine import Reconstructor

    trail: dict[int, list[float]] = {}

    def on_step(iteration: int, indices) -> None:
        propagation = getattr(reconstructor.model, "propagation", None)
        if iteration % 10 == 0 and iteration not in trail and propagation is not None:
            trail[iteration] = [round(float(t), 3) for t in propagation.tilt_mrad.detach().reshape(-1)[:2]]

    reconstructor = Reconstructor(config, None, False, on_step)
    reconstructor.build()
    reconstructor.run()
    return reconstructor.finish(), trail


def run(directory: Path, names: list[str], modes: list[str], optim: dict, iterations: int, label: str) -> None:
    import h5py

    import ptyacc

    for name in names:
        path = directory / f"{name}.h5"
        with h5py.File(path) as f:
            true_tilt = np.asarray(f["ground_truth"].attrs["tilt_mrad"], dtype=float)
        for mode in modes:
            start = time.time()
            config = config_of(path, mode, optim, iterations)
            rec, trail = reconstruct_with_trail(ptyacc.load_config(config))
            given = config["experiment"]["tilt_mrad"]
            refined = rec.results.tilt_mrad  # None where the tilt was not refined
            tilt = np.asarray(given if refined is None else refined, dtype=float).reshape(-1, 2).mean(0)
            row = {"case": name, "mode": mode, "variant": label, "iterations": len(rec.loss),
                   "true_tilt": true_tilt.tolist(), "tilt": tilt.round(3).tolist(),
                   "off_mrad": float(np.abs(tilt - true_tilt).max()) if mode.startswith("refine") else None,
                   "loss": float(rec.loss[-1]), "ncc": score(path, rec), "dx_A": float(rec.results.dx_A),
                   "trail": trail, "seconds": round(time.time() - start)}
            print(json.dumps(row), flush=True)
            with open(directory / "runs.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")


def table(directory: Path) -> None:
    """Two tables: the tilt refined (mrad off / phase NCC) per case and variant, and the tilt given or left out
    (final loss / phase NCC) per case and variant, each variant run on at least three cases. A run made twice shows
    its last."""
    rows: dict[tuple[str, str, str], dict] = {}
    for line in open(directory / "runs.jsonl"):
        r = json.loads(line)
        rows[r["case"], r["variant"], r["mode"]] = r
    cases = [c for c in CASES if any(key[0] == c for key in rows)]
    for modes, cell in ((("refine", "refine_from_truth"), lambda r: f"{r['tilt']} {r['off_mrad']:.2f} / {r['ncc']:.3f}"),
                        (("truth", "zero"), lambda r: f"{r['loss']:.0f} / {r['ncc']:.3f}")):
        seen = [(v, m) for (_, v, m) in rows if m in modes]  # in the order first run; a variant of 3 cases or more
        columns = [key for key in dict.fromkeys(seen) if seen.count(key) >= 3]
        print("| case | tilt, dose | " + " | ".join(f"{m}, {v}" for v, m in columns) + " |")
        print("|---|---|" + "---|" * len(columns))
        for case in cases:
            spec = CASES[case]
            cells = [cell(rows[case, v, m]) if (case, v, m) in rows else "" for v, m in columns]
            print(f"| {case} | {list(spec['tilt'])}, {spec['dose']:.0e} | " + " | ".join(cells) + " |")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verb", choices=("simulate", "run", "table"))
    parser.add_argument("--dir", type=Path, default=Path("/tmp/ptyacc-tilt-cases"))
    parser.add_argument("--cases", nargs="+", default=sorted(CASES))
    parser.add_argument("--modes", nargs="+", default=["truth", "zero", "refine"])
    parser.add_argument("--optim", default="{}", help="optim keys added to every run (JSON)")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--label", default="defaults")
    args = parser.parse_args()
    if args.verb == "simulate":
        simulate(args.dir, args.cases)
    elif args.verb == "run":
        run(args.dir, args.cases, args.modes, json.loads(args.optim), args.iterations, args.label)
    else:
        table(args.dir)


if __name__ == "__main__":
    main()
