"""ptyacc against PtyRAD and Pty-chi on the every-effect case of the README's "Real data" section
(detector_table.py's EVERY_SETTING: scan turned 9 degrees, patterns transposed, descan, bad pixels,
blur 0.6 px, defocus 120 Å that the file gives as 96 Å, 3e4 counts), coherent or with partial
coherence too (source 0.3 Å, focal spread 30 Å), 60 iterations each:

* ptyacc init + run: ``ptyacc init case.h5`` (the config it writes, every auto on), then that config
  run for 60 iterations;
* ptyacc given the truth: init's config (``batch_size: auto``, blur refined from none) with the true
  positions, transpose and defocus put in (bad pixels and descan auto); ``truth32``: the same at
  batch 32 without the blur (detector_table.py's row);
* PtyRAD 1.0 and Pty-chi 2.2 (LSQML) given the truth through ../shared/bench (batch 32): a copy of
  the case in the harness's layout with the patterns transposed back, the true positions and the
  true defocus; descan, bad pixels and blur left in the patterns (the harness models none of them).

Every result is scored by packages.score (phase NCC with the truth over the scanned region, at the
canvas's exact place and after the best sub-pixel shift); one JSON line per row.

* ptyacc init + run with one true value put in its auto's place (``+defocus``: the true defocus;
  ``+flips``: the true transpose; ``+rotation``: the true transpose and rotation; ``+positions``: the
  true transpose and positions; ``+bad_pixels``: the planted bad pixels (and gain, where the case
  has one) as a flat field instead of the auto; ``+blur``: the true blur, not refined;
  ``-descan``: the descan auto off), to see which auto costs what.

``--crystal``: the case is a WSe2 monolayer (detector_table.CRYSTAL_SETTING) instead of random atoms.
``--set`` (repeatable) adds a config override to ptyacc's rows (e.g. ``optim.batch_size=128``,
``data.transform.descan_model=ramp``); the JSON line names them.

    python benchmarks/grid/detector_peers.py WORKDIR [--coherence] [--crystal] [--set KEY=VALUE ...]
        [--rows init,truth,truth32,ptyrad1,ptyrad4,ptychi]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import detector_table
import h5py
import numpy as np
import packages
import simulate

PTYRAD_PY = "/tmp/ptyrad_venv/bin/python"
PTYCHI_PY = "/tmp/ptychi-venv/bin/python"
ITERATIONS = 60
THREADS = 2
COHERENT = detector_table.EVERY_SETTING
PARTLY_COHERENT = simulate.Setting(**{**COHERENT.__dict__, "source_size_A": 0.3, "focal_spread_A": 30.0})
FLIPS = ["data.transform.orientation=manual", "data.transform.transpose=true"]


def one_truth(row: str, work: Path, setting: simulate.Setting) -> list[str]:
    """The overrides of init's config that put one true value (the row's name after '+') in its
    auto's place, or ('-descan') leave the descan auto out."""
    positions = [f"experiment.positions.path={work / 'true_positions.h5'}", "experiment.positions.key=positions_A",
                 "experiment.scan_rotation_deg=0"]
    return {"+defocus": [f"experiment.defocus_A={float(setting.defocus_A)}"], "+flips": FLIPS,
            "+rotation": FLIPS + [f"experiment.scan_rotation_deg={float(setting.scan_rotation_deg)}"],
            "+positions": FLIPS + positions,
            "+bad_pixels": ["data.bad_pixels='off'", f"data.flat_field={work / 'true_flat.npy'}"],
            "+blur": [f"model.detector_blur_px={float(setting.blur_px)}", "optim.start.detector_blur=null"],
            "-descan": ["data.transform.descan='off'"]}[row]


def peers_file(case: Path, out: Path) -> None:
    """The case in the bench harness's layout, given the truth: patterns transposed back (the case
    has ``transpose`` only), the true positions, the true defocus."""
    with h5py.File(case) as f, h5py.File(out, "w") as g:
        assert f["ground_truth"].attrs.get("transpose", True) and not f["ground_truth"].attrs.get("flip_y", False)
        g["patterns"] = np.swapaxes(f["patterns"][()], -1, -2)
        g["positions_A"] = f["ground_truth/positions_A"][()]
        g["ground_truth/phase"] = f["ground_truth/phase"][()]
        g["ground_truth/phase"].attrs["dx_A"] = f["ground_truth/phase"].attrs["dx_A"]
        for key, value in f.attrs.items():
            g.attrs[key] = value
        g.attrs["defocus_A"] = float(f["ground_truth"].attrs["defocus_A"])


