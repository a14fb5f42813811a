"""Defocus from the bright-field parallax (ptyacc/data/parallax.py, experiment.defocus_A: auto) on
patterns of the independent simulator (benchmarks/grid/simulate.py), whose true defocus is the check;
the file's nominal defocus is 25 % off."""

import math
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from ptyacc.commands.cli import cli
from ptyacc.commands.info import parallax_figure_report
from ptyacc.config import load_config
from ptyacc.data import parallax
from ptyacc.data.load import load_data
from ptyacc.data.overlap_focus import Scale, hann_windows, reassigned, refined_scale
from ptyacc.data.parallax import NoParallax, aligned_shifts, measure, shifted
from ptyacc.data.sanity import scan_grid_steps
from ptyacc.errors import ConfigError
from ptyacc.physics import wavelength_A
from ptyacc.results.figures import parallax_figure

K = 48
DEMO = Path(__file__).resolve().parents[1] / "ptyacc" / "demo" / "demo_mos2.h5"


def case(grid_simulator, defocus_A, side=32, seed=5, **effects):
    setting = grid_simulator.Setting(detector_px=K, scan_shape=(side, side), scan_step_A=0.4, dose=3e4,
                                     defocus_A=defocus_A, edge_mrad=50.0, seed=seed, **effects)
    return setting, grid_simulator.simulate(setting)


def measured(grid_simulator, setting, result, rotation_deg=None):
    """The parallax of a simulated case, its raster turned by ``rotation_deg`` (default: the true positions)."""
    patterns = np.fft.ifftshift(result["patterns"].reshape(-1, K, K), axes=(-2, -1))
    positions = result["positions_A"] if rotation_deg is None else grid_simulator.rotated(
        result["nominal_positions_A"], rotation_deg)
    steps = scan_grid_steps(positions, setting.scan_shape)
    return measure(patterns, setting.scan_shape, steps, result["wavelength_A"], result["dk_invA"])


def test_cubic_shift_moves_an_image_by_a_fraction_of_a_step():
    y, x = np.indices((20, 20))
    image = np.sin(0.4 * y) * np.cos(0.3 * x)
    moved = shifted(image, np.array([0.25, -1.5]))
    truth = np.sin(0.4 * (y - 0.25)) * np.cos(0.3 * (x + 1.5))
    inside = np.isfinite(moved)
    assert inside.sum() > 250 and np.abs(moved[inside] - truth[inside]).max() < 0.01


def test_shifts_of_several_images_at_once_are_each_ones_own():
    """Leading dimensions broadcast: a stack of images, each by its own shift, is each image moved
    alone (against the sines' truth), NaN where a sample leaves the image or meets a NaN."""
    y, x = np.indices((20, 20))
    image = np.sin(0.4 * y) * np.cos(0.3 * x)
    holed = image.copy()
    holed[10, 10] = np.nan
    d = np.array([[0.25, -1.5], [2.7, 0.4], [-3.2, 1.1]])
    moved = shifted(np.stack([image, holed]), d[:, None, :])  # (3 shifts, 2 images, 20, 20)
    assert moved.shape == (3, 2, 20, 20)
    for g, (dy, dx) in enumerate(d):
        truth = np.sin(0.4 * (y - dy)) * np.cos(0.3 * (x - dx))
        inside = np.isfinite(moved[g, 0])
        assert inside.sum() > 150 and np.abs(moved[g, 0][inside] - truth[inside]).max() < 0.01
        assert np.isnan(moved[g, 1][round(10 + dy), round(10 + dx)])  # the hole moved with the image
        near = np.isfinite(moved[g, 1])
        assert np.allclose(moved[g, 1][near], moved[g, 0][near]) and near.sum() >= inside.sum() - 16


