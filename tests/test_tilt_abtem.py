"""The tilt of a thick crystal that ptyacc did not simulate (abTEM's SrTiO3 of tests/data/abtem/, 10 unit
cells, the beam tilted [2.0, -1.5] mrad [y, x]) refined from zero, with the object on pixels twice as fine as
the detector's reciprocal pixel (``data.transform.upsample: 2``).

On the detector's own grid the refined tilt ends about 1 mrad from the truth ([0.61, -2.61] mrad after these
40 iterations): waves that the crystal scatters beyond the detector's edge, and that come back into it in later
slices, have no place on that grid (docs/how-to/tilt-thickness-distortion.md)."""

from __future__ import annotations

import numpy as np
import pytest
from abtem_cases import case_config, truth

import ptyacc
from ptyacc.data import load_data
from ptyacc.results.quality import placed_ncc, resampled

TRUE_TILT_MRAD = np.array([2.0, -1.5])
# one tilt refined from the second iteration, the slices held alike (the crystal's prior: free slices shear
# to absorb a tilt), 40 iterations
REFINE = {"iterations": 40, "batch_size": 12, "start": {"tilt": 1},
          "regularize": {"depth_blur_slices": 2}}


def run(name: str, optim: dict, **model) -> ptyacc.Reconstruction:
    config = case_config(name, data={"transform": {"upsample": 2}}, optim=optim, model=model,
                         runtime={"progress": False, "threads": 2})
    return ptyacc.reconstruct(ptyacc.load_config(config), write=False)


def phase_ncc(rec: ptyacc.Reconstruction, name: str) -> float:
    """The phase NCC with the truth on the truth's grid, the reconstruction placed at its exact origin."""
    known = truth(name)
    phase = resampled(rec.results.phase, rec.results.dx_A, known["dx_A"])
    return placed_ncc(phase, rec.results.origin_A, known["dx_A"], known["positions_A"], known["phase"])


@pytest.fixture(scope="module")
def untilted_ncc() -> float:
    """The NCC of the same crystal untilted, reconstructed alike with the tilt known to be zero."""
    optim = {k: v for k, v in REFINE.items() if k != "start"}
    return phase_ncc(run("untilted", optim), "untilted")


def test_upsampled_object_halves_the_pixel():
    config = ptyacc.load_config(case_config("tilted", data={"transform": {"upsample": 2}}))
    data = load_data(config)
    assert data.detector_px == 128
    assert data.dx_A == pytest.approx(truth("tilted")["dx_A"] / 2, rel=1e-9)
    mask = data.mask  # model layout: zero frequency at [0, 0]; only the measured 64 x 64 count
    assert mask is not None and int(mask.sum()) == 64 * 64


@pytest.mark.slow
def test_tilt_from_zero_within_0_3_mrad_and_the_untilted_quality(untilted_ncc):
    """Measured on an AMD CPU: [1.888, -1.368] mrad; NCC 0.9911 against 0.9855 untilted (0.9698 with the tilt left at
    zero). On an Intel one: [1.960, -1.439] mrad; NCC 0.9824 against 0.9979 untilted (0.9827 with the tilt left at
    zero). The two runs' NCCs move by about 0.01 between CPUs (their paths part at the FFTs' last bits), so the
    quality is held to 0.02 of the untilted crystal's: a guard against a tilt that spoils the object, not a
    measure of what the tilt gains."""
    rec = run("tilted", REFINE)
    tilt = np.asarray(rec.results.tilt_mrad)
    assert np.abs(tilt - TRUE_TILT_MRAD).max() < 0.3, tilt
    assert phase_ncc(rec, "tilted") > untilted_ncc - 0.02


@pytest.mark.slow
def test_tilt_per_position_within_0_3_mrad_on_average():
    """Measured: the mean of the per-position tilts [1.744, -1.283] mrad."""
    rec = run("tilted", REFINE, tilt="per_position")
    tilts = np.asarray(rec.results.tilt_mrad)
    assert tilts.shape == (100, 2)
    assert np.abs(tilts.mean(0) - TRUE_TILT_MRAD).max() < 0.3, tilts.mean(0)