def run_ptyacc(config, overrides: list[str]):
    import ptyacc

    rec = ptyacc.reconstruct(ptyacc.load_config(config, overrides), write=False)
    times = np.asarray(rec.results.iteration_time_s, dtype=float)
    return rec, float(np.median(times[1:]))


def main(work: Path, setting: simulate.Setting, rows: list[str], extra_overrides: tuple[str, ...] = ()) -> None:
    case, truth, dx, positions = detector_table.write_case(work, setting, again=False)
    peers = work / "peers.h5"
    peers_file(case, peers)
    common = [f"optim.iterations={ITERATIONS}", "runtime.progress=false", f"runtime.threads={THREADS}", *extra_overrides]
    for row in rows:
        started, extra = time.time(), {}
        if row in ("init", "truth", "truth32") or row[0] in "+-":
            subprocess.run([str(Path(sys.executable).with_name("ptyacc")), "init", str(case), "-o",
                            str(work / "case.yaml"), "--force"], check=True, capture_output=True)
            config, overrides = str(work / "case.yaml"), common
            if row == "truth":  # init's config with the true positions, transpose and defocus put in
                overrides = common + ["data.transform.orientation=manual", "data.transform.transpose=true",
                                      f"experiment.positions.path={work / 'true_positions.h5'}",
                                      "experiment.positions.key=positions_A", "experiment.scan_rotation_deg=0",
                                      f"experiment.defocus_A={float(setting.defocus_A)}"]
            elif row[0] in "+-":
                overrides = common + one_truth(row, work, setting)
            elif row == "truth32":
                config = {"data": {"path": str(case), "bad_pixels": "auto",
                                   "transform": {"transpose": True, "descan": "auto"}},
                          "experiment": {"positions": {"path": str(work / "true_positions.h5"), "key": "positions_A"},
                                         "defocus_A": float(setting.defocus_A)},
                          "optim": {"batch_size": 32}}
                overrides = common
            rec, per_iteration = run_ptyacc(config, overrides)
            offset = positions.mean(0) - np.asarray(rec.results.initial_positions_A).mean(0)
            found = packages.score(rec.results.phase, np.asarray(rec.results.origin_A) + offset, dx, positions, truth)
            extra = {"blur_px": rec.model.detector_blur_px()}
        else:
            package = "ptyrad" if row.startswith("ptyrad") else "ptychi"
            modes = row[len("ptyrad"):] if package == "ptyrad" else "1"
            args = ["--iters", str(ITERATIONS), "--pmodes", modes]
            if package == "ptychi":
                args += ["--algo", "lsqml"]
            out = packages.run_harness(package, PTYRAD_PY if package == "ptyrad" else PTYCHI_PY, peers, 1, 2.0, args,
                                       threads=THREADS)
            origin = [-v * dx for v in out["offset_px"]]
            found = packages.score(out["phase"], origin, dx, positions, truth)
            per_iteration = out["s_per_iter"]
            extra = {"harness_ncc_zero_shift": out["harness_ncc_zero_shift"],
                     "other_cpu_fraction": out["other_cpu_fraction"]}
        load = float(open("/proc/loadavg").read().split()[0])
        label = ("partly coherent" if setting.source_size_A else "coherent") + (", WSe2" if setting.sample == "wse2" else "")
        print(json.dumps({"case": label, "row": row, "set": list(extra_overrides), **found,
                          "s_per_iter": round(per_iteration, 3), "load1": load, **extra,
                          "s": round(time.time() - started, 1)}), flush=True)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    chosen = "init,truth,ptyrad1,ptyrad4,ptychi"
    if "--rows" in arguments:
        at = arguments.index("--rows")
        chosen = arguments[at + 1]
        del arguments[at:at + 2]
    sets = []
    while "--set" in arguments:
        at = arguments.index("--set")
        sets.append(arguments[at + 1])
        del arguments[at:at + 2]
    setting = PARTLY_COHERENT if "--coherence" in arguments else COHERENT
    if "--crystal" in arguments:
        setting = simulate.Setting(**{**setting.__dict__, "sample": "wse2"})
    main(Path([a for a in arguments if not a.startswith("--")][0]), setting, chosen.split(","), tuple(sets))