def test_each_group_aligned_on_its_own_with_its_error():
    rng = np.random.default_rng(6)
    y, x = np.indices((28, 28))
    reference = np.sin(0.5 * y + 0.2 * x) + np.cos(0.35 * x - 0.3 * y)
    truth = np.array([[0.3, -0.7], [-1.6, 2.2], [2.4, 0.9], [0.0, 0.0]])
    images = np.nan_to_num(shifted(reference, truth[:, None, :])[:, 0], nan=0.0) * 2.0 + 0.5
    images += 0.01 * rng.normal(size=images.shape)
    images[:, :3], images[:, -3:], images[:, :, :3], images[:, :, -3:] = 0.5, 0.5, 0.5, 0.5  # edges left out below
    trimmed = np.full_like(reference, np.nan)
    trimmed[4:-4, 4:-4] = reference[4:-4, 4:-4]
    d, covariance = aligned_shifts(images, trimmed, np.round(truth))
    assert np.abs(d - truth).max() < 0.02
    assert (np.sqrt(np.diagonal(covariance, axis1=1, axis2=2)) < 0.01).all()


@pytest.mark.parametrize("defocus_A, rotation_deg", [(100.0, 9.0), (-80.0, -12.0), (150.0, 0.0)])
def test_defocus_within_five_percent_with_its_sign(grid_simulator, defocus_A, rotation_deg):
    setting, result = case(grid_simulator, defocus_A, scan_rotation_deg=rotation_deg)
    found = measured(grid_simulator, setting, result)
    assert found.reliable
    assert found.defocus_A == pytest.approx(defocus_A, rel=0.05)
    assert abs(found.rotation_left_deg) < 1.0
    assert abs(found.c12a_A) < 0.05 * abs(defocus_A) and abs(found.c12b_A) < 0.05 * abs(defocus_A)
    assert np.isfinite(found.image[10:-10, 10:-10]).all()


@pytest.mark.parametrize("c12_A", [(20.0, 0.0), (0.0, -20.0)])
def test_astigmatism_its_sign_and_size(grid_simulator, c12_A):
    setting, result = case(grid_simulator, 120.0, scan_rotation_deg=9.0, c12_A=c12_A)
    found = measured(grid_simulator, setting, result)
    assert found.reliable and found.defocus_A == pytest.approx(120.0, rel=0.08)  # seed 5 reads 4-7 % low at 120 A
    assert np.hypot(found.c12a_A - c12_A[0], found.c12b_A - c12_A[1]) < 5.0  # Å, of 20
    assert found.c12_error_A < 5.0


def test_a_scan_rotation_left_out_shows_in_the_antisymmetric_part(grid_simulator):
    setting, result = case(grid_simulator, 100.0, scan_rotation_deg=9.0)
    found = measured(grid_simulator, setting, result, rotation_deg=4.0)  # the raster assumed turned by 4 degrees, truly 9
    assert found.rotation_left_deg == pytest.approx(5.0, abs=1.0)
    assert found.defocus_A == pytest.approx(100.0, rel=0.05)


def test_a_crystal_reads_its_defocus_from_the_fourier_regions(monkeypatch):
    """The demo file (abTEM, MoS2, 120 Å underfocus): a crystal's images carry their power at a few lattice
    frequencies, which most pixels of the disk see from one side only. The real-space shifts alone read
    the defocus about a fifth short; fitted region by region in Fourier space, within 5 %."""
    with h5py.File(DEMO) as f:
        patterns, attrs = f["patterns"][()], dict(f.attrs)
    n, shape = patterns.shape[-1], tuple(attrs["scan_shape"])
    lam = wavelength_A(attrs["energy_eV"])
    prepared = np.fft.ifftshift(patterns.reshape(-1, n, n), axes=(-2, -1))
    found = measure(prepared, shape, np.eye(2) * attrs["scan_step_A"], lam, attrs["dk_invA"])
    assert found.reliable and found.defocus_A == pytest.approx(attrs["defocus_A"], rel=0.05)
    assert abs(found.c12a_A) < 5.0 and abs(found.c12b_A) < 5.0 and abs(found.rotation_left_deg) < 1.0
    monkeypatch.setattr(parallax, "refined_scale", lambda *args: Scale(1.0, 1.0, 1.0, False))
    shifts_alone = measure(prepared, shape, np.eye(2) * attrs["scan_step_A"], lam, attrs["dk_invA"])
    assert shifts_alone.defocus_A < 0.85 * attrs["defocus_A"]


