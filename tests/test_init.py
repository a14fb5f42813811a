"""`ptyacc init DATAFILE`: a commented config that runs as written when the file carries its
calibration, and names what is missing when it does not."""

import shutil
from pathlib import Path

import h5py
import numpy as np
import yaml
from click.testing import CliRunner

from ptyacc.cli import cli

DEMO = Path(__file__).parents[1] / "examples" / "data" / "demo_mos2.h5"


def test_init_writes_a_config_that_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(DEMO, tmp_path / "scan.h5")
    result = CliRunner().invoke(cli, ["init", "scan.h5"])
    assert result.exit_code == 0, result.output
    assert "scan.yaml: ready: ptyacc run scan.yaml" in result.output
    text = (tmp_path / "scan.yaml").read_text()
    assert "# energy_eV: 80000   # from the file" in text and "positions: {key: positions_A}" in text
    assert "# calibration check: bright-field disk radius predicted 7.66 px" in text  # info's report, appended
    config = yaml.safe_load(text)
    assert config["data"] == {"path": "scan.h5", "key": "patterns", "bad_pixels": "auto",
                              "transform": {"descan": "auto"}} and config["optim"]["batch_size"] == 28
    assert "scan_rotation_deg" not in config["experiment"]  # the file's measured positions: no raster to turn
    run = CliRunner().invoke(cli, ["run", "scan.yaml", "--quiet", "--set", "optim.iterations=1",
                                   "--set", "output.figures=false"])
    assert run.exit_code == 0, run.output
    assert (tmp_path / "results" / "scan" / "results.h5").exists()
    again = CliRunner().invoke(cli, ["init", "scan.h5"])
    assert again.exit_code == 2 and "scan.yaml exists; pass --force" in again.output


def test_init_names_what_a_bare_file_lacks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with h5py.File(tmp_path / "bare.h5", "w") as f:
        f["data"] = np.ones((6, 16, 16), np.float32)
    result = CliRunner().invoke(cli, ["init", "bare.h5", "-o", "bare.yaml"])
    assert result.exit_code == 0, result.output
    assert "fill in the NEEDED keys" in result.output
    text = (tmp_path / "bare.yaml").read_text()
    for line in ("scan_shape: null   # NEEDED", "energy_eV: null   # NEEDED", "semiangle_mrad: null   # NEEDED",
                 "dk_invA: null   # NEEDED", "scan_step_A: null   # NEEDED for a raster scan", "# not ready: "):
        assert line in text, line
