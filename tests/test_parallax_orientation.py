"""The patterns' transpose/flip and the scan rotation from the parallax of the stored patterns
(ptyacc/data/parallax_orientation.py): the linear algebra on known matrices, and on a WSe2 monolayer
of the independent simulator (benchmarks/grid/simulate.py) with a focal spread, whose centre of mass
is noise, the orientation the simulator applied."""

import math
import re

import h5py
import numpy as np
import pytest

from ptyacc.config import load_config
from ptyacc.data.load import load_data
from ptyacc.data.orientation import FLAGS, centres_of_mass, flag_matrix, orientation_from_com, rotation
from ptyacc.data.parallax import fit_shifts
from ptyacc.data.parallax_orientation import (
    conformal_parts,
    orientation_of_shifts,
    parallax_orientation,
    rotation_error_deg,
)
from ptyacc.data.trouble import ROTATION_UNSURE_DEG

WAVELENGTH_A = 0.0418
SIDE = 24


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("theta_deg", [-40.0, 9.0, 30.0])
def test_flags_and_rotation_of_a_known_map(flags, theta_deg):
    defocus = -150.0 if flags[1] else 120.0
    astigmatism = WAVELENGTH_A * np.array([[8.0, -5.0], [-5.0, -8.0]])  # symmetric traceless, in the prepared frame
    m = (WAVELENGTH_A * defocus * rotation(theta_deg).T + astigmatism) @ flag_matrix(*flags)
    found = orientation_of_shifts(m, defocus, WAVELENGTH_A)
    assert found.flags == flags
    assert found.rotation_deg == pytest.approx(theta_deg, abs=1e-9)
    assert found.defocus_A == pytest.approx(defocus, rel=1e-9)
    assert found.ratio == pytest.approx(abs(defocus) / math.hypot(8.0, 5.0), rel=1e-9)


def test_no_answer_where_the_handedness_is_unclear():
    m = rotation(20.0).T + 0.8 * np.diag([1.0, -1.0])  # nearly as much reflection as rotation
    rotating, reflecting = conformal_parts(m)
    assert np.linalg.det(m) == pytest.approx(rotating ** 2 - reflecting ** 2)
    assert orientation_of_shifts(m, 100.0, WAVELENGTH_A) is None


@pytest.fixture(scope="module")
def crystal(grid_simulator):
    setting = grid_simulator.Setting(detector_px=48, scan_shape=(SIDE, SIDE), scan_step_A=0.4, dose=3e4, defocus_A=120.0,
                                     edge_mrad=50.0, seed=2, scan_rotation_deg=9.0, sample="wse2", focal_spread_A=30.0)
    return setting, grid_simulator.simulate(setting)


@pytest.mark.parametrize("flags", [(True, False, False), (False, True, True), (True, True, False)])
def test_a_crystal_whose_centre_of_mass_is_noise(grid_simulator, crystal, flags):
    setting, result = crystal
    stored = grid_simulator.read_out(result["patterns"].reshape(-1, 48, 48).astype(np.float64), grid_simulator.Setting(
        transpose=flags[0], flip_y=flags[1], flip_x=flags[2]))
    weak = orientation_from_com(centres_of_mass(stored, None).reshape(SIDE, SIDE, 2))
    assert weak.curl_left > 0.6  # the centre of mass cannot tell
    steps = np.eye(2) * setting.scan_step_A
    found = parallax_orientation(stored, (SIDE, SIDE), steps, result["wavelength_A"], result["dk_invA"], 96.0,
                                 setting.semiangle_mrad * 1e-3)
    assert found.flags == flags
    assert found.rotation_deg == pytest.approx(9.0, abs=1.0)
    assert found.defocus_A == pytest.approx(120.0, rel=0.25) and found.ratio > 10


@pytest.mark.parametrize("defocus", [120.0, "auto"])
def test_through_load_data_with_the_defocus_given_or_auto(grid_simulator, crystal, tmp_path, defocus):
    """orientation and rotation auto on the crystal's file read out transposed: the parallax's flags
    and rotation are used whether the defocus is given (not measured) or auto (the file's nominal
    96 Å the sign), and the raster lands on the true positions."""
    setting, _ = crystal
    path = tmp_path / "crystal.h5"
    grid_simulator.write(str(path), grid_simulator.Setting(**{**setting.__dict__, "transpose": True,
                                                              "nominal_defocus_A": 96.0, "write_positions": False}))
    config = {"data": {"path": str(path), "transform": {"orientation": "auto"}},
              "experiment": {"scan_rotation_deg": "auto", "defocus_A": defocus}}
    data = load_data(load_config(config))
    assert list(data.detector["orientation_flags"]) == [True, False, False]
    assert data.calibration["scan_rotation_deg"][0] == pytest.approx(9.0, abs=1.0)
    with h5py.File(path) as f:
        truth = f["ground_truth/positions_A"][()]
    moved = data.positions_A - data.positions_A.mean(0)
    assert np.abs(moved - (truth - truth.mean(0))).max() < 0.2  # Å, over a 9 Å scan


