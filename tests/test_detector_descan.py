"""Descan found from the data (ptyacc/data/descan.py, data.transform.descan: auto) on patterns of
the independent simulator (benchmarks/grid/simulate.py), whose truth is the shift it planted."""

import dataclasses

import h5py
import numpy as np
import pytest

from ptyacc.config import load_config
from ptyacc.data.bright_field import repaired
from ptyacc.data.descan import (
    POOR,
    POOR_PX,
    STILL_PX,
    Descan,
    Descanned,
    any_moved,
    disk_centres,
    fit_plane,
    judged,
    shifted_back,
)
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


def measured(sim, setting):
    """The descan judged on every pattern of a simulated case, and the case."""
    result = sim.simulate(setting)
    patterns, good = result["patterns"].reshape(-1, 48, 48), ~result["bad_pixels"]
    mean = repaired(patterns.mean(0, dtype=np.float64))
    positions, centres = result["nominal_positions_A"], disk_centres(patterns, good, mean)
    return judged(fit_plane(positions, centres, 24, mean / mean.sum()), positions, positions, centres), result


@pytest.mark.parametrize("change", [dict(descan_jump_px=(0.8, -0.6)), dict(descan_wave_px=(0.3, 0.5))])
def test_a_jump_or_a_wave_is_kept_per_position_within_a_tenth_of_a_pixel(grid_simulator, change):
    found, result = measured(grid_simulator, descanned(grid_simulator, 1, hot_pixels=2, dead_pixels=4, **change))
    positions, truth = result["nominal_positions_A"], result["descan_px"]
    assert found.kept_px is not None and found.residual_px > 2 * found.noise_px
    assert rms(found.shifts_px(positions) - truth) > 0.2  # the plane alone would be off
    assert rms(found.applied_px(positions) - truth) < 0.1


@pytest.mark.parametrize("seed, defocus", [(1, 80.0), (2, 120.0)])
def test_a_plane_stays_a_plane(grid_simulator, seed, defocus):
    found, result = measured(grid_simulator, descanned(grid_simulator, seed, defocus_A=defocus))
    assert found.kept_px is None and found.noise_px > 0
    assert rms(found.applied_px(result["nominal_positions_A"]) - result["descan_px"]) < 0.1


def test_a_small_pull_alike_over_neighbours_stays_a_plane():
    """Centres on a plane plus a smooth 0.08 px rms ripple (the sample's pull, alike over neighbouring positions)
    and 0.005 px of noise: the plane leaves over POOR times the noise, but under POOR_PX, so it is used and run.log
    says why; the same ripple at 0.3 px rms is followed per position."""
    rng = np.random.default_rng(3)
    n = np.indices((32, 32)).reshape(2, -1).T.astype(float)
    positions = n * 0.45
    plane = 24.0 + 0.4 + positions @ np.array([[0.03, -0.02], [0.01, 0.04]])
    ripple = np.column_stack([np.sin(n[:, 0] / 3.0) * np.cos(n[:, 1] / 4.0), np.cos(n[:, 0] / 4.0) * np.sin(n[:, 1] / 3.0)])
    ripple /= np.sqrt((ripple ** 2).sum(1).mean())
    for size, followed in ((0.08, False), (0.3, True)):
        centres = plane + size * ripple + rng.normal(scale=0.005 / np.sqrt(2), size=plane.shape)
        found = judged(fit_plane(positions, centres, 24, np.full((48, 48), 1 / 48 ** 2)), positions, positions, centres)
        assert found.residual_px > POOR * found.noise_px
        assert (found.kept_px is not None) == followed
    small = judged(fit_plane(positions, plane + 0.08 * ripple, 24, np.full((48, 48), 1 / 48 ** 2)), positions,
                   positions, plane + 0.08 * ripple)
    assert f"under {POOR_PX:g} px: the sample's own pull" in small.line(small.applied_px(positions), positions, 0.1)


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
    config = {"data": {"path": str(path), "bad_pixels": "auto",
                       "transform": {"flip_x": True, "descan": "auto", "descan_model": "shift"}},
              "experiment": {"defocus_A": 80.0}}
    data = load_data(load_config(config))
    assert rms(data.detector["descan_px"] - truth) < 0.1
    assert data.detector["descan_plane"].shape == (2, 3) and not data.detector["descan_per_position"]
    line = next(text for text in data.checks if text.startswith("descan"))
    assert "data.transform.descan: auto" in line and "px rms" in line and "the plane is used" in line
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


