"""``ptyacc init`` on a file holding only what a microscope records (the independent simulator's
patterns of a turned, transposed raster with bad pixels and descan, the nominal raster and
defocus): the config it writes measures them from the data, and says what it found."""

import numpy as np
import yaml
from click.testing import CliRunner

from ptyacc.commands.cli import cli


def test_init_turns_the_autos_on_and_reports_them(grid_simulator, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    setting = grid_simulator.Setting(detector_px=48, scan_shape=(40, 40), scan_step_A=0.3, dose=3e4, defocus_A=40.0,
                                     edge_mrad=50.0, seed=1, scan_rotation_deg=-12.0, transpose=True, hot_pixels=3,
                                     dead_column=30, descan_offset_px=(0.5, -0.3), write_positions=False,
                                     nominal_defocus_A=50.0)
    grid_simulator.write(str(tmp_path / "scan.h5"), setting)
    result = CliRunner().invoke(cli, ["init", "scan.h5"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "scan.yaml").read_text()
    config = yaml.safe_load(text)
    assert config["data"]["bad_pixels"] == "auto"
    assert config["data"]["transform"] == {"orientation": "auto", "descan": "auto"}
    assert config["experiment"]["scan_rotation_deg"] == "auto"
    report = text.split("# ptyacc info:")[1]
    rotation = next(line for line in report.splitlines() if "scan rotation from the centre of mass" in line)
    assert abs(float(rotation.split("mass: ")[1].split(" deg")[0]) + 12.0) < 0.5
    assert "transpose True, flip_y False, flip_x False" in rotation
    assert "dead columns [30]" in report and "3 hot" in report
    offset = report.split("disk centre off by (")[1].split(")")[0]
    assert np.allclose([float(v) for v in offset.split(", ")], (0.5, -0.3), atol=0.05)  # planted: (0.5, -0.3)
    assert "the plane is used" in report
    assert config["experiment"]["defocus_A"] == "auto"
    assert "the file's 50 Å is the nominal value" in text
    assert any(line.startswith("# defocus from the bright-field parallax") for line in report.splitlines())
