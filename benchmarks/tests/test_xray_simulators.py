"""The X-ray simulators' own conventions, against known answers: the window at a sub-pixel place that both
simulators take each position's object through (it is where the file says it is), and the basis vectors both
simulators store (ptyacc reads back the read-out that was simulated)."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import xray_far_field as xff  # noqa: E402

from ptyacc.data.prepare import orientation_from_basis  # noqa: E402


@pytest.mark.parametrize("size, pad", [(xff.K, xff.PAD), (96, 16)], ids=["far_field", "near_field_like"])
@pytest.mark.parametrize("corner", [(20.0, 31.0), (20.37, 31.81), (25.93, 18.06)])
def test_the_window_holds_the_object_at_its_sub_pixel_place(corner, size, pad):
    """A plane wave periodic over the padded window is moved exactly by the Fourier shift: the window whose pixel
    [0, 0] lies at ``corner`` holds exp(2 pi i (a (y0 + i) + b (x0 + j))), at the far field's size and padding and
    at another (the near-field simulator's windows go through the same function). A shift of the wrong sign puts it
    at floor(corner) - fraction, up to 2 px from where the file's positions say (the stored positions then carry an
    error the reconstruction cannot know)."""
    n = size + 2 * pad
    a, b = 5 / n, -9 / n  # cycles per pixel
    y, x = np.mgrid[:200, :220].astype(float)
    obj = np.exp(2j * np.pi * (a * y + b * x))
    window = xff.window_at(obj, np.array(corner), size, pad)
    i, j = np.mgrid[:size, :size]
    expected = np.exp(2j * np.pi * (a * (corner[0] + i) + b * (corner[1] + j)))
    assert window.shape == (size, size)
    assert np.abs(window - expected).max() < 1e-9


def test_a_smooth_object_s_window_is_its_values_at_the_sub_pixel_place():
    """A Gaussian blob (not periodic): the window agrees with the blob evaluated at the shifted grid to 1e-3 of
    its peak away from the window's edges (where the padding's wrap-around lies)."""
    y, x = np.mgrid[:240, :240].astype(float)
    centre, sigma = np.array([118.3, 121.7]), 7.0
    obj = np.exp(-((y - centre[0]) ** 2 + (x - centre[1]) ** 2) / (2 * sigma ** 2)).astype(complex)
    corner = np.array([55.62, 57.29])
    window = xff.window_at(obj, corner)
    i, j = np.mgrid[:xff.K, :xff.K]
    expected = np.exp(-((corner[0] + i - centre[0]) ** 2 + (corner[1] + j - centre[1]) ** 2) / (2 * sigma ** 2))
    assert np.abs(window - expected)[8:-8, 8:-8].max() < 1e-3


@pytest.mark.parametrize("index", range(8))
def test_the_stored_basis_vectors_give_back_the_read_out(index):
    """The basis vectors the simulators store (``basis_vectors``) read back, by ptyacc, as the read-out simulated:
    the transpose and flips that ``data.transform`` undoes."""
    flags = orientation_from_basis(xff.basis_vectors(75e-6, index), "simulated.cxi")
    assert (flags["transpose"], flags["flip_y"], flags["flip_x"]) == xff.ORIENTATIONS[index]
