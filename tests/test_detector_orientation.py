"""Scan rotation and the patterns' transpose/flip from the centre of mass (ptyacc/data/orientation.py,
experiment.scan_rotation_deg: auto, data.transform.orientation: auto) on patterns of the independent
simulator (benchmarks/grid/simulate.py), whose true probe positions are the check: ptyacc's raster
turned by the rotation found must land on them."""

import math

import h5py
import numpy as np
import pytest

from ptyacc.config import load_config
from ptyacc.data.load import load_data
from ptyacc.data.orientation import FLAGS, centres_of_mass, flag_matrix, orientation_from_com, rotation
from ptyacc.errors import DataError

SIDE = 40


@pytest.fixture(scope="module")
def turned(grid_simulator):
    """A 40 x 40 raster turned by 9 degrees, read out without transpose or flips."""
    setting = grid_simulator.Setting(detector_px=48, scan_shape=(SIDE, SIDE), scan_step_A=0.3, dose=3e4, defocus_A=40.0,
                                     edge_mrad=50.0, seed=3, scan_rotation_deg=9.0, blur_px=0.6)
    return setting, grid_simulator.simulate(setting)


@pytest.mark.parametrize("flags", FLAGS)
def test_rotation_and_the_right_one_of_the_eight(grid_simulator, turned, flags):
    setting, result = turned
    stored = grid_simulator.read_out(result["patterns"].reshape(-1, 48, 48).astype(np.float64), grid_simulator.Setting(
        transpose=flags[0], flip_y=flags[1], flip_x=flags[2]))
    found = orientation_from_com(centres_of_mass(stored, None).reshape(SIDE, SIDE, 2))
    assert found.flags == flags
    assert found.rotation_deg == pytest.approx(9.0, abs=0.5)
    assert found.curl_left < 0.1 < found.curl_other and found.skew < 0
    assert abs(found.halves_deg[0] - found.halves_deg[1]) < 2.0


def test_given_flags_only_the_rotation_and_a_mirror_refused(turned):
    _, result = turned
    com = centres_of_mass(result["patterns"].reshape(-1, 48, 48), None).reshape(SIDE, SIDE, 2)
    found = orientation_from_com(com, fixed_flags=(False, True, True))  # the patterns turned by 180 degrees
    assert found.flags == (False, True, True) and found.rotation_deg == pytest.approx(9.0 - 180.0, abs=0.5)
    with pytest.raises(DataError, match="mirror the patterns against the scan"):
        orientation_from_com(com, fixed_flags=(True, False, False))


@pytest.mark.slow
def test_auto_through_load_data_puts_the_probes_where_they_were(grid_simulator, tmp_path):
    setting = grid_simulator.Setting(detector_px=48, scan_shape=(SIDE, SIDE), scan_step_A=0.3, dose=3e4, defocus_A=40.0,
                                     edge_mrad=50.0, seed=1, scan_rotation_deg=-12.0, transpose=True, blur_px=0.6,
                                     hot_pixels=3, dead_column=30,  # and a descan whose plane has a curl
                                     descan_offset_px=(0.3, -0.2), descan_px_per_A=((0.04, 0.05), (-0.05, 0.05)))
    path = tmp_path / "turned.h5"
    grid_simulator.write(str(path), setting)
    with h5py.File(path) as f:
        truth = f["ground_truth/positions_A"][()]
    config = {"data": {"path": str(path), "bad_pixels": "auto", "transform": {"orientation": "auto"}},
              "experiment": {"scan_rotation_deg": "auto"}}
    data = load_data(load_config(config))
    assert data.calibration["scan_rotation_deg"][1] == "fitted"
    assert data.calibration["scan_rotation_deg"][0] == pytest.approx(-12.0, abs=0.5)
    assert list(data.detector["orientation_flags"]) == [True, False, False]
    moved = data.positions_A - data.positions_A.mean(0)
    assert np.abs(moved - (truth - truth.mean(0))).max() < 0.1  # Å, over a 12 Å scan
    assert any(line.startswith("scan rotation from the centre of mass") for line in data.checks)
    # a typed rotation stays, the flags are still found
    config["experiment"]["scan_rotation_deg"] = -10.0
    typed = load_data(load_config(config))
    assert typed.calibration["scan_rotation_deg"] == (-10.0, "config")
    assert list(typed.detector["orientation_flags"]) == [True, False, False]
    # the positions the file stores (its nominal raster) are read as that raster: the same rotation is found
    config["experiment"] = {"scan_rotation_deg": "auto", "positions": {"key": "positions_A"}}
    stored = load_data(load_config(config))
    assert stored.calibration["scan_rotation_deg"][0] == pytest.approx(-12.0, abs=0.5)
    moved = stored.positions_A - stored.positions_A.mean(0)
    assert np.abs(moved - (truth - truth.mean(0))).max() < 0.1
    assert any(line.startswith(f"positions: the {SIDE * SIDE} positions") and "read as that raster" in line
               for line in stored.checks)


