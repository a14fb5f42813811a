"""End-to-end on a thick crystal simulated in the test (tests/crystal_data.py): the refined
beam tilt and slice thickness come back from a wrong start, and the object with them."""

import pytest
from crystal_data import crystal_config, phase_ncc, tilted_crystal

import ptyacc

TILT_MRAD = (3.0, -2.0)
# identical slices are the crystal's prior: without it the slices may shear to absorb the tilt
BLUR = {"regularize": {"depth_blur_slices": 2.0}}


@pytest.mark.slow
def test_refined_tilt_recovers_the_tilt_and_the_untilted_quality():
    """Measured: tilt (2.88, -2.02) mrad from (0, 0); phase NCC 0.642 against the untilted
    case's 0.645 (0.617 if the tilt is not modelled)."""
    untilted_config = crystal_config(**BLUR)
    untilted = ptyacc.reconstruct(ptyacc.load_config(untilted_config), data=tilted_crystal(untilted_config),
                                  write=False)
    config = crystal_config(**BLUR, start={"tilt": 0}, lr={"tilt": 0.5})
    rec = ptyacc.reconstruct(ptyacc.load_config(config), data=tilted_crystal(config, TILT_MRAD), write=False)
    tilt = rec.results.tilt_mrad
    assert tilt.shape == (2,)
    assert abs(tilt[0] - TILT_MRAD[0]) < 0.2 and abs(tilt[1] - TILT_MRAD[1]) < 0.2, tilt
    assert phase_ncc(rec) > phase_ncc(untilted) - 0.01, (phase_ncc(rec), phase_ncc(untilted))


@pytest.mark.slow
def test_refined_slice_thickness_recovers_from_a_start_30_percent_off():
    """Simulated with 10 Å slices, started at 13 Å: measured 10.18 Å after 30 iterations."""
    data = tilted_crystal(crystal_config(thickness_A=10.0))
    config = crystal_config(thickness_A=13.0, **BLUR, start={"slice_thickness": 0})
    rec = ptyacc.reconstruct(ptyacc.load_config(config), data=data, write=False)
    thickness = rec.results.attrs["slice_thickness_A"]
    assert abs(thickness / 10.0 - 1) < 0.05, thickness
