"""How far the bright-field parallax (``ptyacc/data/parallax.py``, with its Fourier regions' scale,
``overlap_focus.py``) reads the defocus from the truth on small rasters, coherent against partly coherent,
on files of the independent simulator (simulate.py): 80 kV, 25 mrad, 48 px, step 0.45 Å, random atoms;
"partial" is the calibration matrix's (a 0.35 Å source and a 30 Å focal spread). Prints found / true per
seed, and the real-space shifts' own reading (before the Fourier regions' scale). With ``--pure-shift``, the
Fourier regions' scale alone (``overlap_focus.refined_scale``, given the true M) on patterns whose every disk pixel
k sees one sample moved by exactly M k (plane waves of Gaussian spectrum, width ``q0`` 1/A: no physics but the
raster's finite field and its window; 1.000 is right).

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/grid/parallax_partial_coherence.py --scan 16 20 --defocus 110 -100
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import simulate  # noqa: E402

from ptyacc.data import parallax  # noqa: E402
from ptyacc.data.overlap_focus import refined_scale  # noqa: E402
from ptyacc.data.parallax import cubic_weights  # noqa: E402
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


def pure_shift_scale(side: int, q0_invA: float, seed: int, defocus_A: float = 120.0, blur_A: float | None = None) -> float:
    """The Fourier regions' scale of the true M on patterns (side * side, 40, 40) whose disk pixels (radius 10 px,
    dk 0.06 1/A, step 0.45 A) each see one sample moved by exactly M k: 600 plane waves, or with ``blur_A`` the
    simulator's own random atoms (its phase map, seed ``seed``, Gaussian-blurred by ``blur_A`` as a source size
    would, sampled by cubic convolution)."""
    rng = np.random.default_rng(seed)
    k_px, radius_px, dk_invA, step_A = 40, 10.0, 0.06, 0.45
    m = 0.0418 * defocus_A * np.eye(2)
    q, amplitude, phase = rng.normal(size=(600, 2)) * q0_invA, rng.normal(size=600) * 0.02, rng.uniform(0, 2 * math.pi, 600)
    y, x = np.indices((k_px, k_px))
    centre = np.array([k_px / 2, k_px / 2])
    disk = np.hypot(y - centre[0], x - centre[1]) <= radius_px
    k = np.column_stack([y[disk] - centre[0], x[disk] - centre[1]]) * dk_invA
    raster = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), -1).reshape(-1, 2) * step_A
    seen = raster[:, None, :] - (k @ m.T)[None]
    patterns = np.full((side * side, k_px, k_px), 0.01)
    if blur_A is None:
        patterns[:, disk] = 1.0 + (amplitude * np.cos(2 * math.pi * seen @ q.T + phase)).sum(-1)
    else:
        setting = simulate.Setting(detector_px=K, scan_shape=(side, side), scan_step_A=step_A, dose=0,
                                   defocus_A=defocus_A, edge_mrad=50.0, seed=seed)
        result = simulate.simulate(setting)
        dx_A, atoms = float(result["dx_A"]), result["phases"][0]
        f = np.fft.fftfreq(atoms.shape[0]) / dx_A  # the map is square and periodic
        atoms = np.fft.ifft2(np.fft.fft2(atoms) * np.exp(-2 * math.pi ** 2 * blur_A ** 2 * (f[:, None] ** 2 + f[None] ** 2))).real
        seen = (seen + np.array(atoms.shape) * dx_A / 2 - raster.mean(0)) / dx_A  # px, the raster in the map's middle
        start = np.floor(seen).astype(int)
        weights = cubic_weights(seen - start)  # (N, P, 2, 4) Keys' cubic convolution
        sampled = sum(atoms[(start[..., 0] + i - 1) % len(atoms), (start[..., 1] + j - 1) % len(atoms)]
                      * weights[..., 0, i] * weights[..., 1, j] for i in range(4) for j in range(4))
        patterns[:, disk] = 1.0 + 0.1 * sampled
    return refined_scale(patterns, (side, side), step_A * np.eye(2), m, dk_invA, centre, radius_px, None).scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scan", type=int, nargs="+", default=[16, 20])
    parser.add_argument("--defocus", type=float, nargs="+", default=[110.0, -100.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--dose", type=float, default=1e5, help="electrons per pattern (0: no noise)")
    parser.add_argument("--pure-shift", type=float, nargs="*", metavar="Q0", help="the pure-shift patterns instead, "
                        "these spectrum widths (1/A)")
    parser.add_argument("--atoms-blur", type=float, nargs="*", metavar="A", help="the pure shift of the simulator's "
                        "random atoms instead, blurred by these widths (A, 0: none)")
    args = parser.parse_args()
    pure = None
    if args.atoms_blur is not None:
        pure = "atoms blurred by (A)", args.atoms_blur or [0.0, 0.35], lambda scan, blur, seed: pure_shift_scale(
            scan, 0.0, seed, 130.0, blur)
    elif args.pure_shift is not None:
        pure = "q0 (1/A)", args.pure_shift or [0.2, 0.35], pure_shift_scale
    if pure is not None:
        label, values, scale = pure
        print(f"| scan | {label} | scale of the true M per seed |\n|---|---|---|")
        for scan in args.scan:
            for value in values:
                scales = " ".join(f"{scale(scan, value, seed):.3f}" for seed in args.seeds)
                print(f"| {scan} x {scan} | {value:g} | {scales} |", flush=True)
        return
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
