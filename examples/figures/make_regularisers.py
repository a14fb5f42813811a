"""Draws regularisers.png: what optim.regularize does on tiny simulated cases.
Top: the phase of a low-dose reconstruction (100 electrons per pattern) without and with
tv_phase, next to the true phase. Bottom: a depth section (x, slice) of a 6-slice
reconstruction without and with depth_blur_slices, and the power of its phase per kz.
Run: python examples/figures/make_regularisers.py (writes next to this file; ~1 min on a CPU)."""

from pathlib import Path

import matplotlib
import numpy as np

import ptyacc
from ptyacc.results.quality import scanned_region

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TV_PHASE, DEPTH_BLUR_SLICES = 1.0, 0.5


def config(slices: int = 1, dose: float | None = 100.0, **regularize) -> ptyacc.Config:
    return ptyacc.load_config({
        "data": {"simulate": {"scan_shape": [12, 12], "detector_px": 32, "dose": dose, "seed": 2}},
        "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 50.0, "scan_step_A": 0.6,
                       "dx_A": 0.25},
        "model": {"slices": slices, "slice_thickness_A": 2.0},
        "optim": {"iterations": 20, "regularize": regularize},
        "runtime": {"progress": False},
    })


def scanned(rec) -> tuple[slice, slice]:
    return scanned_region(rec.data.ground_truth["geometry"].positions_px)


def phase_panels(axes) -> None:
    """Truth, tv_phase 0 and tv_phase TV_PHASE: phase over the scanned region, with the phase
    noise where the truth is flat and the correlation with the truth in the titles."""
    runs = {"tv_phase 0": ptyacc.reconstruct(config(), write=False),
            f"tv_phase {TV_PHASE:g}": ptyacc.reconstruct(config(tv_phase=TV_PHASE), write=False)}
    rows, cols = scanned(next(iter(runs.values())))
    truth = next(iter(runs.values())).data.ground_truth["phase"].sum(0)[rows, cols]
    flat = truth < truth.min() + 0.02 * np.ptp(truth)
    axes[0].imshow(truth - truth.mean(), cmap="gray")
    axes[0].set_title("true phase", fontsize=9)
    for ax, (name, rec) in zip(axes[1:], runs.items()):
        phase = rec.results.phase[rows, cols]
        ax.imshow(phase - phase.mean(), cmap="gray")
        noise, corr = phase[flat].std(), np.corrcoef(truth.ravel(), phase.ravel())[0, 1]
        ax.set_title(f"{name}: noise {noise:.3f} rad, corr. {corr:.2f}", fontsize=9)


def depth_panels(axes) -> None:
    """A (slice, x) section through the middle row of a noise-free 6-slice reconstruction without
    and with the depth blur, and the power of the phase per kz (DCT along depth)."""
    spectra = {}
    for ax, sigma in zip(axes[:2], (0.0, DEPTH_BLUR_SLICES)):
        # the depth blur alone: the priors that auto turns on for multislice are off here
        rec = ptyacc.reconstruct(config(slices=6, dose=None, depth_blur_slices=sigma, tv_phase=0.0,
                                        lateral_blur_px=0.0), write=False)
        rows, cols = scanned(rec)
        phase = np.angle(rec.results.object[0])[:, rows, cols]  # (S, y, x)
        ax.imshow(phase[:, phase.shape[1] // 2], cmap="gray", aspect="auto")
        ax.set(xlabel="x (px)", ylabel="slice")
        ax.set_title(f"depth section, depth_blur_slices {sigma:g}", fontsize=9)
        s = phase.shape[0]
        basis = np.cos(np.pi * np.arange(s)[:, None] * (2 * np.arange(s)[None, :] + 1) / (2 * s))
        spectra[sigma] = (np.einsum("ks,syx->kyx", basis, phase - phase.mean(0)) ** 2).sum((1, 2))
    for sigma, power in spectra.items():
        axes[2].semilogy(np.arange(1, len(power)), power[1:], "o-", label=f"depth_blur_slices {sigma:g}")
    axes[2].set(xlabel="kz (DCT index)", ylabel="phase power")
    axes[2].legend(fontsize=8)
    axes[2].set_title("phase power per kz", fontsize=9)


def main() -> None:
    fig, axes = plt.subplots(2, 3, figsize=(11, 7))
    phase_panels(axes[0])
    depth_panels(axes[1])
    for ax in axes[0]:
        ax.set(xticks=[], yticks=[])
    fig.tight_layout()
    fig.savefig(Path(__file__).with_name("regularisers.png"), dpi=70)


if __name__ == "__main__":
    main()
