"""Where ptyacc's step spends its time on one device: the race's case (benchmarks/gpu_race.py)
reconstructed under torch.profiler, eager and compiled, with the kernels by device time.

For each variant it writes OUT/profile_<variant>.txt: the wall seconds per iteration (median after
the first, unprofiled run) and their ratio to the FFT bound (``ptyacc bench``'s: the transforms an iteration
must do, timed alone; in OUT/profile.json), then, for the profiled iterations, the device's busy seconds (the sum of
the kernels' own time) against the wall seconds (the gap is the host: Python, dispatch and launches),
the kernels launched in the profiled run per step (its set-up included), and the operators sorted by their own device time.

    python benchmarks/gpu_profile.py OUT --device cuda --scan 48 --batch 256     # on the GPU
    python benchmarks/gpu_profile.py OUT --tiny --device cpu                      # dry run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scan", type=int, default=48)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=4, help="iterations of the timed (unprofiled) run")
    parser.add_argument("--profiled", type=int, default=2, help="iterations of the profiled run")
    parser.add_argument("--variants", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--data", type=Path, help="the simulated case's file (default OUT/race_data.h5; made if absent)")
    return parser.parse_args(argv)


def config(data: Path, shape: dict, batch: int, device: str, iterations: int, compiled: bool) -> dict:
    return {"data": {"path": str(data)}, "experiment": {"positions": {"key": "positions_A"}},
            "model": {"slices": shape["slices"], "slice_thickness_A": 2.0, "probe_modes": shape["modes"]},
            "optim": {"iterations": iterations, "batch_size": batch},
            "runtime": {"device": device, "progress": False, "compile": compiled}}


def main(argv=None) -> int:
    import gpu_race
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    import ptyacc
    from ptyacc.speed.bench import fft_bound_s

    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    shape = gpu_race.case(argparse.Namespace(tiny=args.tiny, scan=args.scan, iterations=args.iterations,
                                             batches=(args.batch, args.batch)))
    data = args.data or args.out / "race_data.h5"
    if not data.exists():
        gpu_race.simulate(data, shape)
    cuda = args.device.startswith("cuda")
    summary = {}
    for variant in args.variants:
        compiled = variant == "compiled"
        timed = ptyacc.reconstruct(ptyacc.load_config(config(data, shape, args.batch, args.device, args.iterations,
                                                             compiled)), write=False)
        seconds = np.asarray(timed.iteration_times_s, dtype=float)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        run = config(data, shape, args.batch, args.device, args.profiled, compiled)
        with profile(activities=activities) as prof:
            began = time.perf_counter()
            profiled = ptyacc.reconstruct(ptyacc.load_config(run), write=False)
            wall = time.perf_counter() - began
        events = prof.key_averages()
        key = "self_device_time_total" if cuda else "self_cpu_time_total"
        busy_s = sum(getattr(e, key) for e in events) / 1e6
        steps = args.profiled * -(-shape["scan"] ** 2 // args.batch)
        kernels = sum(e.count for e in prof.events() if getattr(e, "device_type", None) is not None
                      and str(e.device_type).endswith("CUDA")) if cuda else 0
        iterations_s = float(np.sum(profiled.iteration_times_s))
        figures = {"variant": variant, "s_per_iteration": float(np.median(seconds[1:])) if len(seconds) > 1 else None,
                   "first_iteration_s": float(seconds[0]), "profiled_wall_s": wall,
                   "profiled_iterations_s": iterations_s, "device_busy_s": busy_s, "steps_profiled": steps,
                   "kernels_per_step": kernels / steps if cuda else None,
                   "peak_bytes": torch.cuda.max_memory_allocated() if cuda else None}
        if variant == args.variants[0]:  # the FFTs an iteration must do, timed alone (``ptyacc bench``'s bound)
            n = shape["scan"] ** 2
            batches = [min(args.batch, n - start) for start in range(0, n, args.batch)]
            summary["fft_bound_s"] = fft_bound_s(batches, shape["modes"], 1, shape["slices"], shape["detector_px"],
                                                 shifted=False, device=args.device)
        figures["bound_ratio"] = (figures["s_per_iteration"] or float("nan")) / summary["fft_bound_s"]
        summary[variant] = figures
        table = events.table(sort_by=key, row_limit=45, max_name_column_width=60)
        (args.out / f"profile_{variant}.txt").write_text(json.dumps(figures, indent=1) + "\n\n" + table)
        print(json.dumps(figures), flush=True)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
    (args.out / "profile.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
