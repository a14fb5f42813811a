"""The calibration matrix's conversion for the other packages (benchmarks/calibration_matrix/peers.py),
checked without them: a file of the independent simulator read out transposed and flipped comes back
as the same simulation read out as is, with the positions turned by the true scan rotation."""

import sys
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "calibration_matrix"))
import peers  # noqa: E402

simulate = peers.matrix.simulate
TINY = simulate.Setting(defocus_A=-70.0, dose=0.0, detector_px=16, scan_shape=(4, 5), scan_step_A=0.45,
                        scan_rotation_deg=37.0, nominal_defocus_A=-50.0, seed=3)


@pytest.mark.parametrize("transpose, flip_y, flip_x", peers.matrix.ORIENTATIONS)
def test_converted_patterns_are_the_canonical_simulation(tmp_path, transpose, flip_y, flip_x):
    read_out = replace(TINY, transpose=transpose, flip_y=flip_y, flip_x=flip_x)
    simulate.write(str(tmp_path / "case.h5"), read_out)
    done = peers.convert(tmp_path / "case.h5", tmp_path / "handed.h5")
    as_is = simulate.simulate(TINY)["patterns"]  # (4, 5, 16, 16), no read-out effect
    with h5py.File(tmp_path / "handed.h5") as f:
        patterns = f["patterns"][()]
        defocus_A = float(f.attrs["defocus_A"])
    assert done["bad_pixels_inpainted"] == 0
    assert patterns.shape == as_is.shape
    np.testing.assert_allclose(patterns, as_is, rtol=0, atol=1e-6 * as_is.max())
    assert defocus_A == TINY.defocus_A  # the truth, not the file's nominal value


def test_positions_are_the_raster_turned_by_the_true_rotation(tmp_path):
    simulate.write(str(tmp_path / "case.h5"), TINY)
    peers.convert(tmp_path / "case.h5", tmp_path / "handed.h5")
    with h5py.File(tmp_path / "case.h5") as f, h5py.File(tmp_path / "handed.h5") as g:
        nominal, handed = f["positions_A"][()], g["positions_A"][()]
    angle = np.radians(TINY.scan_rotation_deg)
    # (y, x) turned from +x towards +y about the raster's centre
    turn = np.array([[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]])
    centre = nominal.mean(0)
    np.testing.assert_allclose(handed, centre + (nominal - centre) @ turn.T, atol=1e-9)
    assert np.abs(handed - nominal).max() > 0.1  # the rotation is really there


def test_bad_pixels_read_as_their_good_neighbours():
    patterns = np.arange(2 * 5 * 5, dtype=float).reshape(2, 5, 5) ** 1.5
    bad = np.zeros((5, 5), dtype=bool)
    bad[2, 2] = bad[2, 3] = bad[0, 0] = True
    out = peers.inpainted(patterns, bad)
    around = [(1, 1), (1, 2), (1, 3), (3, 1), (3, 2), (3, 3), (2, 1)]  # [2, 3] is bad itself
    np.testing.assert_allclose(out[:, 2, 2], np.mean([patterns[:, r, c] for r, c in around], axis=0))
    np.testing.assert_allclose(out[:, 0, 0], np.mean([patterns[:, 0, 1], patterns[:, 1, 0], patterns[:, 1, 1]], axis=0))
    np.testing.assert_array_equal(out[:, ~bad], patterns[:, ~bad])
