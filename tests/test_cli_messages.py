"""Small things a new user meets first: `ptyacc info` on a data file alone (X-ray in µm, a hint
to --config), `--set KEY VALUE`, the data.path reference, and the error line under a launcher."""

import json
from pathlib import Path

import h5py
import numpy as np
from click.testing import CliRunner

from ptyacc.commands.cli import cli, main
from ptyacc.config import config_reference

CXI = Path(__file__).parents[1] / "examples" / "data" / "PETRAIII_P25_Near_Field_Ptycho.cxi"


def test_info_on_a_cxi_file_alone_is_xray_in_micrometres():
    result = CliRunner().invoke(cli, ["info", str(CXI)])
    assert result.exit_code == 0, result.output
    assert "dk 0.501354 1/µm; dx 0.01995 µm; probe window 100 x 100 px = 1.995 µm" in result.output
    assert "scan extent (y, x) 19.05 x 20.16 µm" in result.output
    assert "semiangle" not in result.output and "dk_invA" not in result.output


def test_info_on_a_bare_file_suggests_a_config(tmp_path):
    with h5py.File(tmp_path / "bare.h5", "w") as f:
        f["patterns"] = np.ones((2, 3, 16, 16), np.float32)
    result = CliRunner().invoke(cli, ["info", str(tmp_path / "bare.h5")])
    assert result.exit_code == 2
    assert "give the experiment's settings with --config c.yaml" in result.output
    assert f"`ptyacc init {tmp_path / 'bare.h5'}`" in result.output


def test_set_with_a_space_instead_of_equals(capsys):
    assert main(["run", "configs/demo.yaml", "--set", "optim.iterations", "5"]) == 2
    assert capsys.readouterr().err.strip() == ("ptyacc: error: --set optim.iterations 5: write --set "
                                               "optim.iterations=5 (KEY=VALUE as one word, no spaces around =)")


def test_data_path_reference_names_the_formats():
    line = next(line for line in config_reference().splitlines() if line.startswith("| `data.path`"))
    assert "HDF5, CXI, .npy, .mat, EMPAD .raw" in line and "Merlin .mib, Gatan .dm3/.dm4" in line


def test_the_error_line_reaches_the_launchers_report(tmp_path, monkeypatch, capsys):
    """torch's elastic launcher (accelerate launch, torchrun) prints each failed process's error
    file last; ptyacc's one line goes there."""
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    assert main(["validate", "configs/demo.yaml", "--set", "optim.iteratons=5"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("ptyacc: error: optim.iteratons: unknown key")
    assert json.loads(error_file.read_text())["message"] == line
