"""ptyacc's sign conventions against data it did not simulate: a thick SrTiO3 crystal simulated
by abTEM (tests/data/abtem/make_cases.py: 300 kV, 10 unit cells, beam tilted by [2.0, -1.5]
mrad [y, x], 60 Å underfocus, a 5 x 4 scan rotated by 12 degrees, two atoms missing from the
top cell). ptyacc's forward model at the true crystal must explain the data better with every
true value than with its negative, its swap or its mirror: a sign shared by ptyacc's model and
its own simulator cannot hide here."""

import pytest
from abtem_cases import truth, truth_misfit

TRUE_TILT = [2.0, -1.5]
CASE = "conventions"


@pytest.fixture(scope="module")
def at_truth():
    return truth_misfit(CASE, experiment={"tilt_mrad": TRUE_TILT})


def test_the_truth_explains_the_data(at_truth):
    """At the true values the misfit is that of a one-slice-per-cell model of abTEM's
    quarter-cell multislice (0.0055; the data are noise-free)."""
    known = truth(CASE)
    assert list(known["tilt_mrad"]) == TRUE_TILT
    assert at_truth < 0.008


@pytest.mark.parametrize("tilt", [[-2.0, 1.5], [-2.0, -1.5], [2.0, 1.5], [-1.5, 2.0], [0.0, 0.0]],
                         ids=["negated", "y negated", "x negated", "swapped", "none"])
def test_tilt_sign_and_axes(at_truth, tilt):
    """The tilt [y, x]: a beam tilted by +t along y travels toward +y (DESIGN.md)."""
    assert truth_misfit(CASE, experiment={"tilt_mrad": tilt}) > 1.3 * at_truth


def test_defocus_sign(at_truth):
    """defocus_A = -C10, positive = underfocus: the probe converges into the sample."""
    assert truth_misfit(CASE, experiment={"tilt_mrad": TRUE_TILT, "defocus_A": -60.0}) > 5 * at_truth


@pytest.mark.parametrize("transform", [{"transpose": True}, {"flip_y": True}, {"flip_x": True},
                                       {"flip_y": True, "flip_x": True}],
                         ids=["transposed", "flip_y", "flip_x", "point-inverted"])
def test_pattern_orientation(at_truth, transform):
    """Patterns [ky, kx], ky along the rows and the positions' y: any other of the eight
    orientations explains the data worse."""
    misfit = truth_misfit(CASE, experiment={"tilt_mrad": TRUE_TILT}, data={"transform": transform})
    assert misfit > 1.3 * at_truth


def test_scan_rotation_sense(at_truth):
    """experiment.scan_rotation_deg turns the scan's x axis toward its y axis. The raster from
    the file's step and shape, rotated by +12 degrees, fits; -12 or +12 + 180 (positions
    negated: the probe position frame) does not."""
    def raster(rotation_deg):
        return truth_misfit(CASE, experiment={"tilt_mrad": TRUE_TILT, "positions": "raster",
                                              "scan_rotation_deg": rotation_deg})

    right = raster(12.0)
    assert right < 1.01 * at_truth
    assert raster(-12.0) > 2 * right
    assert raster(192.0) > 2 * right


def test_multislice_order(at_truth):
    """Transmit slice 0 first (the beam's entrance), then propagate: the crystal upside down
    explains the data worse."""
    assert truth_misfit(CASE, reverse_slices=True, experiment={"tilt_mrad": TRUE_TILT}) > 1.3 * at_truth


@pytest.mark.parametrize("thickness_A", [2.9, 4.9])
def test_slice_thickness(at_truth, thickness_A):
    """The slice thickness is the distance the wave propagates between slices: the true 3.905 Å
    explains the data better than 25 % less or more."""
    misfit = truth_misfit(CASE, experiment={"tilt_mrad": TRUE_TILT}, model={"slice_thickness_A": thickness_A})
    assert misfit > 1.1 * at_truth


def test_tilt_sign_with_the_simulators_own_probe():
    """The same with abTEM's incident probe in place of ptyacc's: the propagation's sign, not the
    probe builder's, decides."""
    right = truth_misfit(CASE, true_probe=True, experiment={"tilt_mrad": TRUE_TILT})
    assert truth_misfit(CASE, true_probe=True, experiment={"tilt_mrad": [-2.0, 1.5]}) > 2 * right
