"""A varying probe (``model.probe_variation``) on a family of cases: each case reconstructed with one probe and with
V eigen-probes, scored by the phase NCC with the truth and the final Poisson deviance (issue #53, item 4).

    python benchmarks/varying_probe_family.py DIR CASE V [key=value ...]

CASE: a name of ``GRID_CASES`` (written to DIR/CASE.h5 by tests/varying_probe.py's ``write_varying_case``, the
benchmark grid's NumPy simulator, 16 x 16, 5e4 counts, seed 3) or the path of a file that
benchmarks/varying_probe_mos2.py wrote (abTEM). V: 0 (one probe), 1, 2, ... Each run: the file's positions and mean
defocus, ``optim.iterations`` 30 (grid) or 40 (a file), ``optim.batch_size`` 32, one thread; the keys given override.
Prints one JSON line: case, V, overrides, NCC, NCC at the best sub-pixel shift, deviance, the check's drop and, with
``model.probe_variation_eigen: defocus`` where the defocus drifts, the changes of focus against the truth's drift:
their correlation and the slope of a line fitted to them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import h5py
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import ptyacc  # noqa: E402
from ptyacc.results.quality import best_shift_ncc, placed_ncc  # noqa: E402

# name: (defocus at the first row, at the last (Å), current's rms spread, sample)
GRID_CASES = {"rev": (-20.0, -140.0, 0.08, "random"), "dp150": (5.0, 155.0, 0.15, "random"),
              "dm100": (130.0, 30.0, 0.0, "random"), "dm50": (-55.0, -105.0, 0.0, "random"),
              "cur15": (-80.0, -80.0, 0.15, "random"), "none": (-80.0, -80.0, 0.0, "random"),
              "wse2": (-20.0, -140.0, 0.08, "wse2"), "wse2_none": (-80.0, -80.0, 0.0, "wse2")}


def grid_case(directory: Path, name: str) -> Path:
    """The grid case ``name``, written once to DIR/name.h5."""
    path = directory / f"{name}.h5"
    if not path.exists():
        from varying_probe import write_varying_case
        spec = importlib.util.spec_from_file_location("grid_simulate", ROOT / "benchmarks" / "grid" / "simulate.py")
        simulator = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = simulator
        spec.loader.exec_module(simulator)
        d0, d1, spread, sample = GRID_CASES[name]
        write_varying_case(simulator, path, defocus_A=(d0, d1), current_spread=spread, scan_shape=(16, 16), dose=5e4,
                           seed=3, sample=sample)
    return path


def parse(value: str):
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return {"true": True, "false": False, "null": None}.get(value, value)


def case_config(directory: Path, case: str, model: dict, label: str) -> tuple[dict, Path, str]:
    """The run's config for ``case`` (module docstring) with the ``model`` keys given, its output in
    DIR/out_NAME_LABEL; the case's file and name."""
    directory.mkdir(parents=True, exist_ok=True)
    path = grid_case(directory, case) if case in GRID_CASES else Path(case)
    name = case if case in GRID_CASES else path.stem
    config = {"data": {"path": str(path)}, "experiment": {"positions": {"key": "positions_A"}}, "model": model,
              "optim": {"iterations": 30 if case in GRID_CASES else 40, "batch_size": 32},
              "runtime": {"progress": False, "threads": 1},
              "output": {"dir": str(directory / f"out_{name}_{label}"), "figures": False}}
    return config, path, name


def scored_run(config: dict, path: Path, overrides: dict[str, str]) -> tuple[ptyacc.Reconstruction, dict]:
    """``config`` with the ``overrides`` (dotted keys, values as typed) reconstructed on one thread, and its scores
    against the truth of ``path``: the phase NCC, the NCC at the best sub-pixel shift and that shift, the deviance."""
    torch.set_num_threads(1)
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = parse(value)
    rec = ptyacc.reconstruct(ptyacc.load_config(config), write=False)
    with h5py.File(path) as f:
        positions, truth = f["positions_A"][()].reshape(-1, 2), f["ground_truth/phase"][()]
    res = rec.results
    ncc = placed_ncc(res.phase, np.asarray(res.origin_A), res.dx_A, positions, truth)
    best, shift = best_shift_ncc(res.phase, np.asarray(res.origin_A), res.dx_A, positions, truth)
    return rec, {"ncc": round(ncc, 4), "best_ncc": round(best, 4), "shift_px": [round(float(s), 2) for s in shift],
                 "deviance": round(rec.poisson_deviance, 4)}


def main() -> None:
    directory, case, variation = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    overrides = dict(arg.split("=", 1) for arg in sys.argv[4:])
    config, path, name = case_config(directory, case, {"probe_variation": variation}, str(variation))
    rec, scores = scored_run(config, path, overrides)
    with h5py.File(path) as f:
        drift_A = f["ground_truth/defocus_A"][()] - f["ground_truth/defocus_A"][()].mean()
    res = rec.results
    focus = {}
    if "probe_variation_focus_unit_A" in res.attrs and drift_A.std() > 0:  # the changes of focus against the truth's
        change_A = res.quantities["probe_variation"]["weights"][:, 1] * res.attrs["probe_variation_focus_unit_A"]
        focus = {"focus_corr": round(float(np.corrcoef(change_A, drift_A)[0, 1]), 3),
                 "focus_slope": round(float(np.polyfit(drift_A, change_A, 1)[0]), 3)}
    print(json.dumps({"case": name, "V": variation, "set": overrides, **scores,
                      "dropped_at": res.attrs.get("probe_variation_dropped_at"), **focus}), flush=True)


if __name__ == "__main__":
    main()
