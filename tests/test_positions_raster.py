"""A scan stored as positions: positions that form the nominal raster are read as that raster
(ptyacc/data/positions.py ``raster_fit``), so that the scan's autos (rotation, transpose/flip,
defocus) apply; positions that form no raster keep their own places and get their rotation and
flips measured at them (orientation.py ``ScatteredGrid``), the rotation turning them about their
centre. Cases of the independent simulator (benchmarks/grid/simulate.py), whose true positions are
the check."""

import h5py
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from test_detector_end_to_end import phase_ncc

from ptyacc.commands.cli import cli
from ptyacc.config import load_config
from ptyacc.data.load import load_data
from ptyacc.data.orientation import (
    SKEW_SURE,
    SKEW_SURE_SCATTERED,
    ScatteredGrid,
    centres_of_mass,
    orientation_from_com,
)
from ptyacc.data.positions import raster_fit, turned_positions_A


def grid(ny: int, nx: int, step: float, angle_deg: float, origin=(3.0, -2.0)) -> np.ndarray:
    """Row-major positions (y, x) Å: column j along (sin a, cos a), row i along (cos a, -sin a), by hand."""
    a = np.radians(angle_deg)
    i, j = np.divmod(np.arange(ny * nx), nx)
    return np.column_stack([origin[0] + step * (i * np.cos(a) + j * np.sin(a)),
                            origin[1] + step * (j * np.cos(a) - i * np.sin(a))])


@pytest.mark.parametrize("angle", [0.0, 9.0, -37.0, 90.0, 171.0])
def test_a_turned_raster_is_recognised_with_its_shape_step_and_angle(angle):
    fit = raster_fit(grid(12, 20, 0.7, angle))
    assert fit is not None and fit.exact and fit.scan_shape == (12, 20)
    assert fit.step_A == pytest.approx(0.7) and fit.rms_A < 1e-9
    assert (fit.rotation_deg - angle + 180) % 360 - 180 == pytest.approx(0.0, abs=1e-9)


def test_jitter_snake_mirror_and_scatter():
    rng = np.random.default_rng(0)
    jittered = grid(16, 16, 1.0, 9.0) + rng.normal(0, 0.1, (256, 2))
    fit = raster_fit(jittered)
    assert fit is not None and not fit.exact and fit.square and fit.scan_shape == (16, 16)
    assert fit.rms_A == pytest.approx(0.1 * np.sqrt(2), rel=0.2) and fit.rotation_deg == pytest.approx(9.0, abs=0.5)
    snake = grid(16, 16, 1.0, 0.0).reshape(16, 16, 2)
    snake[1::2] = snake[1::2, ::-1]
    assert raster_fit(snake.reshape(-1, 2)) is None
    mirrored = grid(16, 16, 1.0, 0.0)[:, ::-1]  # (y, x) swapped: the fast step along y, the rows along x
    assert raster_fit(mirrored) is not None and not raster_fit(mirrored).square
    assert raster_fit(rng.uniform(0, 10, (256, 2))) is None


def test_positions_turned_about_their_centre():
    positions = grid(4, 6, 1.0, 0.0)
    turned = turned_positions_A(positions, 30.0)
    np.testing.assert_allclose(turned.mean(0), positions.mean(0))
    np.testing.assert_allclose(turned - turned.mean(0), grid(4, 6, 1.0, 30.0) - grid(4, 6, 1.0, 30.0).mean(0))


SETTING = dict(detector_px=48, scan_step_A=0.4, dose=3e4, defocus_A=60.0, edge_mrad=50.0, blur_px=0.6)


def _write(simulator, path, setting, jitter_A: float = 0.0, spiral: bool = False):
    """``setting`` written to ``path``, its probes off the nominal raster by ``jitter_A`` rms (or on a
    Fermat spiral), the file's positions_A those places before the scan's rotation (what a stage
    records); the true positions in ground_truth/positions_A."""
    original = simulator.scan_positions_A

    def placed(s, canvas_A):
        nominal = original(s, canvas_A)
        if spiral:
            n = np.arange(len(nominal)) + 0.5
            radius, angle = s.scan_step_A * np.sqrt(n / np.pi), n * np.pi * (3 - np.sqrt(5))
            return nominal.mean(0) + np.column_stack([radius * np.sin(angle), radius * np.cos(angle)])
        return nominal + np.random.default_rng(7).normal(0, jitter_A, nominal.shape)

    simulator.scan_positions_A = placed
    try:
        simulator.write(str(path), setting)
    finally:
        simulator.scan_positions_A = original
    with h5py.File(path) as f:
        return f["ground_truth/positions_A"][()]


def _landed(data, truth) -> float:
    """The largest distance (Å) between the run's positions and the true ones, both about their mean."""
    return float(np.abs((data.positions_A - data.positions_A.mean(0)) - (truth - truth.mean(0))).max())


def test_a_stored_raster_gets_the_autos_of_the_same_file_without_positions(grid_simulator, tmp_path):
    setting = grid_simulator.Setting(**SETTING, scan_shape=(24, 24), seed=1, scan_rotation_deg=9.0, transpose=True,
                                     nominal_defocus_A=48.0)
    grid_simulator.write(str(tmp_path / "scan.h5"), setting)
    with h5py.File(tmp_path / "scan.h5") as f:
        truth = f["ground_truth/positions_A"][()]
    autos = {"scan_rotation_deg": "auto", "defocus_A": "auto"}
    configs = {"raster": {"experiment": autos},
               "positions": {"experiment": {**autos, "positions": {"key": "positions_A"}}}}
    found = {}
    for name, extra in configs.items():
        config = load_config({"data": {"path": str(tmp_path / "scan.h5"), "transform": {"orientation": "auto"}},
                              **extra})
        found[name] = load_data(config)
    raster, stored = found["raster"], found["positions"]
    assert any("read as that raster" in line for line in stored.checks)
    for data in (raster, stored):
        assert data.calibration["scan_rotation_deg"][0] == pytest.approx(9.0, abs=1.0)
        assert data.calibration["defocus_A"][0] == pytest.approx(60.0, rel=0.1)  # the file says 48
        assert list(data.detector["orientation_flags"]) == [True, False, False]
        assert _landed(data, truth) < 0.15
    np.testing.assert_allclose(stored.positions_A, raster.positions_A)


