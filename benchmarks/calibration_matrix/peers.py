"""The calibration matrix's cases handed, with the truth, to two other packages (PtyRAD and Pty-chi),
scored exactly as the matrix scores ptyacc.

A matrix file holds what a microscope writes; the benchmark harnesses that run the other packages
(``run_ptyrad.py``, ``run_ptychi.py``, with ``bench_metrics.py`` beside them) read a simpler layout in
which everything is already right. ``convert`` writes that layout from a matrix file and its
``/ground_truth``:

* patterns: the detector's read-out undone (transpose, then flip y, then flip x: the inverse of
  ``simulate.read_out``), so that ky runs along rows and the zero frequency sits at (K/2, K/2);
* positions: ``/ground_truth/positions_A``, the nominal raster turned by the true scan rotation, in
  the frame in which true-phase pixel [i, j] sits at (i, j) dx;
* the true defocus (positive = underfocus), energy, semi-angle and dk; the true probe as
  ``/ground_truth/probe`` (for the harnesses' forward checks);
* bad pixels: neither harness passes a detector mask, so the pixels that ptyacc's finder reports
  (``find_bad_pixels``: those the matrix's told run leaves out of its loss) are in-painted with the
  mean of their good neighbours in every pattern;
* descan, blur and partial coherence left as the data have them: the harnesses model none of them
  (one coherent probe mode, as ptyacc's told run).

Each package then runs through its harness (same iterations and batch as ptyacc's told run, every other
setting the harness's default) and its phase, on a canvas whose pixel [i + off] is true pixel [i], is
scored with ``matrix.scores``: the matrix's NCC at the exact sub-pixel place (the canvas's pixel [0, 0]
at -off dx in the truth's frame), the best-shift NCC beside it.

    python benchmarks/calibration_matrix/peers.py --cases c63 c38 --cache /tmp/ptyacc-matrix \\
        --out /tmp/peers --bench /path/to/bench --ptyrad-python /tmp/ptyrad-venv/bin/python \\
        --ptychi-python /tmp/ptychi-venv/bin/python
    python benchmarks/calibration_matrix/peers.py --cases c63 c38 --cache ... --out ... --table
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import matrix  # noqa: E402  (the cases, the simulator and the score)

sys.path.insert(0, str(matrix.ROOT / "benchmarks" / "grid"))
import packages  # noqa: E402  (the harnesses' runner)

PEERS = ("ptyrad", "ptychi")


def canonical(stored: np.ndarray, transpose: bool, flip_y: bool, flip_x: bool) -> np.ndarray:
    """(..., K, K) patterns as the detector stored them, back in the simulator's layout: transposed,
    then flipped along y, then along x (``simulate.read_out`` in reverse)."""
    out = np.swapaxes(stored, -1, -2) if transpose else stored
    if flip_y:
        out = out[..., ::-1, :]
    if flip_x:
        out = out[..., ::-1]
    return np.ascontiguousarray(out)


def inpainted(patterns: np.ndarray, bad: np.ndarray) -> np.ndarray:
    """(N, K, K) ``patterns`` with each ``bad`` (K, K) pixel replaced by the mean of its good neighbours
    (of eight) in the same pattern; a bad pixel with no good neighbour reads 0."""
    out = np.array(patterns, dtype=np.float64)
    k_y, k_x = bad.shape
    for row, col in np.argwhere(bad):
        rows = slice(max(row - 1, 0), min(row + 2, k_y))
        cols = slice(max(col - 1, 0), min(col + 2, k_x))
        good = ~bad[rows, cols]
        around = out[:, rows, cols][:, good]  # (N, good neighbours)
        out[:, row, col] = around.mean(1) if good.any() else 0.0
    return out


def convert(data: Path, target: Path) -> dict:
    """Write the harness layout of the matrix file ``data`` to ``target``, handed the truth (module
    docstring); what was done, as a dict."""
    from ptyacc.data.detector import find_bad_pixels

    with h5py.File(data) as f:
        stored = f["patterns"][()]  # (ny, nx, K, K)
        truth = f["ground_truth"]
        flags = tuple(bool(truth.attrs[key]) for key in ("transpose", "flip_y", "flip_x"))
        positions, phase = truth["positions_A"][()], truth["phase"][()]
        dx_A = float(truth["phase"].attrs["dx_A"])
        defocus_A = float(truth.attrs["defocus_A"])
        attrs = {key: f.attrs[key] for key in ("energy_eV", "semiangle_mrad", "dk_invA", "scan_step_A")}
    scan_y, scan_x, k, _ = stored.shape
    bad_stored = find_bad_pixels(stored.reshape(-1, k, k)).mask
    bad = canonical(bad_stored, *flags)
    patterns = inpainted(canonical(stored.reshape(-1, k, k), *flags), bad)
    lam_A = matrix.simulate.wavelength_A(float(attrs["energy_eV"]))
    probe = matrix.simulate.probe_wave(k, float(attrs["dk_invA"]), lam_A, float(attrs["semiangle_mrad"]), defocus_A)
    target.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(target, "w") as f:
        f["patterns"] = patterns.reshape(scan_y, scan_x, k, k).astype(np.float32)
        f["positions_A"] = positions
        gt = f.create_group("ground_truth")
        gt.create_dataset("phase", data=phase).attrs["dx_A"] = dx_A
        gt["probe"] = probe.astype(np.complex64)
        f.attrs.update(attrs)
        f.attrs.update(defocus_A=defocus_A, dx_A=dx_A, scan_shape=np.array([scan_y, scan_x]))
    return {"orientation_undone": dict(zip(("transpose", "flip_y", "flip_x"), flags)),
            "bad_pixels_inpainted": int(bad.sum()), "defocus_A": defocus_A}


def told_batch(cache: Path, case: matrix.Case) -> int:
    """The batch size ptyacc's told run of ``case`` used (its auto value), 32 where not recorded."""
    record = cache / "results" / f"{case.name}__told.json"
    values = (json.loads(record.read_text()).get("auto_values") or {}) if record.is_file() else {}
    return int(values.get("optim.batch_size", 32))