@pytest.mark.parametrize("flags", [(False, False, False), (True, False, False), (False, True, False), (True, True, True)])
def test_the_rotations_standard_error_is_its_spread_over_noise_draws(flags):
    """rotation_error_deg from the shifts' fit covariance against the spread of the rotation over 400 draws of
    the same noise (NumPy's generator, no ptyacc), for each kind of flags (the transpose moves the angle into
    other entries of M)."""
    rng = np.random.default_rng(1)
    k = rng.uniform(-0.5, 0.5, (40, 2))
    m_true = WAVELENGTH_A * 100.0 * rotation(12.0).T @ flag_matrix(*flags)
    angles, errors = [], []
    for _ in range(400):
        shifts = k @ m_true.T + rng.normal(0.0, 0.3, (40, 2))
        _, m, covariance, _ = fit_shifts(k, shifts, np.full(40, 0.3), np.ones(40, dtype=bool))
        found = orientation_of_shifts(m, 100.0, WAVELENGTH_A)
        assert found.flags == flags
        angles.append(found.rotation_deg)
        errors.append(rotation_error_deg(m, covariance, found.flags))
    assert np.mean(angles) == pytest.approx(12.0, abs=0.3)
    assert np.mean(errors) == pytest.approx(np.std(angles), rel=0.12)  # about 1.7 degrees here


@pytest.mark.parametrize("dose", [3e4, 1e3])
def test_a_rotation_the_parallax_fixes_only_loosely_is_said(grid_simulator, tmp_path, dose):
    """A 16 x 16 raster at 1e3 counts: the parallax gives the orientation with a rotation a few degrees uncertain,
    and a warning says so with the interval, which holds the truth; at 3e4 counts on 32 x 32 none."""
    side = 32 if dose > 1e4 else 16
    setting = grid_simulator.Setting(detector_px=48, scan_shape=(side, side), scan_step_A=0.4, dose=dose,
                                     defocus_A=120.0, edge_mrad=50.0, seed=5, scan_rotation_deg=9.0, transpose=True,
                                     nominal_defocus_A=96.0, write_positions=False)
    path = tmp_path / "case.h5"
    grid_simulator.write(str(path), setting)
    data = load_data(load_config({"data": {"path": str(path), "transform": {"orientation": "auto"}},
                                  "experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto"}}))
    said = next(line for line in data.checks if line.startswith("scan rotation from the centre of mass"))
    error = float(re.search(r"parallax gives .*? a scan rotation of [-\d.]+ \+- ([\d.]+) deg", said).group(1))
    unsure = [line for line in data.checks if line.startswith("warning: the bright-field parallax fixes the scan rotation")]
    if dose > 1e4:
        assert error < 0.5 and not unsure
    else:
        assert error > ROTATION_UNSURE_DEG and len(unsure) == 1
        low, high = (float(v) for v in re.search(r"started at experiment.scan_rotation_deg ([-\d.]+) and ([-\d.]+)",
                                                 unsure[0]).groups())
        assert high - low == pytest.approx(2 * error, abs=0.02)
        assert low - error < 9.0 < high + error  # the truth within two standard errors


@pytest.mark.parametrize("apart_deg", [1.0, -4.0, 4.0])
def test_a_search_far_from_the_parallax_rotation_moves_the_start_towards_it_and_is_said(grid_simulator, crystal,
                                                                                         tmp_path, monkeypatch, apart_deg):
    """The crystal's centre of mass is noise, so the Fourier regions' search checks the parallax's orientation. Its
    answer put (a clear peak of the same flags) 1 or 4 degrees either way from the parallax's rotation: at 4 the run
    starts a quarter of the way to the search's, keeps it through the later parallax (whose rotation left would take
    it back), and says so with both angles; at 1 the parallax's rotation is used and nothing is said."""
    from ptyacc.data import autocalibration
    from ptyacc.data.overlap_orientation import OverlapOrientation
    from ptyacc.data.trouble import ROTATIONS_APART_DEG, SEARCH_SHARE

    assert 1.0 < ROTATIONS_APART_DEG < 4.0
    setting, _ = crystal
    path = tmp_path / "crystal.h5"
    grid_simulator.write(str(path), grid_simulator.Setting(**{**setting.__dict__, "transpose": True,
                                                              "nominal_defocus_A": 96.0, "write_positions": False}))
    measured = []
    parallax_oriented = autocalibration._parallax_oriented
    monkeypatch.setattr(autocalibration, "_parallax_oriented",
                        lambda *args: measured.append(parallax_oriented(*args)) or measured[-1])
    monkeypatch.setattr(autocalibration, "_overlap_oriented", lambda *args, **how: OverlapOrientation(
        measured[-1].flags, measured[-1].rotation_deg + apart_deg, 120.0, contrast=3.0))
    data = load_data(load_config({"data": {"path": str(path), "transform": {"orientation": "auto"}},
                                  "experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto"}}))
    parallax = measured[-1]
    assert parallax.rotation_error_deg < 1.25  # the parallax is sure of itself: only the search's distance can tell
    apart = [line for line in data.checks if "the Fourier regions' search put the scan rotation" in line]
    used = data.calibration["scan_rotation_deg"][0]
    if abs(apart_deg) < ROTATIONS_APART_DEG:
        assert apart == []
        assert used == pytest.approx(parallax.rotation_deg, abs=0.3)  # the later parallax's correction, near 0
        return
    assert used == pytest.approx(parallax.rotation_deg + SEARCH_SHARE * apart_deg, abs=1e-9)
    assert any("rotation left" in line and "not taken: the rotation lies between" in line for line in data.checks)
    (line,) = apart
    ends = (parallax.rotation_deg, parallax.rotation_deg + apart_deg)
    assert f"{abs(apart_deg):.1f} deg apart ({ends[0]:.2f} and {ends[1]:.2f} deg)" in line
    assert f"starts between them, at {parallax.rotation_deg + SEARCH_SHARE * apart_deg:.2f} deg" in line
    assert line.endswith(f"experiment.scan_rotation_deg {ends[0]:.2f} and {ends[1]:.2f}")
