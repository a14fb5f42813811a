"""How far the Fourier regions' coherence (``ptyacc/data/overlap_orientation.py``) reads the defocus
from the truth, coherent against partly coherent, on files of the independent simulator (simulate.py):
the ratio found / true of the c maximising J(I, c) over 0.7-1.3 times lambda |defocus| (0.5 % steps),
the images as ptyacc takes them ("plain") and, as a candidate fix, each pixel's image first put through
the 5-point Laplacian and cut to the raster's interior ("laplacian": a prewhitening that keeps the
shift's phase and stops the strong low scan frequencies leaking into the weak high ones).

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/grid/overlap_defocus_bias.py --scan 16 --defocus 170 -100 --dose 0
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import simulate  # noqa: E402

from ptyacc.data import overlap_orientation as oo  # noqa: E402
from ptyacc.data.bright_field import bright_field_radius_px, repaired  # noqa: E402
from ptyacc.data.parallax import disk_centre  # noqa: E402

GRID = np.exp(np.linspace(math.log(0.7), math.log(1.3), 121))
COHERENCE = {"coherent": (0.0, 0.0), "source": (0.35, 0.0), "focal": (0.0, 30.0), "partial": (0.35, 30.0)}


class Frequencies(oo._Frequencies):
    """``oo._Frequencies`` with the pixels' images plain or Laplacian-filtered (``laplacian``)."""

    def __init__(self, centred: np.ndarray, shape: tuple[int, int], steps_A: np.ndarray, dk_invA: float,
                 laplacian: bool, wiener: bool = False) -> None:
        mean = repaired(centred.mean(0, dtype=np.float64))
        radius_px, centre = bright_field_radius_px(mean, "the patterns"), disk_centre(mean)
        y, x = np.indices(centred.shape[-2:])
        inside = np.hypot(y - centre[0], x - centre[1]) <= radius_px - oo.MARGIN_PX
        picked = np.nonzero(inside.ravel())[0]
        inside = np.isin(np.arange(inside.size), picked[::max(1, math.ceil(len(picked) / oo.PIXELS))]).reshape(inside.shape)
        self.k = np.column_stack([(y[inside] - centre[0]) * dk_invA, (x[inside] - centre[1]) * dk_invA])
        self.limit, self.margin = radius_px * dk_invA, oo.MARGIN_PX * dk_invA
        flat = centred.reshape(len(centred), -1)
        images = (flat[:, inside.ravel()] / flat.sum(1, keepdims=True)).T.reshape(-1, *shape)
        counts = flat[:, inside.ravel()].mean(0)  # each pixel's mean count per pattern: its image's noise 1 / counts
        images = images / images.mean(axis=(1, 2), keepdims=True) - 1.0
        if laplacian:
            images = (images[:, 2:, 1:-1] + images[:, :-2, 1:-1] + images[:, 1:-1, 2:] + images[:, 1:-1, :-2]
                      - 4 * images[:, 1:-1, 1:-1])
        ny, nx = images.shape[1:]
        if wiener in ("periodic", "lap-per-div"):
            edges = np.zeros_like(images)
            edges[:, 0] += images[:, -1] - images[:, 0]
            edges[:, -1] += images[:, 0] - images[:, -1]
            edges[:, :, 0] += images[:, :, -1] - images[:, :, 0]
            edges[:, :, -1] += images[:, :, 0] - images[:, :, -1]
            gain = (2 * np.cos(2 * np.pi * np.fft.fftfreq(ny))[:, None] + 2 * np.cos(2 * np.pi * np.fft.fftfreq(nx))[None] - 4)
            gain[0, 0] = 1.0
            smooth = np.fft.fft2(edges) / gain
            smooth[:, 0, 0] = 0.0
            images = np.real(np.fft.ifft2(np.fft.fft2(images) - smooth))
        cycles = np.stack(np.meshgrid(np.fft.fftfreq(ny), np.fft.fftfreq(nx), indexing="ij"), -1).reshape(-1, 2)
        u = cycles @ np.linalg.inv(steps_A)
        spectra = np.fft.fft2(images).reshape(len(images), -1)
        power = (np.abs(spectra) ** 2).sum(0)
        if wiener == "lap-per-div":
            h = 4 * np.sin(np.pi * cycles[:, 0]) ** 2 + 4 * np.sin(np.pi * cycles[:, 1]) ** 2
            h[h == 0] = 1.0
            spectra = spectra / h
            power = (np.abs(spectra) ** 2).sum(0)
            power[np.hypot(cycles[:, 0] * ny, cycles[:, 1] * nx) < 1.5] = 0.0
            power[np.hypot(*u.T) > 2 * self.limit - 2 * self.margin] = 0.0
        if wiener is True:
            h = 4 * np.sin(np.pi * cycles[:, 0]) ** 2 + 4 * np.sin(np.pi * cycles[:, 1]) ** 2
            noise = ny * nx * h ** 2 * (1.0 / np.maximum(counts, 1e-30)).sum()
            weight = np.maximum(power - noise, 0.0) / np.maximum(power, 1e-300)
            spectra = spectra * weight
            power = power * weight ** 2
        power[np.hypot(cycles[:, 0] * ny, cycles[:, 1] * nx) < 1.5] = 0.0
        power[np.hypot(*u.T) > 2 * self.limit - 2 * self.margin] = 0.0
        pick = np.argsort(power)[::-1][:oo.FREQUENCIES]
        pick = pick[power[pick] > 0]
        self.u, self.values = u[pick], spectra[:, pick].T.astype(np.complex64)


def ratio(patterns: np.ndarray, shape: tuple[int, int], step_A: float, dk_invA: float, wavelength_A: float,
          defocus_A: float, laplacian: bool, wiener: bool = False) -> float:
    """found / true defocus of the coherence search on the GRID about the truth."""
    found = Frequencies(patterns, shape, np.diag([step_A, step_A]), dk_invA, laplacian, wiener)
    j = found.coherence(math.copysign(1.0, defocus_A) * np.eye(2), wavelength_A * abs(defocus_A) * GRID)
    return float(GRID[int(np.argmax(j))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scan", type=int, default=16)
    parser.add_argument("--defocus", type=float, nargs="+", default=[170.0])
    parser.add_argument("--dose", type=float, default=0.0, help="electrons per pattern, 0 = no noise")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sample", default="random")
    parser.add_argument("--coherence", nargs="+", default=["coherent", "partial"], choices=list(COHERENCE))
    args = parser.parse_args()
    for defocus in args.defocus:
        for seed in range(1, args.seeds + 1):
            cells = []
            for name in args.coherence:
                source, focal = COHERENCE[name]
                setting = simulate.Setting(defocus_A=defocus, dose=args.dose, detector_px=48, scan_step_A=0.45,
                                           scan_shape=(args.scan, args.scan), source_size_A=source,
                                           focal_spread_A=focal, seed=seed, sample=args.sample)
                data = simulate.simulate(setting)
                patterns = data["patterns"].reshape(-1, 48, 48).astype(np.float64)
                found = [ratio(patterns, setting.scan_shape, 0.45, data["dk_invA"], data["wavelength_A"], defocus, lap, w)
                         for lap, w in ((False, False), (True, False), (True, True), (False, "periodic"), (True, "lap-per-div"))]
                cells.append(f"{name} plain {found[0]:.3f} laplacian {found[1]:.3f} +wiener {found[2]:.3f} periodic {found[3]:.3f} lap-per-div {found[4]:.3f}")
            print(f"{args.sample} {args.scan}x{args.scan} defocus {defocus:+g} dose {args.dose:g} seed {seed}: "
                  + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