def run_peer(peer: str, python: str, bench: Path, converted: Path, iterations: int, batch: int, threads: int) -> dict:
    """``peer``'s harness on ``converted`` (``packages.run_harness``), scored by ``matrix.scores``: its
    canvas's pixel [i + off] is true pixel [i], so its pixel [0, 0] sits at -off dx in the truth's frame."""
    from ptyacc.results.quality import best_shift_ncc

    extra = ["--algo", "lsqml"] if peer == "ptychi" else []
    started = time.time()
    try:
        out = packages.run_harness(peer, python, converted, 1, 1.0, extra, bench=bench, threads=threads,
                                   iterations=iterations, batch=batch)
    except RuntimeError as exc:  # one peer failing on one case must not stop the others
        return {"peer": peer, "error": str(exc)[-2000:], "seconds": round(time.time() - started, 1),
                "loadavg": [round(v, 2) for v in os.getloadavg()]}
    record = {"peer": peer, "seconds": round(time.time() - started, 1), "loadavg": [round(v, 2) for v in os.getloadavg()],
              **{key: out[key] for key in ("offset_px", "s_per_iter", "settings", "harness_ncc_zero_shift",
                                           "loss_initial", "loss_final")}}
    with h5py.File(converted) as f:
        truth, positions = f["ground_truth/phase"][()].astype(float), f["positions_A"][()]
        dx_A = float(f["ground_truth/phase"].attrs["dx_A"])
    origin_A = -np.asarray(out["offset_px"], dtype=float) * dx_A
    record.update(matrix.scores(np.asarray(out["phase"], dtype=float), origin_A, dx_A, positions, positions, truth,
                                best_shift_ncc))
    return record


