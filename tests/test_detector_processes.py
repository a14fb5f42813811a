"""The measurements from the data give the same values on 2 processes as on 1 (each process reads
the same sample from the file), and the runs that use them the same results."""

import h5py
import numpy as np
import pytest
from test_distributed import launch_configs


def on_one_and_two(folder, config: dict) -> tuple[tuple, tuple]:
    """``config`` run by the worker on 1 and on 2 processes: for each, (results.h5's ``detector``
    group as {name: array}, the object, the calibration's scan_rotation_deg and defocus_A)."""
    found = []
    for out in launch_configs(folder, [(f"p{n}", config, n, []) for n in (1, 2)]).values():
        with h5py.File(out / "results" / "results.h5") as f:
            found.append(({key: f["detector"][key][()] for key in f["detector"]}, f["object"][()],
                          f["calibration"].attrs["scan_rotation_deg"], f["calibration"].attrs["defocus_A"]))
    return found[0], found[1]


@pytest.mark.slow
def test_autos_agree_on_one_and_two_processes(grid_simulator, tmp_path):
    setting = grid_simulator.Setting(detector_px=32, scan_shape=(12, 12), scan_step_A=0.4, dose=3e4, defocus_A=40.0,
                                     edge_mrad=50.0, seed=2, scan_rotation_deg=7.0, flip_x=True, hot_pixels=2,
                                     dead_column=5, descan_offset_px=(0.3, 0.2), write_positions=False)
    grid_simulator.write(str(tmp_path / "scan.h5"), setting)
    config = {"data": {"path": str(tmp_path / "scan.h5"), "bad_pixels": "auto",
                       "transform": {"orientation": "auto", "descan": "auto"}},
              "experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto"},
              "optim": {"iterations": 2, "batch_size": 16}, "runtime": {"progress": False},
              "output": {"figures": False}}
    one, two = on_one_and_two(tmp_path, config)
    assert sorted(one[0]) == ["bad_pixels", "descan_in_model", "descan_per_position", "descan_plane", "descan_px",
                              "descan_rms_px", "orientation_flags", "orientation_skew", "overlap_defocus_A",
                              "parallax_defocus_A", "scan_rotation_deg", "trials_defocus_A"]
    for key in one[0]:
        if key not in ("parallax_defocus_A", "trials_defocus_A"):
            assert np.array_equal(one[0][key], two[0][key], equal_nan=True), key
    assert one[2] == two[2] and abs(one[2] - 7.0) < 2.0
    # the real-space parallax cannot tell this small defocus on a 12 x 12 raster; the bright-field pixels'
    # coherence gives it (data/overlap_orientation.py), the same on both, and the run's trial reconstructions try it
    # (its error NaN: no standard error). Each process's trials see the all-reduced loss; 1 and 2 processes' losses
    # agree to about 1e-7 of it. This profile is nearly flat (its six scales' losses equal to six digits), so the
    # parabola's lowest point, (L- - L+) / 2 (L- - 2 L0 + L+) steps of 4 %, moves by up to about 1e-3 of the defocus
    # for such a difference (3.4e-4 measured on one machine, under 1e-4 on another), and the object after two
    # iterations with it by about as much. A wrong exchange moves them by far more: a process's own loss is about
    # half the all-reduced one, so trials that took it would choose on other numbers altogether.
    assert np.isnan(one[0]["parallax_defocus_A"][1]) and np.isnan(two[0]["parallax_defocus_A"][1])
    assert one[0]["parallax_defocus_A"][0] == pytest.approx(two[0]["parallax_defocus_A"][0], rel=2e-3)
    assert float(one[0]["trials_defocus_A"]) == pytest.approx(float(two[0]["trials_defocus_A"]), rel=2e-3)
    assert one[3] == pytest.approx(two[3], rel=2e-3) and abs(one[3] - 40.0) < 6.0, one[3]
    assert np.abs(one[1] - two[1]).max() < 2e-3


@pytest.mark.slow
def test_parallax_defocus_agrees_on_one_and_two_processes(grid_simulator, tmp_path):
    setting = grid_simulator.Setting(detector_px=32, scan_shape=(24, 24), scan_step_A=0.4, dose=3e4, defocus_A=120.0,
                                     edge_mrad=50.0, seed=2, scan_rotation_deg=7.0, nominal_defocus_A=96.0)
    grid_simulator.write(str(tmp_path / "scan.h5"), setting)
    config = {"data": {"path": str(tmp_path / "scan.h5")},
              "experiment": {"scan_rotation_deg": 7.0, "defocus_A": "auto", "positions": {"key": "positions_A"}},
              "optim": {"iterations": 2, "batch_size": 16}, "runtime": {"progress": False},
              "output": {"figures": False}}
    one, two = on_one_and_two(tmp_path, config)
    assert "parallax_defocus_A" in one[0] and one[3] == pytest.approx(120.0, rel=0.06)
    for key in one[0]:
        assert np.array_equal(one[0][key], two[0][key], equal_nan=True), key  # the image is NaN where few images reach
    assert one[3] == two[3]
