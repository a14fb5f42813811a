"""The independent simulator's detector and microscope effects (benchmarks/grid/simulate.py),
each alone, against known answers: the truth it writes is what the patterns show."""

import h5py
import numpy as np
import pytest

from ptyacc.data.positions import raster_positions_A
from ptyacc.data.prepare import Preparation


def vacuum(sim, **changes):
    """A 3 x 3 scan of a 32 px detector through empty space (every pattern the bare disk)."""
    fields = dict(detector_px=32, scan_shape=(3, 3), scan_step_A=0.9, dose=0.0, defocus_A=40.0, edge_mrad=60.0,
                  atoms_per_A2=0.0, seed=2)
    return sim.Setting(**{**fields, **changes})


def centre_of_mass(patterns):
    """(N, 2) (y, x) centre of mass in px of (N, K, K) patterns."""
    y, x = np.indices(patterns.shape[-2:])
    total = patterns.sum(axis=(-2, -1))
    return np.stack([(patterns * y).sum(axis=(-2, -1)) / total, (patterns * x).sum(axis=(-2, -1)) / total], -1)


def test_scan_rotation_turns_the_true_positions_as_ptyacc_rotates_a_raster(grid_simulator):
    setting = vacuum(grid_simulator, scan_rotation_deg=9.0, scan_shape=(3, 4))
    result = grid_simulator.simulate(setting)
    truth, nominal = result["positions_A"], result["nominal_positions_A"]
    assert np.allclose(truth.mean(0), nominal.mean(0))
    for angle, close in ((9.0, True), (-9.0, False), (0.0, False)):
        raster = raster_positions_A((3, 4), 0.9, angle)
        found = np.allclose(raster - raster.mean(0), truth - truth.mean(0), atol=1e-9)
        assert found == close, angle


@pytest.mark.parametrize("flags", [(t, fy, fx) for t in (False, True) for fy in (False, True) for fx in (False, True)])
def test_read_out_is_undone_by_the_same_transform_flags(grid_simulator, flags):
    setting = vacuum(grid_simulator, transpose=flags[0], flip_y=flags[1], flip_x=flags[2],
                     descan_offset_px=(2.0, -5.0))  # an off-centre disk, so that every flip shows
    plain = grid_simulator.simulate(vacuum(grid_simulator, descan_offset_px=(2.0, -5.0)))["patterns"].reshape(-1, 32, 32)
    stored = grid_simulator.simulate(setting)["patterns"].reshape(-1, 32, 32)
    prep = Preparation((32, 32), (0, 0), (32, 32), 1, *flags, None, far_field=False)
    assert np.array_equal(prep.orient_and_pad(stored), plain)
    assert not np.array_equal(stored, plain) or flags == (False, False, False)


def test_descan_moves_each_disk_by_the_planted_shift(grid_simulator):
    setting = vacuum(grid_simulator, defocus_A=0.0, descan_offset_px=(0.3, -0.6),
                     descan_px_per_A=((0.4, 0.0), (0.1, -0.3)))
    result = grid_simulator.simulate(setting)
    still = grid_simulator.simulate(vacuum(grid_simulator, defocus_A=0.0))["patterns"].reshape(-1, 32, 32)
    moved = centre_of_mass(result["patterns"].reshape(-1, 32, 32)) - centre_of_mass(still)
    expected = np.array([0.3, -0.6]) + (result["positions_A"] - result["positions_A"].mean(0)) @ np.array(
        [[0.4, 0.0], [0.1, -0.3]]).T
    assert np.allclose(result["descan_px"], expected)
    assert np.abs(moved - expected).max() < 0.05


def test_a_jump_and_a_wave_of_descan_are_where_the_docstring_puts_them(grid_simulator):
    setting = vacuum(grid_simulator, defocus_A=0.0, descan_jump_px=(0.5, 0.0), descan_wave_px=(0.0, 0.4))
    result = grid_simulator.simulate(setting)
    ny, nx = setting.scan_shape
    row, column = np.divmod(np.arange(ny * nx), nx)
    expected = np.column_stack([0.5 * (row >= ny // 2), 0.4 * np.sin(2 * np.pi * column / nx)])
    assert np.allclose(result["descan_px"], expected)
    still = grid_simulator.simulate(vacuum(grid_simulator, defocus_A=0.0))["patterns"].reshape(-1, 32, 32)
    moved = centre_of_mass(result["patterns"].reshape(-1, 32, 32)) - centre_of_mass(still)
    assert np.abs(moved - expected).max() < 0.05


def test_blur_spreads_a_point_by_its_sigma(grid_simulator):
    point = np.zeros((1, 32, 32))
    point[0, 16, 16] = 1.0
    spread = grid_simulator.blurred(point, 1.5)[0]
    y, x = np.indices(spread.shape)
    assert spread.sum() == pytest.approx(1.0)
    assert (spread * (y - 16) ** 2).sum() == pytest.approx(1.5 ** 2, rel=1e-3)
    assert (spread * (x - 16) ** 2).sum() == pytest.approx(1.5 ** 2, rel=1e-3)


def test_partial_coherence_weights_and_a_softer_disk_edge(grid_simulator):
    setting = vacuum(grid_simulator, source_size_A=0.3, focal_spread_A=30.0)
    rule = grid_simulator.coherence_quadrature(setting)
    assert len(rule) == 27 and sum(weight for *_, weight in rule) == pytest.approx(1.0)
    spread = np.array([(shift[0], shift[1], focus) for shift, focus, _ in rule])
    weights = np.array([weight for *_, weight in rule])
    assert weights @ spread[:, 0] ** 2 == pytest.approx(0.3 ** 2) and weights @ spread[:, 2] ** 2 == pytest.approx(900.0)
    # a sample that scatters: a coherent probe's pattern changes when the source has a size
    atoms = dict(atoms_per_A2=0.12, defocus_A=60.0)
    sharp = grid_simulator.simulate(vacuum(grid_simulator, **atoms))["patterns"]
    soft = grid_simulator.simulate(vacuum(grid_simulator, source_size_A=0.3, **atoms))["patterns"]
    assert np.abs(soft - sharp).max() > 1e-3 * sharp.max()
    assert np.allclose(soft.sum(axis=(-2, -1)), 1.0, atol=1e-6)


def test_bad_pixels_and_nominal_values_in_the_file(grid_simulator, tmp_path):
    setting = vacuum(grid_simulator, dose=1e4, dead_pixels=3, hot_pixels=2, dead_column=5, nominal_defocus_A=50.0,
                     write_positions=False, scan_rotation_deg=4.0)
    path = tmp_path / "detector.h5"
    grid_simulator.write(str(path), setting)
    with h5py.File(path) as f:
        patterns, bad = f["patterns"][()].reshape(-1, 32, 32), f["ground_truth/bad_pixels"][()].astype(bool)
        assert "positions_A" not in f and "scan_rotation_deg" not in f.attrs
        assert f.attrs["defocus_A"] == 50.0 and f["ground_truth"].attrs["defocus_A"] == 40.0
        assert f["ground_truth"].attrs["scan_rotation_deg"] == 4.0
    assert 32 + 3 <= bad.sum() <= 32 + 5  # a planted pixel may fall in the dead column
    assert bad[:, 5].all() and (patterns[:, :, 5] == 0).all()
    lit = patterns.mean(0)
    hot = bad & (lit > 0.5 * 0.05 * 1e4)
    dead = bad & (patterns == 0).all(0)
    assert hot.sum() == 2 and (dead & ~hot).sum() == bad.sum() - 2
