"""How far the Fourier regions' coherence (``ptyacc/data/overlap_orientation.py``) reads the defocus
from the truth, coherent against partly coherent, on files of the independent simulator (simulate.py):
the ratio found / true of the c maximising J(I, c) over 0.7-1.3 times lambda |defocus| (0.5 % steps,
the orientation given), with each pixel's image transformed in one of these ways:

* ``plain``: its plain transform (ptyacc before the periodic part);
* ``periodic``: the transform of its periodic part (``periodic_spectra``: Moisan's periodic plus smooth
  decomposition, no wrap-around jump);
* ``laplacian``: the 5-point Laplacian of the image cut to the raster's interior, then transformed (a
  prewhitening that keeps the shift's phase);
* ``wiener``: ``laplacian`` with each frequency weighted by its power above the counts' Poisson noise;
* ``laplacian-periodic``: the Laplacian's periodic part, divided back by the Laplacian's gain.

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
VARIANTS = ("plain", "periodic", "laplacian", "wiener", "laplacian-periodic")


def periodic_spectra(images: np.ndarray) -> np.ndarray:
    """The Fourier transforms of the periodic parts of (P, ny, nx) images (Moisan, J. Math. Imaging Vis. 39,
    2011): each image less the smooth image whose discrete Laplacian is the jumps across its opposite edges."""
    ny, nx = images.shape[-2:]
    jumps = np.zeros_like(images)
    jumps[:, 0] += images[:, -1] - images[:, 0]
    jumps[:, -1] += images[:, 0] - images[:, -1]
    jumps[:, :, 0] += images[:, :, -1] - images[:, :, 0]
    jumps[:, :, -1] += images[:, :, 0] - images[:, :, -1]
    laplacian = (2.0 * np.cos(2.0 * math.pi * np.fft.fftfreq(ny))[:, None]
                 + 2.0 * np.cos(2.0 * math.pi * np.fft.fftfreq(nx))[None, :] - 4.0)
    laplacian[0, 0] = 1.0
    smooth = np.fft.fft2(jumps) / laplacian
    smooth[:, 0, 0] = 0.0
    return np.fft.fft2(images) - smooth


def gain(cycles: np.ndarray) -> np.ndarray:
    """The 5-point Laplacian's gain (its sign left out) at ``cycles`` (F, 2) per sample."""
    return 4 * np.sin(np.pi * cycles[:, 0]) ** 2 + 4 * np.sin(np.pi * cycles[:, 1]) ** 2


class Frequencies(oo._Frequencies):
    """``oo._Frequencies`` with the pixels' images transformed as ``variant`` says (the module's note)."""

    def __init__(self, centred: np.ndarray, shape: tuple[int, int], steps_A: np.ndarray, dk_invA: float,
                 variant: str, pixels: int = oo.PIXELS, frequencies: int = oo.FREQUENCIES) -> None:
        mean = repaired(centred.mean(0, dtype=np.float64))
        radius_px, centre = bright_field_radius_px(mean, "the patterns"), disk_centre(mean)
        y, x = np.indices(centred.shape[-2:])
        inside = np.hypot(y - centre[0], x - centre[1]) <= radius_px - oo.MARGIN_PX
        picked = np.nonzero(inside.ravel())[0]
        inside = np.isin(np.arange(inside.size), picked[::max(1, math.ceil(len(picked) / pixels))]).reshape(inside.shape)
        self.k = np.column_stack([(y[inside] - centre[0]) * dk_invA, (x[inside] - centre[1]) * dk_invA])
        self.limit, self.margin = radius_px * dk_invA, oo.MARGIN_PX * dk_invA
        flat = centred.reshape(len(centred), -1)
        counts = flat[:, inside.ravel()].mean(0)  # each pixel's mean count: its image's noise variance 1 / counts
        images = (flat[:, inside.ravel()] / flat.sum(1, keepdims=True)).T.reshape(-1, *shape)
        images = images / images.mean(axis=(1, 2), keepdims=True) - 1.0
        if variant in ("laplacian", "wiener", "laplacian-periodic"):
            images = (images[:, 2:, 1:-1] + images[:, :-2, 1:-1] + images[:, 1:-1, 2:] + images[:, 1:-1, :-2]
                      - 4 * images[:, 1:-1, 1:-1])
        ny, nx = images.shape[1:]
        cycles = np.stack(np.meshgrid(np.fft.fftfreq(ny), np.fft.fftfreq(nx), indexing="ij"), -1).reshape(-1, 2)
        u = cycles @ np.linalg.inv(steps_A)
        periodic = variant in ("periodic", "laplacian-periodic")
        spectra = (periodic_spectra(images) if periodic else np.fft.fft2(images)).reshape(len(images), -1)
        if variant == "laplacian-periodic":
            spectra = spectra / np.where(gain(cycles) > 0, gain(cycles), 1.0)
        power = (np.abs(spectra) ** 2).sum(0)
        if variant == "wiener":
            noise = ny * nx * gain(cycles) ** 2 * (1.0 / np.maximum(counts, 1e-30)).sum()
            weight = np.maximum(power - noise, 0.0) / np.maximum(power, 1e-300)
            spectra, power = spectra * weight, power * weight ** 2
        power[np.hypot(cycles[:, 0] * ny, cycles[:, 1] * nx) < 1.5] = 0.0
        power[np.hypot(*u.T) > 2 * self.limit - 2 * self.margin] = 0.0
        pick = np.argsort(power)[::-1][:frequencies]
        pick = pick[power[pick] > 0]
        self.u, self.values = u[pick], spectra[:, pick].T.astype(np.complex64)


def ratio(patterns: np.ndarray, shape: tuple[int, int], step_A: float, dk_invA: float, wavelength_A: float,
          defocus_A: float, variant: str) -> float:
    """found / true defocus of the coherence search on the GRID about the truth."""
    found = Frequencies(patterns, shape, np.diag([step_A, step_A]), dk_invA, variant)
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
    parser.add_argument("--variants", nargs="+", default=["plain", "periodic", "laplacian"], choices=VARIANTS)
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
                found = [ratio(patterns, setting.scan_shape, 0.45, data["dk_invA"], data["wavelength_A"], defocus,
                               variant) for variant in args.variants]
                cells.append(f"{name} " + " ".join(f"{v} {r:.3f}" for v, r in zip(args.variants, found)))
            print(f"{args.sample} {args.scan}x{args.scan} defocus {defocus:+g} dose {args.dose:g} seed {seed}: "
                  + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
