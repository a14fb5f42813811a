"""Bad pixels found from the data (ptyacc/data/detector.py, data.bad_pixels: auto) on patterns of
the independent simulator (benchmarks/grid/simulate.py) with planted dead and hot pixels and a dead
column, the mask they give the loss, run.log's line, results.h5 /detector, and the bright-field
measurement that hot pixels no longer blind."""

import h5py
import numpy as np
import pytest

from ptyacc.config import load_config
from ptyacc.data.bright_field import HOT_FACTOR, bright_field_radius_px, neighbours
from ptyacc.data.detector import MIN_SIGNAL, _above_second_brightest, find_bad_pixels
from ptyacc.data.load import load_data
from ptyacc.results.h5file import Results, load_results, save_results


def planted(sim, seed, **changes):
    fields = dict(detector_px=48, scan_shape=(16, 16), dose=3e4, defocus_A=80.0, edge_mrad=40.0, blur_px=0.6,
                  dead_pixels=16, hot_pixels=4, dead_column=7 + seed, seed=seed)
    setting = sim.Setting(**{**fields, **changes})
    return setting, sim.simulate(setting)


@pytest.mark.parametrize("seed", [0, 1])
def test_every_planted_pixel_and_the_dead_column_found(grid_simulator, seed):
    setting, result = planted(grid_simulator, seed)
    patterns, truth = result["patterns"].reshape(-1, 48, 48), result["bad_pixels"]
    bad = find_bad_pixels(patterns)
    assert bad.columns == (setting.dead_column,) and bad.rows == ()
    found = bad.mask
    assert (found & ~truth).sum() <= 2
    hot = truth & (patterns.mean(0) > 100)
    assert hot.sum() >= 3 and (hot & ~found).sum() == 0
    # a dead pixel can be told from a live one only where its neighbours see electrons
    around = neighbours(patterns.sum(0)[None].astype(np.float64))[0, ..., 1]
    decidable = truth & (around >= 3 * MIN_SIGNAL)
    decidable[:, setting.dead_column] = False
    assert decidable.sum() >= 3 and (decidable & ~found).sum() == 0
    # the same detector read transposed: the column is a row
    turned = find_bad_pixels(np.ascontiguousarray(patterns.transpose(0, 2, 1)))
    assert turned.rows == (setting.dead_column,) and np.array_equal(turned.mask, found.T)


def test_clean_patterns_have_no_bad_pixels(grid_simulator):
    clean = grid_simulator.simulate(grid_simulator.Setting(detector_px=48, scan_shape=(16, 16), dose=3e4, defocus_A=80.0,
                                                           edge_mrad=40.0, blur_px=0.6, seed=2))
    assert find_bad_pixels(clean["patterns"].reshape(-1, 48, 48)).count == 0
    noiseless = grid_simulator.simulate(grid_simulator.Setting(detector_px=48, scan_shape=(6, 6), dose=0.0, seed=2))
    assert find_bad_pixels(noiseless["patterns"].reshape(-1, 48, 48)).count == 0


def test_hot_pixels_do_not_blind_the_bright_field_measurement(grid_simulator):
    _, result = planted(grid_simulator, 0, defocus_A=0.0)
    mean = result["patterns"].reshape(-1, 48, 48).mean(0)
    lam, dk = result["wavelength_A"], result["dk_invA"]
    expected = 25.0e-3 / lam / dk  # the disk's radius in px
    assert mean.max() > 5 * np.median(mean[mean > 0.5 * np.percentile(mean, 99)])  # hot pixels outshine the disk
    assert bright_field_radius_px(mean, "planted") == pytest.approx(expected, rel=0.03)


def test_auto_leaves_them_out_of_the_loss_and_says_so(grid_simulator, tmp_path):
    setting, result = planted(grid_simulator, 0, transpose=True)
    path = tmp_path / "bad.h5"
    grid_simulator.write(str(path), setting)
    with h5py.File(path) as f:
        truth = f["ground_truth/bad_pixels"][()].astype(bool)
    config = {"data": {"path": str(path), "transform": {"transpose": True}}, "experiment": {"defocus_A": 80.0}}
    plain = load_data(load_config(config))
    assert plain.mask is None and not any(line.startswith("bad pixels") for line in plain.checks)
    config["data"]["bad_pixels"] = "auto"
    data = load_data(load_config(config))
    found = find_bad_pixels(result["patterns"].reshape(-1, 48, 48))  # stored layout, as the file holds them
    expected = ~np.fft.ifftshift(found.mask.T)  # transposed as prepared, the model's layout
    assert np.array_equal(data.mask.numpy(), expected)
    assert (~expected).sum() >= 48 + 4 and truth[found.mask].all()
    line = data.checks[0]
    assert line.startswith(f"bad pixels (data.bad_pixels: auto): {found.count} of 2304 left out of the loss")
    assert f"dead columns [{setting.dead_column}]" in line
    assert np.array_equal(data.detector["bad_pixels"], np.argwhere(found.mask))


def test_results_keep_the_bad_pixels(tmp_path):
    places = np.array([[1, 2], [3, 4]], dtype=np.int64)
    results = Results(object=np.ones((1, 1, 4, 4), np.complex64), probe=np.ones((1, 4, 4), np.complex64),
                      positions_A=np.zeros((2, 2)), loss=np.ones(1), dx_A=0.5, origin_A=(0.0, 0.0),
                      detector={"bad_pixels": places})
    save_results(tmp_path / "results.h5", results)
    assert np.array_equal(load_results(tmp_path / "results.h5").detector["bad_pixels"], places)
    results.detector = None
    save_results(tmp_path / "none.h5", results)
    assert load_results(tmp_path / "none.h5").detector is None


def test_the_hot_test_counts_as_the_sorted_neighbours_would():
    """A hot pixel reads over HOT_FACTOR times its second-brightest neighbour: counted (fewer than two
    neighbours reach a HOT_FACTOR-th of it) as the eight sorted neighbours say, pixel for pixel."""
    rng = np.random.default_rng(3)
    chunk = rng.poisson(rng.choice([0.3, 4.0, 60.0], size=(6, 24, 24))).astype(np.float64)
    chunk[:, 5, 5], chunk[:, 5, 6], chunk[:, 0, 9] = 900.0, 800.0, 700.0  # a pair side by side, one on the edge
    sorted_rule = chunk > HOT_FACTOR * np.maximum(neighbours(chunk)[..., -2], 0)
    counted = _above_second_brightest(chunk)
    assert counted[:, 5, 5].all() and counted[:, 5, 6].all() and counted[:, 0, 9].all()
    assert np.array_equal(counted, sorted_rule) and 0 < sorted_rule.sum() < sorted_rule.size
