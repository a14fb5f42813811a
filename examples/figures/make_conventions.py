"""Draws conventions.png: ptyacc's axes, positions, probe window and detector orientation.
Run: python examples/figures/make_conventions.py (writes next to this file)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Circle, FancyArrow, Rectangle  # noqa: E402


def main() -> None:
    fig, (real, det) = plt.subplots(1, 2, figsize=(11, 5.2))
    # real space: object canvas, pixel [0, 0] top left, y down rows, x right along columns
    real.add_patch(Rectangle((0, 0), 10, 8, fill=False, lw=1.5))
    real.text(0.15, -0.1, "object pixel [0, 0] at origin_A", fontsize=8, va="bottom")
    for i in range(3):
        for j in range(4):
            real.plot(3 + j * 1.2, 2.5 + i * 1.2, "o", color="C0", ms=4)
    real.text(2.6, 7.2, "scan (i, j) -> (i, j) * scan_step_A,\nrow-major: i = slow = y", fontsize=8, color="C0")
    real.add_patch(Rectangle((5.4 - 2, 3.7 - 2), 4, 4, fill=False, ls="--", color="C3"))
    real.plot(5.4, 3.7, "x", color="C3", ms=9)
    real.text(7.55, 1.0, "K x K probe window;\ncentre = window\npixel (K/2, K/2)\n= position (y, x)",
              fontsize=8, color="C3", va="top")
    real.add_patch(FancyArrow(0.3, 0.6, 1.6, 0, width=0.05, color="k"))
    real.add_patch(FancyArrow(0.3, 0.6, 0, 1.6, width=0.05, color="k"))
    real.text(2.0, 0.6, "x (columns)", fontsize=9, va="center")
    real.text(0.4, 2.6, "y (rows)", fontsize=9)
    real.set(xlim=(-0.5, 10.5), ylim=(8.5, -0.5), aspect="equal", title="real space (Å): arrays are (..., y, x)")
    real.set_xticks([])
    real.set_yticks([])
    # detector: zero frequency at the centre pixel (K/2, K/2); ky along rows, kx along columns
    det.add_patch(Rectangle((0, 0), 8, 8, fill=False, lw=1.5))
    det.add_patch(Circle((4, 4), 1.6, color="0.8"))
    det.plot(4, 4, "+", color="k", ms=12)
    det.text(4.15, 4.4, "k = 0 at pixel (K/2, K/2)", fontsize=8)
    det.text(1.9, 6.2, "bright-field disk:\nradius = semiangle / (lambda dk) px", fontsize=8)
    det.add_patch(FancyArrow(4, 4, 3.0, 0, width=0.04, color="C2"))
    det.add_patch(FancyArrow(4, 4, 0, 3.0, width=0.04, color="C2"))
    det.text(7.1, 3.8, "+kx", color="C2")
    det.text(4.1, 7.4, "+ky", color="C2")
    det.text(0.2, 0.7, "pattern = |fft2(exit wave)|^2, numpy sign, fftshifted\n"
                       "fix other orientations with data.transform\n(transpose, then flip_y, then flip_x)",
             fontsize=8, va="top")
    det.set(xlim=(-0.5, 8.5), ylim=(8.5, -0.5), aspect="equal", title="detector: patterns are (N, ky, kx)")
    det.set_xticks([])
    det.set_yticks([])
    fig.text(0.5, 0.02, "probe = A(k) exp(-i chi(k)), defocus_A = -C10 > 0: underfocus;   "
                        "object = amplitude exp(+i phase);   multislice: transmit, propagate by exp(-i pi lambda dz k^2)",
             ha="center", fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(Path(__file__).with_name("conventions.png"), dpi=100)


if __name__ == "__main__":
    main()
