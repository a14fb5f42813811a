"""Reciprocal pixel from the bright-field disk: synthetic disks of known (sub-pixel) radius and
the shipped demo data, whose dk is known from its file."""

from pathlib import Path

import h5py
import numpy as np
import pytest

from ptyacc.config import load_config
from ptyacc.data import load_data
from ptyacc.data.calibration import bright_field_radius_px
from ptyacc.errors import ConfigError, DataError
from ptyacc.physics import wavelength_A

DEMO = Path(__file__).resolve().parents[1] / "examples" / "data" / "demo_mos2.h5"


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
