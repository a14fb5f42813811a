"""Descan found from the data (ptyacc/data/descan.py, data.transform.descan: auto) on patterns of
the independent simulator (examples/grid/simulate.py), whose truth is the shift it planted."""

import h5py
import numpy as np
import pytest

from ptyacc.config import load_config
from ptyacc.data.bright_field import repaired
from ptyacc.data.descan import disk_centres, fit_plane, shifted_back
from ptyacc.data.load import load_data

PLANE = dict(descan_offset_px=(0.4, -0.7), descan_px_per_A=((0.08, -0.05), (0.03, 0.1)))


def descanned(sim, seed, **changes):
    fields = dict(detector_px=48, scan_shape=(16, 16), dose=3e4, defocus_A=80.0, edge_mrad=50.0, blur_px=0.6, seed=seed,
                  **PLANE)
    return sim.Setting(**{**fields, **changes})


def rms(a):
    return float(np.sqrt((a ** 2).sum(-1).mean()))


@pytest.mark.parametrize("seed, defocus", [(0, 0.0), (1, 80.0)])
def test_the_plane_found_within_a_tenth_of_a_pixel(grid_simulator, seed, defocus):
    result = grid_simulator.simulate(descanned(grid_simulator, seed, defocus_A=defocus, hot_pixels=2, dead_pixels=4))
    patterns, good = result["patterns"].reshape(-1, 48, 48), ~result["bad_pixels"]
    mean = repaired(patterns.mean(0, dtype=np.float64))
    found = fit_plane(result["nominal_positions_A"], disk_centres(patterns, good, mean), 24, mean / mean.sum())
    truth = result["descan_px"]
    assert np.abs(truth).max() > 1.0
    assert rms(found.shifts_px(result["nominal_positions_A"]) - truth) < 0.1
    assert rms(-found.shifts_px(result["nominal_positions_A"]) - truth) > 1.0  # the sign shows


def test_shifted_back_moves_a_pattern_exactly(grid_simulator):
    still = grid_simulator.simulate(descanned(grid_simulator, 0, dose=0.0, scan_shape=(1, 1), atoms_per_A2=0.0,
                                              descan_offset_px=(0.0, 0.0)))["patterns"].reshape(-1, 48, 48)
    moved = grid_simulator.simulate(descanned(grid_simulator, 0, dose=0.0, scan_shape=(1, 1), atoms_per_A2=0.0,
                                              descan_offset_px=(3.0, -2.0)))["patterns"].reshape(-1, 48, 48)
    back = shifted_back(moved, np.array([[3.0, -2.0]]))
    assert np.abs(back - still).max() < 1e-4 * still.max()
    assert np.abs(shifted_back(moved, np.array([[-3.0, 2.0]])) - still).max() > 0.1 * still.max()


def test_auto_takes_it_out_while_preparing(grid_simulator, tmp_path):
    setting = descanned(grid_simulator, 2, flip_x=True, hot_pixels=2)
    path = tmp_path / "descan.h5"
    grid_simulator.write(str(path), setting)
    with h5py.File(path) as f:
        truth = f["ground_truth/descan_px"][()]  # as prepared: the flip_x undoes the read-out
    config = {"data": {"path": str(path), "bad_pixels": "auto", "transform": {"flip_x": True, "descan": "auto"}},
              "experiment": {"defocus_A": 80.0}}
    data = load_data(load_config(config))
    assert rms(data.detector["descan_px"] - truth) < 0.1
    assert data.detector["descan_plane"].shape == (2, 3)
    line = next(text for text in data.checks if text.startswith("descan"))
    assert "data.transform.descan: auto" in line and "px rms" in line
    config["data"]["transform"]["descan"] = "off"
    plain = load_data(load_config(config))
    assert "descan_px" not in plain.detector
    # the prepared patterns' disks now sit where zero frequency is, each of them
    good = np.fft.fftshift(data.mask.numpy())
    for held in (plain, data):
        centred = np.fft.fftshift(held.patterns.numpy(), axes=(-2, -1))
        mean = repaired(centred.mean(0, dtype=np.float64))
        held.centres = disk_centres(centred, good, mean) - 24
    assert rms(plain.centres) > 0.8 and rms(data.centres) < 0.2


def test_a_plane_within_the_samples_own_scatter_is_left_out_and_the_counts_stay_counts():
    """A thick crystal moves the disk by pixels from column to column: centres scattered 2 px rms
    about the window's centre over a 12 x 12 scan of 0.5 Å give a plane of noise, which is left
    out (nothing shifted); a true plane of 1 px/Å under the same scatter is kept, to within its
    error. The abTEM crystal (tests/data/abtem, 2.3 px rms) is read as stored: whole counts."""
    rng = np.random.default_rng(4)
    iy, ix = np.meshgrid(np.arange(12) * 0.5, np.arange(12) * 0.5, indexing="ij")
    positions = np.column_stack([iy.ravel(), ix.ravel()])
    scatter = rng.normal(0.0, 2.0, (144, 2))
    noise = fit_plane(positions, 32.0 + scatter, 32, np.ones((64, 64)))
    assert not noise.moves and set(noise.left_out) == {"y offset", "y gradient", "x offset", "x gradient"}
    np.testing.assert_array_equal(noise.shifts_px(positions), 0.0)
    true = np.array([[1.0, 0.0], [0.0, -1.0]])  # px per Å: (dy, dx) from (y, x)
    tilted = fit_plane(positions, 32.0 + (positions - positions.mean(0)) @ true.T + scatter, 32, np.ones((64, 64)))
    assert tilted.moves and "y gradient" not in tilted.left_out and "x gradient" not in tilted.left_out
    np.testing.assert_allclose(tilted.plane[:, 1:], true, atol=0.5)

    from abtem_cases import CASES

    config = load_config({"data": {"path": str(CASES / "sto_untilted.h5"), "transform": {"descan": "auto"}},
                          "experiment": {"positions": {"key": "positions_A"}}})
    data = load_data(config)
    assert "the patterns left as they are" in next(text for text in data.checks if text.startswith("descan"))
    with h5py.File(CASES / "sto_untilted.h5") as f:
        stored = f["patterns"][()].reshape(-1, 64, 64).astype(np.float32)
    np.testing.assert_array_equal(np.fft.fftshift(data.patterns.numpy(), axes=(-2, -1)), stored)
