"""Reciprocal pixel from the bright-field disk: synthetic disks of known (sub-pixel) radius and
the shipped demo data, whose dk is known from its file."""

import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from ptyacc.config import ExperimentConfig, load_config
from ptyacc.data import load_data
from ptyacc.data.bright_field import bright_field_radius_px
from ptyacc.data.calibration import SourceFacts, calibrate
from ptyacc.errors import ConfigError, DataError
from ptyacc.physics import wavelength_A

DEMO = Path(__file__).resolve().parents[1] / "ptyacc" / "demo" / "demo_mos2.h5"


def disk(k: int, radius: float, centre: tuple[float, float], supersample: int = 16) -> np.ndarray:
    """(k, k) pixel coverage of a disk: each pixel the fraction of its area inside."""
    offsets = (np.arange(supersample) + 0.5) / supersample - 0.5
    y = np.arange(k)[:, None, None, None] + offsets[None, None, :, None]
    x = np.arange(k)[None, :, None, None] + offsets[None, None, None, :]
    return ((y - centre[0]) ** 2 + (x - centre[1]) ** 2 <= radius**2).mean(axis=(2, 3))


@pytest.mark.parametrize("radius, centre", [(10.0, (32, 32)), (10.37, (31.6, 33.2)), (4.55, (16, 17))])
def test_radius_of_a_synthetic_disk(radius, centre):
    pattern = 1000 * disk(64, radius, centre) + 3.0  # a dark level that is not zero
    assert bright_field_radius_px(pattern, "f.h5") == pytest.approx(radius, abs=0.01)


def test_dk_from_a_noisy_disk_through_load_data(tmp_path):
    """Poisson counts, 64 x 64, radius 12.3 px; binning by 2 halves the radius, dk follows."""
    rng = np.random.default_rng(4)
    radius, energy, semiangle = 12.3, 200e3, 20.0
    patterns = rng.poisson(50 * disk(64, radius, (32, 32)) + 0.2, size=(4, 4, 64, 64)).astype(np.uint16)
    path = tmp_path / "disk.h5"
    with h5py.File(path, "w") as f:
        f["patterns"] = patterns
        f.attrs.update(energy_eV=energy, semiangle_mrad=semiangle, scan_step_A=1.0, dk_invA=1.0)  # dk ignored
    expected_dk = semiangle * 1e-3 / wavelength_A(energy, "electron") / radius
    for transform, factor in (({}, 1), ({"bin": 2}, 2)):
        config = load_config({"data": {"path": str(path), "transform": transform},
                              "experiment": {"dk_from_bright_field": True}})
        data = load_data(config)
        assert data.dk_invA == pytest.approx(factor * expected_dk, rel=0.01)
        assert data.dx_A == pytest.approx(1 / (data.detector_px * data.dk_invA))


def test_demo_data_gives_the_dk_of_its_file():
    with h5py.File(DEMO) as f:
        known_dk = float(f.attrs["dk_invA"])
    config = load_config({"data": {"path": str(DEMO)},
                          "experiment": {"positions": {"key": "positions_A"}, "dk_from_bright_field": True}})
    assert load_data(config).dk_invA == pytest.approx(known_dk, rel=0.015)


@pytest.mark.parametrize("pattern, message", [
    (np.ones((32, 32)), "no bright-field disk in the mean pattern: it is flat or the disk fills the detector"),
    (disk(32, 1.0, (16, 16)), "expected a disk of radius >= 1.5 px above half maximum"),
    (disk(32, 17.0, (16, 16)), "reaches the detector edge"),
    (disk(32, 4.0, (8, 8)) + disk(32, 4.0, (24, 24)), "no single bright-field disk"),
])
def test_no_disk_is_an_error_naming_the_file(pattern, message):
    with pytest.raises(DataError) as info:
        bright_field_radius_px(pattern, "scan.h5")
    assert message in str(info.value) and "scan.h5" in str(info.value)
    assert "experiment.dk_invA" in str(info.value)


def test_bright_field_fit_refuses_other_sampling_and_xray():
    with pytest.raises(ConfigError, match="experiment.dk_from_bright_field: fits dk_invA"):
        load_config({"data": {"path": "x.h5"}, "experiment": {"dk_from_bright_field": True, "dk_invA": 0.1}})
    with pytest.raises(ConfigError, match="needs radiation: electron"):
        load_config({"data": {"path": "x.h5"}, "experiment": {"dk_from_bright_field": True, "radiation": "xray"}})