def test_reassigned_frequency_of_a_tone_between_bins():
    """The Hann window's derivative moves each bin of a tone's transform to the tone's own frequency."""
    tone = np.array([2.3, -3.6]) / 16  # cycles per step, between the bins of a 16 x 16 raster
    n = np.indices((16, 16))
    blocks = np.fft.fft2(np.exp(2j * math.pi * (tone[0] * n[0] + tone[1] * n[1])) * hann_windows((16, 16))[:, 0])
    bins = np.array([[2, -4], [3, -3], [2, -3], [3, -4]])
    found = reassigned(bins / 16, blocks[:, None, bins[:, 0] % 16, bins[:, 1] % 16])
    assert np.abs(found - tone).max() * 16 < 0.02  # bins


def shifted_images(side: int, seed: int, defocus_A: float = 120.0, k_px: int = 40, radius_px: float = 10.0):
    """Patterns (side * side, k_px, k_px) centred whose every disk pixel k sees one sample moved by exactly M k
    (M = lambda defocus I, 80 kV-like, dk 0.06 1/A, step 0.45 A): a sum of plane waves whose power falls as
    exp(-|q|^2 / (2 (0.2 1/A)^2)), as steeply as a partly coherent beam's images' (no bracket: every region agrees);
    with the arguments ``refined_scale`` takes after them."""
    rng = np.random.default_rng(seed)
    dk_invA, step_A, m = 0.06, 0.45, 0.0418 * defocus_A * np.eye(2)
    q, amplitude, phase = rng.normal(size=(600, 2)) * 0.2, rng.normal(size=600) * 0.02, rng.uniform(0, 2 * math.pi, 600)
    y, x = np.indices((k_px, k_px))
    centre = np.array([k_px / 2, k_px / 2])
    disk = np.hypot(y - centre[0], x - centre[1]) <= radius_px
    k = np.column_stack([y[disk] - centre[0], x[disk] - centre[1]]) * dk_invA
    raster = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), -1).reshape(-1, 2) * step_A
    seen = raster[:, None, :] - (k @ m.T)[None]  # (N, P, 2) A
    patterns = np.full((side * side, k_px, k_px), 0.01)
    values = np.zeros(seen.shape[:2])
    for start in range(0, len(q), 50):  # 50 waves at a time: all 600 at once held 1 GB
        part = slice(start, start + 50)
        values += (amplitude[part] * np.cos(2 * math.pi * seen @ q[part].T + phase[part])).sum(-1)
    patterns[:, disk] = 1.0 + values
    return patterns, (side, side), step_A * np.eye(2), m, dk_invA, centre, radius_px


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_fourier_regions_scale_is_not_pulled_low_by_a_steep_spectrum(seed):
    """On a 16 x 16 raster the Hann window mixes each frequency with its lower neighbours, whose power is higher
    where the spectrum falls steeply: taken at its bin's frequency the scale of the true M read 0.79-0.86; taken at
    the frequency its power comes from, within 4 %."""
    found = refined_scale(*shifted_images(16, seed), None)
    assert found.found and found.scale == pytest.approx(1.0, abs=0.04)


@pytest.mark.parametrize("seed", [5, 6])
def test_a_partly_coherent_beam_s_small_defocus_is_not_read_high(grid_simulator, seed):
    """A focal spread (30 Å, with a 0.35 Å source) damps the two terms of the pixels that see a frequency from both
    sides differently, turning their phase across the disk: fitted there too, 70 Å read 1.067-1.073 of the truth on
    these seeds (the coherent beam 1.01-1.04); from the one-sided pixels alone within 3 %, as the coherent beam."""
    for partial in (0.0, 1.0):
        setting, result = case(grid_simulator, 70.0, source_size_A=0.35 * partial, focal_spread_A=30.0 * partial,
                               seed=seed)
        found = measured(grid_simulator, setting, result)
        assert found.reliable and found.defocus_A == pytest.approx(70.0, rel=0.03)


