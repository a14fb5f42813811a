"""How far the bright-field parallax (``ptyacc/data/parallax.py``, with its Fourier regions' scale,
``overlap_focus.py``) reads the defocus from the truth on small rasters, coherent against partly coherent,
on files of the independent simulator (simulate.py): 80 kV, 25 mrad, 48 px, step 0.45 Å, random atoms;
"partial" is the calibration matrix's (a 0.35 Å source and a 30 Å focal spread). Prints found / true per
seed, and the real-space shifts' own reading (before the Fourier regions' scale).

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/grid/parallax_partial_coherence.py --scan 16 20 --defocus 110 -100
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import simulate  # noqa: E402

from ptyacc.data import parallax  # noqa: E402
from ptyacc.data.sanity import scan_grid_steps  # noqa: E402

COHERENCE = {"coherent": (0.0, 0.0), "partial": (0.35, 30.0)}
K = 48


def reading(scan: int, defocus_A: float, coherence: str, seed: int, dose: float) -> tuple[float, float, bool]:
    """(found / true, the real-space shifts' found / true, reliable) for one simulated file."""
    source, spread = COHERENCE[coherence]
    setting = simulate.Setting(detector_px=K, scan_shape=(scan, scan), scan_step_A=0.45, dose=dose,
                               defocus_A=defocus_A, edge_mrad=50.0, seed=seed, source_size_A=source,
                               focal_spread_A=spread)
    result = simulate.simulate(setting)
    patterns = np.fft.ifftshift(result["patterns"].reshape(-1, K, K), axes=(-2, -1))
    steps = scan_grid_steps(result["positions_A"], setting.scan_shape)
    seen = {}
    original = parallax.refined_scale

    def spy(*args):
        seen["m"] = args[3]
        return original(*args)

    parallax.refined_scale = spy
    try:
        found = parallax.measure(patterns, setting.scan_shape, steps, result["wavelength_A"], result["dk_invA"])
    finally:
        parallax.refined_scale = original
    real = parallax.defocus_of(seen["m"], result["wavelength_A"])
    if not found.reliable:
        print(f"  {scan} x {scan}, {defocus_A:+g} A, {coherence}, seed {seed}: {found.reason}", file=sys.stderr)
    return found.defocus_A / defocus_A, real / defocus_A, found.reliable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scan", type=int, nargs="+", default=[16, 20])
    parser.add_argument("--defocus", type=float, nargs="+", default=[110.0, -100.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--dose", type=float, default=1e5, help="electrons per pattern (0: no noise)")
    args = parser.parse_args()
    print("| scan | defocus (A) | coherence | found / true per seed | real-space shifts alone |")
    print("|---|---|---|---|---|")
    for scan in args.scan:
        for defocus in args.defocus:
            for coherence in COHERENCE:
                rows = [reading(scan, defocus, coherence, seed, args.dose) for seed in args.seeds]
                found = " ".join(f"{r[0]:.3f}{'' if r[2] else '*'}" for r in rows)
                real = " ".join(f"{r[1]:.3f}" for r in rows)
                print(f"| {scan} x {scan} | {defocus:+g} | {coherence} | {found} | {real} |", flush=True)
    print("(* the parallax called itself unreliable)")


if __name__ == "__main__":
    main()
