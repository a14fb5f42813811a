"""ptyacc on a dataset in the side-by-side harness's layout (``../shared/bench/make_sim.py``, the
demo files), scored as benchmarks/records/2026-11-27-pty-chi.md reports it: the zero-shift NCC of the phase (summed over
slices) with ``/ground_truth/phase`` over the scanned region, the reconstruction placed at its
exact sub-pixel ``origin_A`` (``ptyacc.results.quality.placed_ncc``), and the best NCC over shifts up to
0.5 px in steps of 0.1 px (ptyacc.results.quality.best_shift_ncc); with the median seconds per iteration. One JSON line.

    python benchmarks/bench_file_ncc.py sim_32x32.h5 20 model.probe_modes=4 model.slices=4
"""

from __future__ import annotations

import json
import sys

import h5py
import numpy as np

import ptyacc
from ptyacc.results.quality import best_shift_ncc, placed_ncc


def scores(path: str, iterations: int, overrides: list[str]) -> dict:
    """The run's zero-shift and best-shift NCC, the best shift (y, x) px and its s/iteration."""
    base = {"data": {"path": path}, "experiment": {"positions": {"key": "positions_A"}},
            "optim": {"iterations": iterations}, "runtime": {"progress": False}}
    rec = ptyacc.reconstruct(ptyacc.load_config(base, overrides), write=False)
    with h5py.File(path) as f:
        truth = f["ground_truth/phase"][()]
    placed = (rec.results.phase, np.asarray(rec.results.origin_A), rec.results.dx_A, rec.data.positions_A, truth)
    best, shift = best_shift_ncc(*placed, levels=((0.1, 5),))
    shift = [round(float(v), 3) for v in shift]
    return {"file": path, "overrides": overrides, "ncc_zero_shift": placed_ncc(*placed), "ncc_best_shift": best,
            "best_shift_px": shift, "s_per_iteration": float(np.median(rec.iteration_times_s[1:] or rec.iteration_times_s))}


if __name__ == "__main__":
    print(json.dumps(scores(sys.argv[1], int(sys.argv[2]), sys.argv[3:])))