def test_no_disk_or_a_small_raster_cannot_tell(grid_simulator):
    setting, result = case(grid_simulator, 100.0, side=8)
    with pytest.raises(NoParallax, match="raster of at least"):
        measured(grid_simulator, setting, result)
    setting, result = case(grid_simulator, 120.0, side=16)
    found = measured(grid_simulator, setting, result)  # shifts of 6 steps on a 16-step side
    assert not found.reliable and "too little overlap" in found.reason
    flat = np.ones((16 * 16, K, K), dtype=np.float32)
    with pytest.raises(NoParallax, match="no bright-field disk"):
        measure(flat, (16, 16), np.eye(2) * 0.4, result["wavelength_A"], result["dk_invA"])


def test_auto_through_load_data_from_a_nominal_defocus_25_percent_off(grid_simulator, tmp_path):
    setting = grid_simulator.Setting(detector_px=K, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=-100.0,
                                     edge_mrad=50.0, seed=2, scan_rotation_deg=9.0, nominal_defocus_A=-125.0,
                                     write_positions=False)
    path = tmp_path / "case.h5"
    grid_simulator.write(str(path), setting)
    config = {"data": {"path": str(path)}, "experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto"}}
    with h5py.File(path, "a") as f:  # no nominal value: the parallax alone
        del f.attrs["defocus_A"]
    alone = load_data(load_config(config))
    assert alone.calibration["defocus_A"][0] == pytest.approx(-100.0, rel=0.05)
    with h5py.File(path, "a") as f:
        f.attrs["defocus_A"] = -125.0
    data = load_data(load_config(config))
    value, source = data.calibration["defocus_A"]
    assert source == "fitted" and value == pytest.approx(-100.0, rel=0.05)
    line = next(line for line in data.checks if line.startswith("defocus from the bright-field parallax"))
    assert "-125 A (the file's defocus_A)" in line and "the measured defocus -" in line
    assert data.detector["parallax_image"].shape == (32, 32)
    figure = parallax_figure(data.detector)  # the run's parallax.png
    assert len(figure.axes) == 2 and len(figure.axes[1].collections) == 2
    with h5py.File(path, "a") as f:  # a blank sample: nothing to align, the nominal value stays
        f["patterns"][...] = np.broadcast_to(f["patterns"][...].mean(axis=(0, 1)), f["patterns"].shape)
    blank = load_data(load_config(config))
    assert blank.calibration["defocus_A"] == (-125.0, "file")
    assert any("not used" in line and "nominal defocus -125 A" in line for line in blank.checks)
    with h5py.File(path, "a") as f:
        del f.attrs["defocus_A"]
    assert "defocus_A" not in load_data(load_config(config)).calibration  # no nominal: in focus


@pytest.mark.slow
def test_a_small_defocus_is_measured_down_to_its_limit(grid_simulator):
    """40 Å (its phase at the disk's edge 1.9 rad): the real-space shifts alone read about 52 Å, the
    Fourier regions within 5 %. 20 Å (0.9 rad) is read but not trusted; at 10 Å no defocus fits."""
    setting, result = case(grid_simulator, 40.0)
    found = measured(grid_simulator, setting, result)
    assert found.reliable and found.defocus_A == pytest.approx(40.0, rel=0.05)
    setting, result = case(grid_simulator, 20.0)
    found = measured(grid_simulator, setting, result)
    assert not found.reliable and "too small" in found.reason
    setting, result = case(grid_simulator, 10.0)
    found = measured(grid_simulator, setting, result)
    assert not found.reliable and "no defocus fits" in found.reason


