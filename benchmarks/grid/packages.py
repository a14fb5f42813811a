"""The grid's runners, one per package, and the one scorer they all share.

Each runner reconstructs one dataset and returns the reconstructed phase (summed over slices) on
its canvas, the canvas's origin (the position in Å of its pixel [0, 0] in the ground truth's
frame) and its seconds per iteration; ``score`` turns that into the zero-shift and best-shift
NCC with ``ptyacc.results.quality.placed_ncc`` (the canvas placed at its exact sub-pixel origin)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[3] / "shared" / "bench"


def score(phase: np.ndarray, origin_A, dx_A: float, positions_A: np.ndarray, truth: np.ndarray) -> dict:
    """Zero-shift NCC and the NCC after the best sub-pixel shift (coarse to fine: 0.5 px steps
    over ±2 px, then 0.1 px, then 0.02 px around the best), both over the scanned region."""
    from ptyacc.results.quality import best_shift_ncc, placed_ncc

    zero = placed_ncc(phase, origin_A, dx_A, positions_A, truth)
    best, best_shift = best_shift_ncc(phase, origin_A, dx_A, positions_A, truth, levels=((0.5, 4), (0.1, 4), (0.02, 4)))
    return {"ncc_zero_shift": zero, "ncc_best_shift": best, "best_shift_px": [round(float(v), 3) for v in best_shift]}


def run_ptyacc(path: Path, slices: int, thickness_A: float, overrides: list[str], threads: int = 1) -> dict:
    """ptyacc's defaults (20 iterations, batch 32) with the data's slices and thickness, plus ``overrides``."""
    import ptyacc

    base = {"data": {"path": str(path)}, "experiment": {"positions": {"key": "positions_A"}},
            "model": {"slices": slices, "slice_thickness_A": thickness_A},
            "optim": {"iterations": 20, "batch_size": 32},
            "runtime": {"progress": False, "threads": threads}}
    rec = ptyacc.reconstruct(ptyacc.load_config(base, overrides), write=False)
    times = np.asarray(rec.results.iteration_time_s, dtype=float)
    validation = getattr(rec.results, "validation_error", None)  # with optim.validation_fraction > 0
    return {"phase": rec.results.phase, "origin_A": [float(v) for v in rec.results.origin_A],
            "s_per_iter": float(np.median(times[1:])), "settings": overrides,
            "validation_error": None if validation is None else float(np.asarray(validation)[-1])}


def run_harness(package: str, python: str, path: Path, slices: int, thickness_A: float, extra: list[str],
                bench: Path = BENCH, threads: int = 1, iterations: int = 20, batch: int = 32) -> dict:
    """PtyRAD (run_ptyrad.py) or Pty-chi (run_ptychi.py) through ../shared/bench, ``iterations``
    iterations of ``batch`` positions, one probe mode; the canvas maps to the truth by the harness's
    integer offset."""
    # PtyRAD through a launcher that stands in for a torchvision that cannot load (ptyrad_launch.py)
    script = [str(Path(__file__).with_name("ptyrad_launch.py")), str(bench)] if package == "ptyrad" else \
        [str(bench / "run_ptychi.py")]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "phase.npy"
        command = [python, *script, str(path), "--iters", str(iterations), "--batch", str(batch), "--pmodes", "1",
                   "--slices", str(slices), "--slice-thickness-A", str(thickness_A), "--threads", str(threads),
                   "--out", str(out), *extra]
        done = subprocess.run(command, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-1500:]}")
        report = json.loads(out.with_suffix(".json").read_text())
        phase = np.load(out)
    with_truth = report.get("gt_compare", {})
    return {"phase": phase, "offset_px": report["canvas_offset_px"], "s_per_iter": report["s_per_iter_median_after_first"],
            "settings": extra, "harness_ncc_zero_shift": with_truth.get("ncc_zero_shift"),
            "loss_initial": report.get("loss_initial"), "loss_final": report.get("loss_final"),
            "other_cpu_fraction": report.get("other_processes_cpu_fraction_during_loop")}