def test_auto_keeps_a_jump_per_position_and_says_so(grid_simulator, tmp_path):
    path = tmp_path / "jump.h5"
    grid_simulator.write(str(path), descanned(grid_simulator, 1, descan_jump_px=(0.8, -0.6)))
    with h5py.File(path) as f:
        truth = f["ground_truth/descan_px"][()]
    data = load_data(load_config({"data": {"path": str(path), "transform": {"descan": "auto"}},
                                  "experiment": {"defocus_A": 80.0}}))
    assert data.detector["descan_per_position"] and rms(data.detector["descan_px"] - truth) < 0.1
    plane_rms, noise = data.detector["descan_rms_px"]
    assert plane_rms > 2 * noise
    line = next(text for text in data.checks if text.startswith("descan"))
    assert f"a plane leaves {plane_rms:.3f} px rms" in line and "kept per position" in line


def test_the_half_spectrum_shift_is_the_full_spectrum_shift():
    """Odd and even sides, Nyquist rows and columns included: the real part of the complex shift."""
    rng = np.random.default_rng(4)
    for shape in ((12, 12), (10, 13), (9, 9)):
        patterns = rng.random((5, *shape)).astype(np.float32)
        shifts = rng.normal(size=(5, 2))
        qy, qx = np.fft.fftfreq(shape[0]), np.fft.fftfreq(shape[1])
        ramp = np.exp(2j * np.pi * (shifts[:, 0, None, None] * qy[:, None] + shifts[:, 1, None, None] * qx[None, :]))
        full = np.maximum(np.fft.ifft2(np.fft.fft2(patterns) * ramp).real, 0.0)
        assert np.abs(shifted_back(patterns, shifts) - full).max() < 1e-5


class Stored:
    """A pattern file of given patterns (what ``Descanned`` reads through)."""

    def __init__(self, patterns):
        self.patterns = patterns

    def read(self, rows=None, prepare=None):
        return Read(self.patterns if rows is None else self.patterns[rows])


@dataclasses.dataclass
class Read:
    patterns: np.ndarray


def test_patterns_to_move_by_under_a_hundredth_of_a_pixel_stay_as_read():
    rng = np.random.default_rng(5)
    patterns = rng.random((4, 16, 16)).astype(np.float32)
    kept = np.array([[0.0, 0.3], [0.004, -0.002], [0.0, 0.0], [STILL_PX, 0.0]])
    descan = Descan(np.zeros((2, 3)), np.zeros(2), 8.0, 0.0, 4, np.full((16, 16), 1 / 256), kept_px=kept)
    read = Descanned(Stored(patterns), descan, descan.applied_px(np.zeros((4, 2))), None).read(np.array([0, 1, 2, 3]))
    assert np.array_equal(read.patterns[1:3], patterns[1:3])
    for row in (0, 3):
        assert np.abs(read.patterns[row] - shifted_back(patterns[row:row + 1], kept[row:row + 1])[0]).max() < 1e-6
        assert np.abs(read.patterns[row] - patterns[row]).max() > 1e-3