def test_the_parallax_corrects_a_rotation_the_centre_of_mass_could_not_tell(grid_simulator, tmp_path):
    """At 120 A defocus the centre of mass hardly tells a rotation from the one 180 degrees away
    (divergence skew near 0) and picks the wrong one here; the parallax's defocus then has the
    nominal one's opposite sign, which turns the rotation back, and its antisymmetric part refines it."""
    setting = grid_simulator.Setting(detector_px=K, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=120.0,
                                     edge_mrad=50.0, seed=5, scan_rotation_deg=9.0, nominal_defocus_A=96.0,
                                     write_positions=False)
    path = tmp_path / "case.h5"
    grid_simulator.write(str(path), setting)
    config = {"data": {"path": str(path)}, "experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto"}}
    data = load_data(load_config(config))
    assert abs(float(data.detector["orientation_skew"])) < 1.0
    assert data.calibration["defocus_A"][0] == pytest.approx(120.0, rel=0.06)
    assert data.calibration["scan_rotation_deg"][0] == pytest.approx(9.0, abs=1.0)
    assert any("turned by 180 deg" in line for line in data.checks)
    assert "C12a" not in data.aberrations  # none in the data: within 3 sigma of 0


@pytest.mark.slow
def test_measured_astigmatism_goes_into_the_probe(grid_simulator, tmp_path):
    setting = grid_simulator.Setting(detector_px=K, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=120.0,
                                     edge_mrad=50.0, seed=2, c12_A=(0.0, -20.0), nominal_defocus_A=96.0)
    path = tmp_path / "case.h5"
    grid_simulator.write(str(path), setting)
    data = load_data(load_config({"data": {"path": str(path)}, "experiment": {"defocus_A": "auto"}}))
    assert data.aberrations["C10"] == pytest.approx(-120.0, rel=0.05)
    assert data.aberrations["C12b"] == pytest.approx(-20.0, abs=5.0) and abs(data.aberrations["C12a"]) < 5.0
    given = load_data(load_config({"data": {"path": str(path)},
                                   "experiment": {"defocus_A": "auto", "aberrations": {"C12a": 1.0}}}))
    assert given.aberrations["C12a"] == 1.0 and "C12b" not in given.aberrations


def test_auto_refused_where_no_parallax_applies():
    with pytest.raises(ConfigError, match="defocus_A: auto measures the defocus"):
        load_config({"experiment": {"defocus_A": "auto", "radiation": "xray"}})
    simulated = load_config({"data": {"simulate": {"scan_shape": [6, 6], "detector_px": 16}},
                             "experiment": {"defocus_A": "auto"}})
    with pytest.raises(ConfigError, match="a data.simulate dataset is made with the defocus given"):
        load_data(simulated)


def test_the_parallax_turns_flags_the_centre_of_mass_could_not_tell(grid_simulator, tmp_path):
    """Orientation auto too: the parallax of the stored patterns gives the flags (parallax_orientation.py),
    the patterns, not the scan, turned back by 180 degrees, so that the rotation stays the one nearest 0."""
    setting = grid_simulator.Setting(detector_px=K, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=120.0,
                                     edge_mrad=50.0, seed=5, scan_rotation_deg=9.0, transpose=True,
                                     nominal_defocus_A=96.0, write_positions=False)
    path = tmp_path / "case.h5"
    grid_simulator.write(str(path), setting)
    config = {"data": {"path": str(path), "transform": {"orientation": "auto"}},
              "experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto"}}
    data = load_data(load_config(config))
    assert list(data.detector["orientation_flags"]) == [True, False, False]
    assert data.calibration["scan_rotation_deg"][0] == pytest.approx(9.0, abs=1.0)
    assert data.calibration["defocus_A"][0] == pytest.approx(120.0, rel=0.08)
    said = next(line for line in data.checks if line.startswith("scan rotation from the centre of mass"))
    assert "transpose True, flip_y True, flip_x True;" in said  # the centre of mass alone chose them wrong
    assert "the bright-field parallax gives transpose True, flip_y False, flip_x False" in said