# --- calibrate: the config merged with what a file says, no file needed


def experiment(**values) -> ExperimentConfig:
    return load_config({"data": {"path": "x.h5"}, "experiment": values}).experiment


FILE_ATTRS = {"energy_eV": 80e3, "semiangle_mrad": 20.0, "defocus_A": 10.0, "dk_invA": 0.25, "scan_step_A": 0.5}


def test_file_values_fill_what_the_config_leaves_out():
    """8 x 8 patterns of a (3, 4) scan: dx = 1 / (8 dk), C10 = -defocus, a raster of 0.5 A steps."""
    cal = calibrate(experiment(), SourceFacts("f.h5", (3, 4, 8, 8), FILE_ATTRS))
    assert cal.wavelength_A == wavelength_A(80e3, "electron") and cal.semiangle_mrad == 20.0
    assert cal.stored_dx_A == pytest.approx(1 / (8 * 0.25)) and cal.near_field_distance_A is None
    assert cal.aberrations == {"C10": -10.0} and cal.scan_shape == (3, 4)
    assert cal.positions_A[[1, 4]].tolist() == [[0.0, 0.5], [0.5, 0.0]]  # fast axis x, then the next row


def test_config_values_win_and_the_file_is_read_in_its_own_names():
    cal = calibrate(experiment(energy_eV=2e5, dx_A=0.3, aberrations={"C10": 4.0, "C30": 1e4}),
                    SourceFacts("f.h5", (12, 8, 8), {**FILE_ATTRS, "scan_shape": [3, 4]}))
    assert cal.wavelength_A == wavelength_A(2e5, "electron") and cal.stored_dx_A == 0.3
    assert cal.aberrations == {"C10": 4.0, "C30": 1e4}  # the file's defocus does not replace C10
    assert cal.scan_shape == (3, 4) and len(cal.positions_A) == 12
    cxi = {"wavelength_A": 1.0, "detector_distance_m": 2.0, "detector_pixel_m": 50e-6}
    xray = calibrate(experiment(radiation="xray", scan_step_A=1e3), SourceFacts("s.cxi", (2, 2, 100, 100), cxi))
    assert xray.wavelength_A == 1.0 and xray.stored_dx_A == pytest.approx(1.0 * 2.0 / (100 * 50e-6))


def test_positions_of_the_file_a_named_dataset_or_a_raster():
    own = np.arange(24.0).reshape(12, 2)
    attrs = {k: v for k, v in FILE_ATTRS.items() if k != "scan_step_A"}
    assert calibrate(experiment(), SourceFacts("f.h5", (3, 4, 8, 8), attrs, own)).positions_A.tolist() == own.tolist()
    raster = calibrate(experiment(scan_step_A=2.0), SourceFacts("f.h5", (3, 4, 8, 8), attrs, own)).positions_A
    assert raster[-1].tolist() == [4.0, 6.0]  # a given step makes a raster instead
    named = calibrate(experiment(), SourceFacts("f.h5", (3, 4, 8, 8), attrs, own, ("p.h5:xy", 2 * own))).positions_A
    assert named.tolist() == (2 * own).tolist()
    with pytest.raises(DataError, match="p.h5:xy: 11 positions for 12 patterns"):
        calibrate(experiment(), SourceFacts("f.h5", (3, 4, 8, 8), attrs, None, ("p.h5:xy", own[:11])))


def test_bright_field_radius_sets_dk_once_it_is_measured():
    """dk = semiangle / wavelength / R; before the fit the pixel is unknown (None)."""
    attrs = {"energy_eV": 2e5, "semiangle_mrad": 20.0, "scan_step_A": 1.0, "dk_invA": 1.0}
    source = SourceFacts("f.h5", (4, 4, 64, 64), attrs)
    assert calibrate(experiment(dk_from_bright_field=True), source).stored_dx_A is None
    cal = calibrate(experiment(dk_from_bright_field=True), source, bright_field_radius_px=12.3)
    dk = 20e-3 / wavelength_A(2e5, "electron") / 12.3
    assert cal.stored_dx_A == pytest.approx(1 / (64 * dk))
    with pytest.raises(ConfigError, match="experiment.semiangle_mrad: needed by experiment.dk_from_bright_field"):
        calibrate(experiment(dk_from_bright_field=True), SourceFacts("f.h5", (4, 4, 64, 64), {"energy_eV": 2e5}))


