"""The shipped demo dataset (ptyacc/demo/demo_mos2.h5): its mean pattern, and ptyacc's.

Issue 14.5: the "mean measured pattern" of the demo's summary figure shows vertical stripes,
and the mean predicted pattern copies them. They are not in the data: the mean over all 576
patterns has none. ptyacc's figure averages every (N // 128)-th pattern, which on the demo's
24-wide raster with 0.4 Å steps is every 4th: the same six x positions in every row, 1.6 Å
apart, one period of MoS2's 2/a lattice planes (a = 3.16 Å). The defocus fringes between Bragg
disks 2/a apart (period 1 / (wavelength * defocus * 2/a) = 4.0 px along kx, constant along ky)
then do not average out. Any detector would record them for that subset of positions.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import ptyacc

ROOT = Path(__file__).parents[1]
DEMO = ROOT / "ptyacc" / "demo" / "demo_mos2.h5"


def stripe_contrast(mean_pattern: np.ndarray) -> tuple[float, float]:
    """(vertical, horizontal) stripe contrast of a centred (K, K) mean pattern, K = 64: the
    spread of the column means (row means) of the outer dark field, the bands |ky| >= 20 px
    (|kx| >= 20 px), each relative to a 7-px running mean, over the middle 48 columns (rows)."""
    def spread(bands: np.ndarray) -> float:
        profile = bands.mean(0)
        trend = np.convolve(np.pad(profile, 3, mode="edge"), np.ones(7) / 7, mode="valid")
        return float(np.std((profile / trend - 1)[8:56]))

    m = mean_pattern
    return spread(np.concatenate([m[:12], m[52:]])), spread(np.concatenate([m[:, :12].T, m[:, 52:].T]))


def test_the_demo_mean_pattern_has_no_vertical_stripes():
    """Over all patterns the columns vary about as much as the rows (measured 0.076 and 0.052:
    the hexagonal lattice differs along x and y); over every 4th pattern the columns vary 7x
    more than the rows (measured 0.53 and 0.077): the stripes of the figure."""
    with h5py.File(DEMO) as f:
        patterns = f["patterns"][()].astype(np.float64).reshape(-1, 64, 64)
    vertical, horizontal = stripe_contrast(patterns.mean(0))
    assert vertical < 2 * horizontal, (vertical, horizontal)
    vertical, horizontal = stripe_contrast(patterns[::4].mean(0))
    assert vertical > 4 * horizontal, (vertical, horizontal)


@pytest.mark.slow
def test_the_summary_mean_pattern_has_no_vertical_stripes(tmp_path):
    """The saved mean patterns average a seeded random sample of positions: every (N // 128)-th
    position aliased with the demo's raster and lattice and drew stripes (issue 14.5)."""
    config = ptyacc.load_config(ROOT / "configs" / "demo.yaml", [
        f"output.dir={tmp_path}", "optim.iterations=1", "output.figures=false", "runtime.progress=false"])
    ptyacc.reconstruct(config)
    results = ptyacc.load_results(tmp_path / "results.h5")
    for mean in (results.mean_pattern_measured, results.mean_pattern_predicted):
        vertical, horizontal = stripe_contrast(mean)
        assert vertical < 2 * horizontal, (vertical, horizontal)
