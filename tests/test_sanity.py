"""Physical sanity checks before the first iteration (ptyacc.data.sanity) and the record of the
calibration used (run.log, results.h5)."""

import h5py
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from conftest import tiny_config

from ptyacc.commands.cli import cli
from ptyacc.config import load_config
from ptyacc.data import load_data
from ptyacc.data.bright_field import predicted_disk_radius_px
from ptyacc.data.export import write_dataset
from ptyacc.data.sanity import check_xray
from ptyacc.errors import ConfigError
from ptyacc.physics import wavelength_A


@pytest.fixture
def bare_file(tmp_path):
    """A simulated dataset (16 px patterns, disk radius ~2.9 px) written without its
    calibration attributes, as a detector writes it, and a config that calibrates it."""
    data = load_data(load_config(tiny_config(tmp_path)))
    path = tmp_path / "bare.h5"
    write_dataset(path, data)
    with h5py.File(path, "a") as f:
        for name in list(f.attrs):
            del f.attrs[name]
    config = tiny_config(tmp_path, output={"dir": str(tmp_path / "run")})
    config["data"] = {"path": str(path)}
    config["experiment"].update(positions={"key": "positions_A"}, scan_step_A=None)
    config_path = tmp_path / "bare.yaml"
    config_path.write_text(yaml.safe_dump(config))
    return config_path


def test_disk_formula_against_independent_numbers():
    # 80 keV: wavelength 0.041757 Å; 25 mrad / 0.041757 Å = 0.5987 1/Å; / 0.078125 = 7.663 px
    assert wavelength_A(80e3, "electron") == pytest.approx(0.0417572, rel=1e-5)
    assert predicted_disk_radius_px(80e3, 25.0, 0.078125) == pytest.approx(0.025 / 0.0417572 / 0.078125, rel=1e-5)


@pytest.mark.slow
def test_a_right_calibration_passes_and_is_recorded(bare_file, tmp_path):
    result = CliRunner().invoke(cli, ["run", str(bare_file), "--quiet"])
    assert result.exit_code == 0, result.output
    log = (tmp_path / "run" / "run.log").read_text()
    assert "calibration check: bright-field disk radius predicted 2.87 px, measured 2.7" in log
    assert "energy_eV 80000 (config)" in log
    with h5py.File(tmp_path / "run" / "results.h5") as f:
        attrs = dict(f["calibration"].attrs)
    assert attrs["energy_eV"] == 80e3 and attrs["energy_eV_source"] == "config"
    assert attrs["wavelength_A"] == pytest.approx(wavelength_A(80e3, "electron"))
    assert attrs["wavelength_A_source"] == "derived"
    assert attrs["dx_A"] == pytest.approx(0.3) and attrs["stored_dx_A_source"] == "config"
    assert attrs["dk_invA"] == pytest.approx(1 / (16 * 0.3))
    assert attrs["defocus_A"] == 20.0 and attrs["scan_rotation_deg_source"] == "config"


@pytest.mark.parametrize("setting, named", [
    ("experiment.energy_eV=80", "experiment.energy_eV: 80 (from the config) gives a bright-field disk of radius 0.0"),
    ("experiment.semiangle_mrad=0.025", "did you mean 25 mrad (0.025 rad)?"),
    ("experiment.dx_A=3", "did you mean 0.3 Å (0.03 nm)?"),
])
def test_unit_slips_stop_with_exit_2_naming_the_slip(bare_file, setting, named):
    result = CliRunner().invoke(cli, ["run", str(bare_file), "--quiet", "--set", setting])
    assert result.exit_code == 2
    assert named in result.output
    if "energy" in setting:
        assert "the data show 2.7" in result.output and "did you mean 80000 eV (80 keV)?" in result.output


def test_a_mismatch_without_a_known_slip_names_every_value(bare_file):
    result = CliRunner().invoke(cli, ["run", str(bare_file), "--quiet", "--set", "experiment.semiangle_mrad=40"])
    assert result.exit_code == 2
    assert "energy_eV 80000 (from the config), semiangle_mrad 40 (from the config), dx_A 0.3" in result.output
    assert "experiment.dk_from_bright_field: true" in result.output


@pytest.mark.slow
def test_check_calibration_false_skips_the_check(bare_file, tmp_path):
    result = CliRunner().invoke(cli, ["run", str(bare_file), "--quiet", "--set", "experiment.energy_eV=80",
                                      "--set", "experiment.check_calibration=false"])
    assert result.exit_code == 0, result.output
    assert "calibration check" not in (tmp_path / "run" / "run.log").read_text()


def test_the_check_reads_no_pattern_twice(bare_file, monkeypatch):
    """With every pattern held in memory, the disk is measured on the held patterns (each pattern
    read from the file once); with some held (``keep``), the check reads its own sample. Both ways
    measure the same disk."""
    from ptyacc.data.readers import PatternFile

    counts, real = [], PatternFile.read

    def counted(self, rows=None, prepare=None):
        counts.append(self.info.n_patterns if rows is None else len(rows))
        return real(self, rows, prepare)

    monkeypatch.setattr(PatternFile, "read", counted)
    config = load_config(str(bare_file), ["data.hold=device"])
    every = load_data(config)
    assert every.checks[0].startswith("calibration check: bright-field disk radius predicted 2.87 px")
    assert counts == [every.n_patterns]
    counts.clear()
    half = load_data(config, lambda positions: np.arange(0, len(positions), 2))
    assert counts == [(every.n_patterns + 1) // 2, every.n_patterns]  # the held half, then the sample (all: fewer than 256)
    assert half.checks == every.checks


def test_the_demo_passes_its_check():
    data = load_data(load_config("configs/demo.yaml"), lambda p: np.arange(4))
    assert any(line.startswith("calibration check: bright-field disk radius predicted 7.66 px") for line in data.checks)
    assert data.calibration["energy_eV"] == (80e3, "file")


def test_xray_scan_against_the_window():
    positions_m = np.stack(np.meshgrid(np.arange(5), np.arange(5), indexing="ij"), -1).reshape(-1, 2) * 1e-6
    lines = check_xray(positions_m * 1e10, dx_A=1e3, k=64, wavelength=1.0, near_field_distance_A=None)
    assert lines == ["calibration check: scan spans 40 px, nearest-neighbour spacing 10 px (median), window 64 px"]
    with pytest.raises(ConfigError, match="scan spans 0.04 px"):  # a pixel 1000x too large (mm for m)
        check_xray(positions_m * 1e10, dx_A=1e6, k=64, wavelength=1.0, near_field_distance_A=None)
    with pytest.raises(ConfigError, match="in steps of 1e\\+03 px against a probe window of 64 px"):
        check_xray(positions_m * 1e10, dx_A=10.0, k=64, wavelength=1.0, near_field_distance_A=None)


def test_xray_near_field_fresnel_numbers():
    # dx 1000 Å, wavelength 1 Å, z 1e5 Å: a pixel's Fresnel number 1e6 / 1e5 = 10: no near-field contrast
    with pytest.raises(ConfigError, match="are 10 for a pixel and 4.1e"):
        check_xray(np.zeros((1, 2)), dx_A=1e3, k=64, wavelength=1.0, near_field_distance_A=1e5)
    lines = check_xray(np.zeros((1, 2)), dx_A=1e3, k=64, wavelength=1.0, near_field_distance_A=1e7)
    assert lines == ["calibration check: Fresnel number of the window 409.6, of a pixel 0.1"]