def test_defaults_come_last():
    """A simulation's defaults fill only what neither the config nor the file gives."""
    cal = calibrate(experiment(energy_eV=3e5), SourceFacts("data.simulate", (2, 2, 16, 16), {}),
                    defaults={"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 100.0, "scan_step_A": 0.5},
                    bright_field_radius_px=4.0)
    assert cal.wavelength_A == wavelength_A(3e5, "electron") and cal.aberrations == {"C10": -100.0}
    assert cal.stored_dx_A == pytest.approx(1 / (16 * 25e-3 / wavelength_A(3e5, "electron") / 4.0))


# --- where the config and the file disagree: an override (logged) or an error naming both


@pytest.mark.parametrize("config, line", [
    ({"energy_eV": 300e3}, "experiment.energy_eV 300000 overrides 80000 from f.h5 (energy_eV)"),
    ({"semiangle_mrad": 24.0}, "experiment.semiangle_mrad 24 overrides 20 from f.h5 (semiangle_mrad)"),
    ({"scan_step_A": 0.6}, "experiment.scan_step_A 0.6 overrides 0.5 from f.h5 (scan_step_A)"),
    ({"dk_invA": 0.3}, "experiment.dk_invA 0.3 overrides 0.25 from f.h5 (dk_invA)"),
    ({"dx_A": 0.1}, "experiment.dx_A 0.1 overrides 0.5 from f.h5 (1 / (8 px x dk_invA 0.25))"),
    ({"defocus_A": -500.0}, "experiment.defocus_A -500 overrides 10 from f.h5 (defocus_A)"),  # any size, any sign
    ({"aberrations": {"C10": 3.0}}, "experiment.aberrations.C10 -3 overrides 10 from f.h5 (defocus_A)"),
])
def test_a_config_value_that_replaces_the_file_s_is_an_override(config, line):
    cal = calibrate(experiment(**config), SourceFacts("f.h5", (3, 4, 8, 8), FILE_ATTRS))
    assert cal.overrides == (line,)


def test_equal_values_are_no_override_and_the_file_s_positions_replaced_by_a_raster_are():
    same = calibrate(experiment(energy_eV=80e3, dk_invA=0.25, defocus_A=10.0), SourceFacts("f.h5", (3, 4, 8, 8), FILE_ATTRS))
    assert same.overrides == ()
    own = np.zeros((12, 2))
    raster = calibrate(experiment(scan_step_A=0.5), SourceFacts("f.h5", (3, 4, 8, 8), FILE_ATTRS, own))
    assert raster.overrides == ("experiment.scan_step_A 0.5: a raster replaces the probe positions of f.h5",)


@pytest.mark.parametrize("config, message", [
    ({"energy_eV": 80.0}, "experiment.energy_eV: 80 against 80000 from f.h5 (energy_eV), a factor 1e+03 apart"),
    ({"semiangle_mrad": 0.02}, "experiment.semiangle_mrad: 0.02 against 20 from f.h5 (semiangle_mrad), a factor 1e+03"),
    ({"scan_step_A": 0.05}, "experiment.scan_step_A: 0.05 against 0.5 from f.h5 (scan_step_A), a factor 10 apart"),
    ({"dk_invA": 2.5}, "experiment.dk_invA: 2.5 against 0.25 from f.h5 (dk_invA), a factor 10 apart"),
    ({"dx_A": 5.0}, "experiment.dx_A: 5 against 0.5 from f.h5 (1 / (8 px x dk_invA 0.25)), a factor 10 apart"),
])
def test_a_config_value_far_from_the_file_s_is_an_error(config, message):
    with pytest.raises(ConfigError) as info:
        calibrate(experiment(**config), SourceFacts("f.h5", (3, 4, 8, 8), FILE_ATTRS))
    assert str(info.value).startswith(message)


def test_xray_values_against_a_cxi_file():
    """Against the wavelength when the file has no energy; distance and pixel by the same rule."""
    cxi = {"wavelength_A": 1.0, "detector_distance_m": 2.0, "detector_pixel_m": 50e-6}
    source = SourceFacts("s.cxi", (2, 2, 100, 100), cxi)
    energy = 12398.419843320026  # h c / (1 A) in eV
    assert calibrate(experiment(radiation="xray", energy_eV=energy, scan_step_A=1e3), source).overrides == ()
    cal = calibrate(experiment(radiation="xray", energy_eV=2 * energy, detector_distance_m=1.5, scan_step_A=1e3), source)
    assert cal.overrides == ("experiment.detector_distance_m 1.5 overrides 2 from s.cxi (detector_distance_m)",
                             "experiment.energy_eV (wavelength_A) 0.5 overrides 1 from s.cxi (wavelength_A)")
    with pytest.raises(ConfigError, match=r"experiment.detector_distance_m: 2000 against 2 from s.cxi"):
        calibrate(experiment(radiation="xray", detector_distance_m=2000.0, scan_step_A=1e3), source)
    with pytest.raises(ConfigError, match=r"experiment.detector_pixel_m: 5e-05 against 0.05 from s.cxi"):
        calibrate(experiment(radiation="xray", detector_pixel_m=50e-6, scan_step_A=1e3),
                  SourceFacts("s.cxi", (2, 2, 100, 100), {**cxi, "detector_pixel_m": 0.05}))


def test_scan_shape_against_the_file():
    """Against 4D scan axes or the number of patterns: an error, also with positions from a file;
    against a 'scan_shape' attribute: an override."""
    named = ("f.h5:positions_A", np.zeros((12, 2)))
    with pytest.raises(ConfigError, match=re.escape("data.scan_shape: [4, 3] against the scan axes [3, 4] of the "
                                                    "4D patterns in f.h5")):
        calibrate(experiment(), SourceFacts("f.h5", (3, 4, 8, 8), FILE_ATTRS, None, named), [4, 3])
    with pytest.raises(ConfigError, match=re.escape("data.scan_shape: [5, 5] gives 25 positions but the data has 12")):
        calibrate(experiment(), SourceFacts("f.h5", (12, 8, 8), FILE_ATTRS, None, named), [5, 5])
    cal = calibrate(experiment(), SourceFacts("f.h5", (12, 8, 8), {**FILE_ATTRS, "scan_shape": [3, 4]}), [2, 6])
    assert cal.overrides == ("data.scan_shape [2, 6] overrides [3, 4] from f.h5 (scan_shape)",)
    assert cal.scan_shape == (2, 6) and cal.positions_A[-1].tolist() == [0.5, 2.5]


def test_radiation_against_the_file():
    with pytest.raises(ConfigError, match="experiment.radiation: electron, but f.h5 holds xray data"):
        calibrate(experiment(), SourceFacts("f.h5", (3, 4, 8, 8), {**FILE_ATTRS, "radiation": "xray"}))


def test_the_calibration_predicts_the_bright_field_disk_it_is_checked_against():
    """semiangle / wavelength / dk pixels, written out here with the relativistic electron wavelength,
    for dk from the file and for dx from the config (dk = 1 / (K dx)); no disk for X-rays or without
    a semi-angle."""
    h, m, e, c = 6.62607015e-34, 9.1093837015e-31, 1.602176634e-19, 299792458.0
    lam = h / np.sqrt(2 * m * e * 80e3 * (1 + e * 80e3 / (2 * m * c**2))) * 1e10  # Å
    cal = calibrate(experiment(), SourceFacts("f.h5", (3, 4, 8, 8), FILE_ATTRS))
    assert cal.disk_radius_px == pytest.approx(20e-3 / lam / 0.25, rel=1e-9)
    from_dx = calibrate(experiment(dx_A=0.3), SourceFacts("f.h5", (3, 4, 8, 8), FILE_ATTRS))
    assert from_dx.disk_radius_px == pytest.approx(20e-3 / lam * 8 * 0.3, rel=1e-9)
    no_angle = {k: v for k, v in FILE_ATTRS.items() if k != "semiangle_mrad"}
    assert calibrate(experiment(), SourceFacts("f.h5", (3, 4, 8, 8), no_angle)).disk_radius_px is None
    cxi = {"wavelength_A": 1.0, "detector_distance_m": 2.0, "detector_pixel_m": 50e-6}
    xray = calibrate(experiment(radiation="xray", scan_step_A=1e3), SourceFacts("s.cxi", (2, 2, 100, 100), cxi))
    assert xray.disk_radius_px is None