def do_case(case: matrix.Case, args: argparse.Namespace) -> None:
    """Convert ``case`` (its data in the matrix's cache) and run each chosen peer on it for
    ``args.iterations`` (None: the case's, as ptyacc's told run); one JSON per peer and iteration count."""
    folder = args.out / case.name
    converted = folder / "handed_truth.h5"
    conversion = convert(args.cache / "data" / f"{case.name}.h5", converted)
    batch, iterations = told_batch(args.cache, case), args.iterations or case.iterations
    for peer in args.peers:
        record = run_peer(peer, getattr(args, f"{peer}_python"), args.bench, converted, iterations, batch,
                          args.threads)
        record.update(case=case.name, iterations=iterations, batch=batch, parameters=case.describe(),
                      conversion=conversion, finished=time.strftime("%Y-%m-%d %H:%M:%S"))
        (folder / f"{peer}_{iterations}it.json").write_text(json.dumps(record, indent=1))
        print(f"{case.name} {peer} {iterations} it: ncc {record.get('ncc')} (the harness's own "
              f"{record.get('harness_ncc_zero_shift')}) {record['seconds']} s {record.get('error', '')[-300:]}", flush=True)


def table(cache: Path, out: Path, chosen: list[matrix.Case]) -> str:
    """Markdown: per case ptyacc auto and told (the matrix's cache) and each peer told at each iteration
    count recorded in ``out``; NCC, seconds and the load average when each ran."""
    def cell(path: Path) -> str:
        if not path.is_file():
            return "-"
        record = json.loads(path.read_text())
        if record.get("ncc") is None:
            return "failed" if record.get("error") else "-"
        load = record.get("loadavg") or [float("nan")]
        return f"{record['ncc']:.3f} ({record['seconds']:.0f} s, load {load[0]:.1f})"

    names = {"ptyrad": "PtyRAD", "ptychi": "Pty-chi LSQML"}
    runs = sorted({(peer, int(path.stem.split("_")[1][:-2])) for case in chosen for peer in PEERS
                   for path in (out / case.name).glob(f"{peer}_*it.json")}, key=lambda run: (PEERS.index(run[0]), run[1]))
    rows = ["| case | parameters | ptyacc auto | ptyacc told | " + " | ".join(f"{names[p]} told, {n} it" for p, n in runs)
            + " |", "|---" * (4 + len(runs)) + "|"]
    for case in chosen:
        peers = [cell(out / case.name / f"{peer}_{n}it.json") for peer, n in runs]
        rows.append(f"| {case.name} | {case.describe()} | {cell(cache / 'results' / f'{case.name}__auto.json')} | "
                    f"{cell(cache / 'results' / f'{case.name}__told.json')} | " + " | ".join(peers) + " |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", required=True, help="matrix cases (c00 ... c63)")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/ptyacc-matrix"),
                        help="the matrix's cache: data/<case>.h5 and ptyacc's results/ (read only)")
    parser.add_argument("--out", type=Path, required=True, help="converted files, the peers' outputs and records")
    parser.add_argument("--bench", type=Path, default=packages.BENCH,
                        help="the folder of run_ptyrad.py, run_ptychi.py and bench_metrics.py")
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    parser.add_argument("--ptyrad-python", dest="ptyrad_python", default="python", help="the python that has ptyrad")
    parser.add_argument("--ptychi-python", dest="ptychi_python", default="python", help="the python that has ptychi")
    parser.add_argument("--iterations", type=int,
                        help="iterations of each peer run (default: the case's, those of ptyacc's told run)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each peer run")
    parser.add_argument("--table", action="store_true", help="write the table from --out and --cache and stop")
    args = parser.parse_args(argv)
    chosen = [case for case in matrix.cases() if case.name in args.cases]
    if not args.table:
        for case in chosen:
            do_case(case, args)
    text = table(args.cache, args.out, chosen)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