@pytest.mark.slow
def test_a_thick_sample_the_defocus_at_the_entrance_surface(grid_simulator, tmp_path):
    """The parallax sees the defocus at the sample's middle: 4 slices 8 A apart (24 A of propagation)
    read about 12 A less; a 4-slice model gets it back at the entrance surface, where its probe is."""
    setting = grid_simulator.Setting(detector_px=K, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=120.0,
                                     edge_mrad=50.0, seed=2, slices=4, slice_thickness_A=8.0, nominal_defocus_A=96.0)
    path = tmp_path / "case.h5"
    grid_simulator.write(str(path), setting)
    config = {"data": {"path": str(path)}, "experiment": {"defocus_A": "auto"}}
    middle = load_data(load_config(config)).calibration["defocus_A"][0]
    config["model"] = {"slices": 4, "slice_thickness_A": 8.0}
    entrance = load_data(load_config(config))
    assert entrance.calibration["defocus_A"][0] == pytest.approx(middle + 12.0)
    assert entrance.calibration["defocus_A"][0] == pytest.approx(120.0, rel=0.05)
    assert any("at the sample's middle, 12 A below the entrance surface" in line for line in entrance.checks)


@pytest.mark.slow
def test_info_draws_the_parallax_the_estimate_gives(grid_simulator, tmp_path):
    """`ptyacc info --figure`: the arrays drawn are those of the estimate itself (``measure`` on the
    file's patterns), and the figure shows them."""
    setting = grid_simulator.Setting(detector_px=K, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=100.0,
                                     edge_mrad=50.0, seed=2, nominal_defocus_A=125.0)
    path = tmp_path / "case.h5"
    grid_simulator.write(str(path), setting)
    lines, drawn = parallax_figure_report(load_config({"data": {"path": str(path)}}), tmp_path / "parallax.png")
    assert (tmp_path / "parallax.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"defocus {drawn['parallax_defocus_A'][0]:.1f} +-" in lines[0]
    assert drawn["parallax_defocus_A"][0] == pytest.approx(100.0, rel=0.05)
    with h5py.File(path) as f:
        patterns, dk, wavelength = f["patterns"][()].reshape(-1, K, K), f.attrs["dk_invA"], f.attrs["wavelength_A"]
    found = measure(np.fft.ifftshift(patterns, axes=(-2, -1)), (32, 32), np.eye(2) * 0.4, wavelength, dk)
    assert drawn["parallax_defocus_A"][0] == pytest.approx(found.defocus_A, rel=1e-6)
    assert np.allclose(drawn["parallax_shifts_A"], found.shifts_A[found.used])
    assert np.allclose(drawn["parallax_image"], found.image, equal_nan=True)
    figure = parallax_figure(drawn)
    shown = np.ma.filled(figure.axes[0].images[0].get_array().astype(float), np.nan)
    assert np.allclose(shown, found.image, equal_nan=True)
    assert np.allclose(figure.axes[1].collections[1].get_offsets()[:, ::-1], found.k_invA[found.used])


@pytest.mark.slow
def test_info_figure_from_the_command_line_with_the_rotation(grid_simulator, tmp_path):
    setting = grid_simulator.Setting(detector_px=K, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=-100.0,
                                     edge_mrad=50.0, seed=2, scan_rotation_deg=9.0, nominal_defocus_A=-125.0,
                                     write_positions=False)
    path, figure = tmp_path / "case.h5", tmp_path / "figures" / "parallax.png"
    grid_simulator.write(str(path), setting)
    result = CliRunner().invoke(cli, ["info", str(path), "--set", "experiment.scan_rotation_deg=auto",
                                      "--figure", str(figure)])
    assert result.exit_code == 0, result.output
    assert f"figure {figure}: the bright-field parallax, defocus -" in result.output and figure.is_file()
    config = load_config({"data": {"path": str(path)}, "experiment": {"scan_rotation_deg": "auto"}})
    drawn = parallax_figure_report(config, tmp_path / "again.png")[1]
    assert float(drawn["scan_rotation_deg"]) == pytest.approx(9.0, abs=1.0)
    assert "scan rotation from the data: " in parallax_figure(drawn)._suptitle.get_text()
    refused = CliRunner().invoke(cli, ["info", str(path), "--set", "experiment.radiation=xray", "--figure",
                                       str(tmp_path / "none.png")])
    assert "not drawn" in refused.output and not (tmp_path / "none.png").exists()