@pytest.mark.parametrize("jitter_A, spiral", [(0.05, False), (0.0, True)])
def test_a_scan_that_is_no_raster_gets_its_rotation_measured(grid_simulator, tmp_path, jitter_A, spiral):
    setting = grid_simulator.Setting(**SETTING, scan_shape=(24, 24), seed=2, scan_rotation_deg=-23.0, flip_x=True)
    truth = _write(grid_simulator, tmp_path / "scan.h5", setting, jitter_A, spiral)
    config = load_config({"data": {"path": str(tmp_path / "scan.h5"), "transform": {"orientation": "auto"}},
                          "experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto",
                                         "positions": {"key": "positions_A"}}})
    data = load_data(config)
    assert data.calibration["scan_rotation_deg"][0] == pytest.approx(-23.0, abs=1.5)
    assert list(data.detector["orientation_flags"]) == [False, False, True]
    assert _landed(data, truth) < 0.3  # Å, over a 9 Å scan: 1.5 degrees move its corners by 0.17 Å
    said = "\n".join(data.checks)
    assert "kept as they are" in said and ("no raster" if spiral else "a raster with jitter") in said
    if spiral:  # the parallax needs a raster's grid: the nominal defocus stays, and the terminal is told
        assert "auto not applied: experiment.defocus_A" in said
    else:
        assert data.calibration["defocus_A"][0] == pytest.approx(60.0, rel=0.1)


def test_the_scattered_curl_matches_the_rasters(grid_simulator):
    """On a raster, the centre of mass judged at the positions gives the raster grid's answer."""
    setting = grid_simulator.Setting(**SETTING, scan_shape=(24, 24), seed=3, scan_rotation_deg=14.0, transpose=True)
    result = grid_simulator.simulate(setting)
    com = centres_of_mass(result["patterns"].reshape(-1, 48, 48).astype(np.float64), None)  # as read out
    on_grid = orientation_from_com(com.reshape(24, 24, 2))
    scattered = orientation_from_com(com, grid=ScatteredGrid(result["nominal_positions_A"]))
    assert (scattered.flags, on_grid.flags) == ((True, False, False), (True, False, False))
    assert scattered.rotation_deg == pytest.approx(on_grid.rotation_deg, abs=1.0)
    assert scattered.rotation_deg == pytest.approx(14.0, abs=1.0)
    # the scattered points' derivatives are noisier: their skew needs more to tell a turn by 180 degrees
    assert (on_grid.skew_sure, scattered.skew_sure) == (SKEW_SURE, SKEW_SURE_SCATTERED) and SKEW_SURE < SKEW_SURE_SCATTERED


@pytest.mark.slow
def test_init_and_run_on_a_raster_stored_as_positions(grid_simulator, tmp_path, monkeypatch):
    """The issue's file: 3D patterns whose only scan is positions_A (the nominal raster), the scan turned
    9 degrees, the defocus read 20 % off: init + run come within 0.03 of the same file without positions."""
    monkeypatch.chdir(tmp_path)
    setting = grid_simulator.Setting(**SETTING | {"defocus_A": 80.0}, scan_shape=(28, 28), seed=5,
                                     scan_rotation_deg=9.0, nominal_defocus_A=64.0, sample="wse2",
                                     descan_offset_px=(0.3, -0.2), hot_pixels=3, dead_pixels=4)
    grid_simulator.write("scan.h5", setting)
    with h5py.File("scan.h5", "a") as f:
        truth = {"phase": f["ground_truth/phase"][()].astype(float), "dx_A": float(f.attrs["dx_A"]),
                 "positions_A": f["ground_truth/positions_A"][()]}
        patterns = f["patterns"][()].reshape(-1, 48, 48)
        del f["patterns"], f.attrs["scan_step_A"], f.attrs["scan_shape"]
        f["patterns"] = patterns
    with h5py.File("scan.h5") as f, h5py.File("bare.h5", "w") as g:  # the same without positions: a raster
        for key, value in f.attrs.items():
            g.attrs[key] = value
        g["patterns"] = f["patterns"][()].reshape(28, 28, 48, 48)
        g.attrs["scan_step_A"] = setting.scan_step_A
    found = {}
    for name in ("scan", "bare"):
        assert CliRunner().invoke(cli, ["init", f"{name}.h5"]).exit_code == 0
        config = yaml.safe_load(open(f"{name}.yaml"))
        assert config["experiment"]["scan_rotation_deg"] == "auto" and config["experiment"]["defocus_A"] == "auto"
        run = CliRunner().invoke(cli, ["run", f"{name}.yaml", "--quiet", "--set", "output.figures=false",
                                       "--set", "optim.iterations=30"])
        assert run.exit_code == 0, run.output
        found[name] = phase_ncc(f"results/{name}/results.h5", truth)
    assert found["bare"] > 0.6
    assert found["scan"] >= found["bare"] - 0.03, found