def test_a_thick_crystal_without_descan_is_left_as_read():
    """abTEM's 40 Å of SrTiO3 (tests/data/abtem/, no descan): the crystal moves the measured disk by about a pixel
    between neighbouring positions, and a plane or per-position 'descan' taken out of it cost 0.02-0.04 of the
    phase NCC (0.938 and 0.913 against 0.958 without, 10 slices, 40 iterations); no pattern is moved."""
    from abtem_cases import case_config

    config = case_config("untilted", data={"transform": {"descan": "auto"}})
    data = load_data(load_config(config))
    _, noise = data.detector["descan_rms_px"]
    assert noise > 0.5 and not data.detector["descan_per_position"]
    assert not np.asarray(data.detector["descan_px"]).any()
    line = next(text for text in data.checks if text.startswith("descan"))
    assert "the patterns left as they are" in line and "0 of 100 patterns shifted back" in line
    with h5py.File(config["data"]["path"]) as f:
        stored = f["patterns"][()].reshape(-1, *f["patterns"].shape[-2:])
    np.testing.assert_array_equal(np.fft.fftshift(data.patterns.numpy(), axes=(-2, -1)), stored)


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
    assert not any_moved(noise.applied_px(positions))
    assert set(noise.left_out) == {"y offset", "y gradient", "x offset", "x gradient"}
    np.testing.assert_array_equal(noise.shifts_px(positions), 0.0)
    true = np.array([[1.0, 0.0], [0.0, -1.0]])  # px per Å: (dy, dx) from (y, x)
    tilted = fit_plane(positions, 32.0 + (positions - positions.mean(0)) @ true.T + scatter, 32, np.ones((64, 64)))
    assert any_moved(tilted.applied_px(positions)) and "y gradient" not in tilted.left_out and "x gradient" not in tilted.left_out
    np.testing.assert_allclose(tilted.plane[:, 1:], true, atol=0.5)

    from abtem_cases import CASES

    config = load_config({"data": {"path": str(CASES / "sto_untilted.h5"), "transform": {"descan": "auto"}},
                          "experiment": {"positions": {"key": "positions_A"}}})
    data = load_data(config)
    assert "the patterns left as they are" in next(text for text in data.checks if text.startswith("descan"))
    with h5py.File(CASES / "sto_untilted.h5") as f:
        stored = f["patterns"][()].reshape(-1, 64, 64).astype(np.float32)
    np.testing.assert_array_equal(np.fft.fftshift(data.patterns.numpy(), axes=(-2, -1)), stored)


@pytest.mark.parametrize("centre", [(64.0, 64.0), (63.0, 64.6)])
def test_a_masked_gap_or_beamstop_does_not_move_the_disk_s_centre(centre):
    """A bright disk (radius 20 px, soft edge) crossed by a module gap (6 rows reading 0, masked) near its edge and a
    masked beamstop over its middle: with the mask, ``repaired`` fills them from the pixels around them (``filled``)
    and the disk's centre is found within 0.25 px (the fill bridges the gap's stretch of the edge by a straight
    line); without it, the gap's zeros pull the centre by over a pixel (an X-ray far-field file whose detector reads
    out backwards took the 1 px this tells apart for a turn, and lost 0.03 of its NCC without a word)."""
    from ptyacc.data.bright_field import filled

    y, x = np.indices((128, 128))
    disk = 1000.0 / (1.0 + np.exp((np.hypot(y - centre[0], x - centre[1]) - 20.0) / 0.7)) + 2.0
    good = np.ones((128, 128), bool)
    good[int(centre[0]) + 12:int(centre[0]) + 18] = False  # the gap
    good[np.hypot(y - centre[0], x - centre[1]) <= 4.5] = False  # the beamstop
    read = np.where(good, disk, 0.0)
    found = disk_centres(read[None], good, repaired(read, good))[0]
    assert np.abs(found - centre).max() < 0.25
    unfilled = disk_centres(read[None], good, repaired(read))[0]
    assert np.abs(unfilled - centre).max() > 1.0
    assert np.array_equal(filled(read, good)[good], read[good])  # the good pixels kept
    stop = np.hypot(y - centre[0], x - centre[1]) <= 4.5
    assert np.abs(filled(read, good)[stop] / disk[stop] - 1).max() < 0.01  # the beamstop: the plateau
