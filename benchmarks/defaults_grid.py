"""A reduced grid for choosing defaults (issue 29): ptyacc's own simulator (random atoms, one
slice, 12 x 12 scan 0.6 Å apart, 48 px patterns, 80 kV, 25 mrad), defocus -150 / 0 / +150 Å,
detector edge 60 / 110 mrad, doses 5e3 / 2e4 / 1e5 electrons per pattern, 20 iterations.
Compares the defaults with optim.loss: poisson and with model.recenter.probe, by the phase NCC
with the truth over the scanned region, zero-shift (placed exactly at origin_A,
``ptyacc.results.quality.placed_ncc``) and after the best shift (a 0.2 px grid up to 0.6 px). Not
independent of ptyacc's forward model (the abTEM/PtyRAD grid of ../shared/bench is the
independent one). Prints a Markdown table (docs/how-to/tilt-thickness-distortion.md has the figures).

    python benchmarks/defaults_grid.py
"""

from __future__ import annotations

import itertools

import numpy as np

import ptyacc
from ptyacc.data import load_data
from ptyacc.physics import electron_wavelength_A
from ptyacc.results.quality import best_shift_ncc, placed_ncc

K = 48
VARIANTS = {"defaults": {}, "poisson": {"optim": {"loss": "poisson"}}, "recenter.probe": {"model": {"recenter": {"probe": True}}}}


def config(dose: float, defocus_A: float, edge_mrad: float) -> dict:
    dk_invA = edge_mrad / 1e3 / electron_wavelength_A(80e3) / (K / 2)  # the detector's edge at K/2 pixels
    return {"data": {"simulate": {"scan_shape": [12, 12], "detector_px": K, "dose": dose, "seed": 3}},
            "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": defocus_A, "scan_step_A": 0.6,
                           "dk_invA": dk_invA},
            "optim": {"iterations": 20}, "runtime": {"progress": False, "threads": 1}}


def scores(rec) -> tuple[float, float]:
    """(zero-shift NCC, best-shift NCC) of a reconstruction of simulated data."""
    truth = rec.data.ground_truth
    frame = np.asarray(truth["geometry"].origin_A)
    args = (rec.results.phase, np.asarray(rec.results.origin_A) - frame, rec.results.dx_A,
            rec.data.positions_A - frame, truth["phase"].sum(0))
    return placed_ncc(*args), best_shift_ncc(*args, levels=((0.2, 3),))[0]


def merged(base: dict, extra: dict) -> dict:
    out = {key: dict(value) if isinstance(value, dict) else value for key, value in base.items()}
    for key, value in extra.items():
        out[key] = {**out.get(key, {}), **value}
    return out


def main() -> None:
    print("| dose (e/pattern) | defocus (Å) | edge (mrad) | mean counts/px | " + " | ".join(VARIANTS) + " |")
    print("|---|---|---|---|" + "---|" * len(VARIANTS))
    for dose, defocus, edge in itertools.product([5e3, 2e4, 1e5], [-150.0, 0.0, 150.0], [60.0, 110.0]):
        base = config(dose, defocus, edge)
        data = load_data(ptyacc.load_config(base))
        cells = []
        for extra in VARIANTS.values():
            zero, best = scores(ptyacc.reconstruct(ptyacc.load_config(merged(base, extra)), data=data, write=False))
            cells.append(f"{zero:.4f} / {best:.4f}")
        print(f"| {dose:g} | {defocus:g} | {edge:g} | {float(data.patterns.mean()):.1f} | " + " | ".join(cells) + " |",
              flush=True)


if __name__ == "__main__":
    main()