@pytest.mark.parametrize("turned_deg, readout", [(171.0, (False, False, False)), (9.0, (False, True, True)),
                                                 (159.0, (True, False, True))])
def test_the_flags_found_keep_the_disk_where_it_lies(grid_simulator, tmp_path, turned_deg, readout):
    """The orientation auto takes the flags whose rotation lies nearest 0; on an even size their flips
    must leave the bright-field disk where the detector put it, or ``descan: auto`` takes the pixel
    between a flip's two meanings for a descan. A scan turned by 171 degrees read out as it is: flip_y
    and flip_x at -9 degrees, turning the patterns about the zero frequency (k -> -k exactly: the
    prepared patterns are the stored ones at -k). One turned by 9 degrees read out backwards along both
    axes: the same flags at 9 degrees, reversing. One turned by 159 degrees, transposed and read out
    backwards along x: the flags nearest 0 (transpose and flip_y at -21 degrees) cannot undo that
    readout, so flags of the same handedness turned by a quarter or half turn that do are taken. Every
    time the description is the truth's (F^T R(theta) the same) and no descan is left."""
    setting = grid_simulator.Setting(detector_px=32, scan_shape=(24, 24), scan_step_A=0.5, dose=1e6, defocus_A=40.0,
                                     edge_mrad=50.0, seed=2, scan_rotation_deg=turned_deg, transpose=readout[0],
                                     flip_y=readout[1], flip_x=readout[2])
    path = tmp_path / "flipped.h5"
    grid_simulator.write(str(path), setting)
    config = {"data": {"path": str(path), "transform": {"orientation": "auto", "descan": "auto"}},
              "experiment": {"scan_rotation_deg": "auto"}}
    data = load_data(load_config(config))
    flags = tuple(bool(v) for v in data.detector["orientation_flags"])
    found = flag_matrix(*flags).T @ rotation(data.calibration["scan_rotation_deg"][0])
    np.testing.assert_allclose(found, flag_matrix(*readout).T @ rotation(turned_deg), atol=math.radians(1.0))
    assert np.abs(data.detector["descan_px"]).max(initial=0.0) < 0.05
    if turned_deg == 171.0:
        assert flags == (False, True, True) and list(data.detector["flip_about_zero"]) == [True, True]
        with h5py.File(path) as f:
            stored = np.fft.ifftshift(f["patterns"][()].reshape(-1, 32, 32).astype(np.float32), axes=(-2, -1))
        minus_k = -np.arange(32) % 32
        np.testing.assert_array_equal(data.patterns.numpy(), stored[:, minus_k][:, :, minus_k])
    elif turned_deg == 9.0:
        assert flags == (False, True, True) and "flip_about_zero" not in data.detector
    else:
        assert flags != (True, True, False)  # the flags nearest a rotation of 0
        assert any(line.startswith("orientation: transpose") and "instead" in line for line in data.checks)
