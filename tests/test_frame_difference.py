"""``orientation.frame_difference``, the one comparison of two detector frames (transpose/flips and a
scan rotation) behind the run's orientation warnings and the calibration matrix, against maps built
here from NumPy's own array operations: a pattern's transpose and flips applied to an image with one
bright pixel, the scan's turn as a complex multiplication."""

import cmath
import math

import numpy as np
import pytest

from ptyacc.data.orientation import FLAGS, frame_difference

ANGLES_DEG = (0.0, 17.0, -130.0, 95.5, 180.0)


def pattern_map(transpose: bool, flip_y: bool, flip_x: bool) -> np.ndarray:
    """(2, 2) map of (y, x) offsets from the centre that ``np.transpose``, then ``np.flip`` on rows, then
    on columns give a 5 x 5 image's pixels."""
    columns = []
    for offset in ((1, 0), (0, 1)):
        image = np.zeros((5, 5))
        image[2 + offset[0], 2 + offset[1]] = 1.0
        image = image.T if transpose else image
        image = np.flip(image, 0) if flip_y else image
        image = np.flip(image, 1) if flip_x else image
        columns.append(np.argwhere(image == 1.0)[0] - 2)
    return np.array(columns, dtype=float).T


def scan_turn(theta_deg: float) -> np.ndarray:
    """(2, 2) map of (y, x) vectors that turns x + iy by exp(i theta): +x towards +y."""
    columns = []
    for y, x in ((1.0, 0.0), (0.0, 1.0)):
        z = complex(x, y) * cmath.exp(1j * math.radians(theta_deg))
        columns.append((z.imag, z.real))
    return np.array(columns).T


@pytest.mark.parametrize("flags", FLAGS)
def test_frame_difference_against_numpy_maps(flags):
    for other_flags in FLAGS:
        for angle in ANGLES_DEG:
            for other_angle in ANGLES_DEG:
                # the scan's nominal raster from the stored patterns: the turn undone after the transpose/flips
                used = np.linalg.inv(scan_turn(angle)) @ pattern_map(*flags)
                other = np.linalg.inv(scan_turn(other_angle)) @ pattern_map(*other_flags)
                difference = used @ np.linalg.inv(other)
                mirrored, off_deg = frame_difference(flags, angle, other_flags, other_angle)
                assert mirrored == (np.linalg.det(difference) < 0)
                assert -180.0 <= off_deg < 180.0
                if not mirrored:  # the difference turns x + iy by exp(-i off)
                    turned_x = difference @ np.array([0.0, 1.0])
                    expected = -math.degrees(math.atan2(turned_x[0], turned_x[1]))
                    assert (off_deg - expected + 180.0) % 360.0 - 180.0 == pytest.approx(0.0, abs=1e-9)
                    np.testing.assert_allclose(difference, np.linalg.inv(scan_turn(off_deg)), atol=1e-12)


def test_same_flags_differ_by_the_rotations():
    for flags in FLAGS:
        assert frame_difference(flags, 30.0, flags, 12.5) == (False, pytest.approx(17.5))
        assert frame_difference(flags, -170.0, flags, 170.0) == (False, pytest.approx(20.0))
    assert frame_difference((False, False, False), 0.0, (False, True, True), 0.0) == (False, pytest.approx(-180.0))
    assert frame_difference((False, False, False), 0.0, (True, False, False), 40.0)[0]
