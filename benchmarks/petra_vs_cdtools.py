"""The PETRA III near-field file (configs/petra_nearfield.yaml) reconstructed by ptyacc and by CDTools'
own near-field example, each timed from the start of its process (imports, loading and start-up
included), and scored alike: the Poisson deviance per counted pixel of the final model over every
position (ptyacc's definition, ``ptyacc/physics/deviance.py``, in float64).

    python benchmarks/petra_vs_cdtools.py ptyacc [ITERATIONS]                 # the config's 100 unless given (or auto)
    /tmp/cdt-venv/bin/python benchmarks/petra_vs_cdtools.py cdtools           # CDTools 0.3.2 in its own venv

CDTools' settings are those of its example for this file (``FancyPtycho``, one mode, near field, the
sample 3.65 mm downstream of the focus; Adam, 100 epochs at lr 0.04 with batches of 10, then 50 at lr
0.005 with batches of 50), without its plots. Each run prints one JSON line: the wall time, the start-up
(ptyacc: to its first iteration; CDTools: to the end of its first epoch), the median seconds per
iteration or epoch, and the final deviance; ptyacc's also the iteration and the wall time at which its
running deviance first reached ``--target`` when given. Run the two alternately, at 2 threads each.
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "data" / "PETRAIII_P25_Near_Field_Ptycho.cxi"
TINY = 1e-30  # ptyacc's floor inside the logarithm (physics/deviance.py)


def deviance(model_intensities: np.ndarray, counts: np.ndarray, mask: np.ndarray | None) -> tuple[float, float]:
    """(sum of the Poisson deviance terms, number of pixel values >= 1) over the counted pixels."""
    def nll(model, data):
        return model - data * np.log(np.maximum(model, TINY))
    terms = nll(np.maximum(model_intensities, TINY), counts) - nll(np.maximum(counts, TINY), counts)
    counted = counts >= 1
    if mask is not None:
        terms, counted = terms * mask, counted * mask
    return float(terms.sum()), float(counted.sum())


def run_cdtools(threads: int) -> dict:
    import cdtools
    import torch

    torch.set_num_threads(threads)
    dataset = cdtools.datasets.Ptycho2DDataset.from_cxi(str(DATA))
    model = cdtools.models.FancyPtycho.from_dataset(dataset, n_modes=1, near_field=True,
                                                    propagation_distance=3.65e-3, units="um")
    reconstructor = cdtools.reconstructors.AdamReconstructor(model, dataset)
    ends = []
    for epochs, lr, batch in ((100, 0.04, 10), (50, 0.005, 50)):
        for _ in reconstructor.optimize(epochs, lr=lr, batch_size=batch):
            ends.append(time.perf_counter())
    wall = time.perf_counter() - START
    mask = getattr(dataset, "mask", None)
    mask = None if mask is None else mask.numpy().astype(bool)
    total = counted = 0.0
    with torch.no_grad():
        for inputs, patterns in torch.utils.data.DataLoader(dataset, batch_size=25):
            terms, count = deviance(model(*inputs).double().numpy(), patterns.double().numpy(), mask)
            total, counted = total + terms, counted + count
    return {"package": "cdtools", "wall_s": wall, "start_up_s": ends[0] - START,
            "median_epoch_s": float(np.median(np.diff(ends))), "epochs": len(ends),
            "deviance_per_counted_pixel": total / (counted / 2)}


def run_ptyacc(iterations: int | str | None, threads: int, target: float | None) -> dict:
    import ptyacc
    from ptyacc.results.figures import poisson_deviance_history

    overrides = ["runtime.progress=false", "output.figures=false", f"runtime.threads={threads}"]
    config = ptyacc.load_config(ROOT / "configs" / "petra_nearfield.yaml",
                                overrides + ([f"optim.iterations={iterations}"] if iterations else []))
    reconstruction = ptyacc.reconstruct(config, write=False)
    end = time.perf_counter()
    times = np.asarray(reconstruction.results.iteration_time_s)
    first_iteration = end - START - times.sum()  # the start-up: to the first iteration's start
    report = {"package": "ptyacc", "wall_s": end - START, "start_up_s": first_iteration,
              "median_iteration_s": float(np.median(times)), "iterations": len(times),
              "deviance_per_counted_pixel": float(reconstruction.results.attrs["poisson_deviance"])}
    if target is not None:  # the running deviance of each iteration (of the model during it)
        reached = np.nonzero(poisson_deviance_history(reconstruction.results) <= target)[0]
        report["target"] = target
        report["target_reached_at_iteration"] = int(reached[0]) + 1 if len(reached) else None
        report["target_reached_at_s"] = float(first_iteration + times[:reached[0] + 1].sum()) if len(reached) else None
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", choices=["ptyacc", "cdtools"])
    parser.add_argument("iterations", nargs="?", type=lambda v: v if v == "auto" else int(v), default=None,
                        help="ptyacc: iterations, a number or auto (the stop rule; the config's if not given)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--target", type=float, default=None, help="ptyacc: a deviance to time the way to")
    args = parser.parse_args()
    report = run_cdtools(args.threads) if args.package == "cdtools" else run_ptyacc(args.iterations, args.threads,
                                                                                     args.target)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
