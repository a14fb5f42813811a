"""Inputs that are wrong in a way a run would not notice: each is said on the terminal, with the
fix, or stops with exit 2 (the patterns' axes swapped with the scan's; a calibration check that
could not run; a batch larger than the scan; a defocus of the wrong sign)."""

from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from conftest import tiny_config

from ptyacc.commands.cli import main
from ptyacc.config import load_config
from ptyacc.data import load_data
from ptyacc.data.export import write_dataset
from ptyacc.data.sanity import defocus_sign_check, image_shift, scan_grid_steps
from ptyacc.physics import wavelength_A

SCAN = [16, 16]


def simulated(tmp_path: Path, defocus_A: float = 60.0) -> np.ndarray:
    """A simulated dataset (16 x 16 scan, 16 px patterns, disk radius ~2.9 px) written to
    tmp_path/sim.h5 with its calibration; its prepared patterns (N, 16, 16)."""
    config = tiny_config(tmp_path, data={"simulate": {"scan_shape": SCAN, "detector_px": 16, "atoms": 6}},
                         experiment={"defocus_A": defocus_A, "scan_step_A": 0.4})
    data = load_data(load_config(config))
    write_dataset(tmp_path / "sim.h5", data)
    return data.patterns.numpy()


def run(tmp_path: Path, capsys, data: dict, *sets: str, **sections) -> tuple[int, list[str]]:
    """``ptyacc run`` of a one-iteration config reading ``data``: exit code and stderr lines."""
    config = tiny_config(tmp_path, optim={"iterations": 1, "batch_size": 8}, **sections)
    config["data"] = data
    config["experiment"] = {"positions": {"key": "positions_A"}} if "experiment" not in sections else config["experiment"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    args = ["run", str(path), "--quiet"]
    for setting in sets:
        args += ["--set", setting]
    code = main(args)
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.slow
def test_patterns_stored_with_the_scan_axes_last_stop_naming_the_transpose(tmp_path, capsys):
    patterns = simulated(tmp_path)
    centred = np.fft.fftshift(patterns, axes=(-2, -1)).reshape(*SCAN, 16, 16)
    with h5py.File(tmp_path / "sim.h5") as f:
        attrs = {k: v for k, v in f.attrs.items() if k != "scan_shape"}
    with h5py.File(tmp_path / "swapped.h5", "w") as f:
        f["patterns"] = centred.transpose(2, 3, 0, 1)
        f.attrs.update(attrs, scan_step_A=0.4)
    code, err = run(tmp_path, capsys, {"path": str(tmp_path / "swapped.h5")}, experiment={})
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("ptyacc: error: "), err
    assert "(ky, kx, scan_y, scan_x)" in err[0] and "transpose(2, 3, 0, 1)" in err[0], err
    with h5py.File(tmp_path / "right.h5", "w") as f:  # the same array the right way round runs
        f["patterns"] = centred
        f.attrs.update(attrs, scan_step_A=0.4)
    code, err = run(tmp_path, capsys, {"path": str(tmp_path / "right.h5")}, experiment={},
                    output={"dir": str(tmp_path / "right")})
    assert code == 0, err


@pytest.mark.slow
def test_a_calibration_check_that_cannot_run_says_why_on_the_terminal(tmp_path, capsys):
    with h5py.File(tmp_path / "flat.h5", "w") as f:  # flat patterns: no bright-field disk to measure
        f["patterns"] = np.random.default_rng(0).poisson(5.0, size=(3, 4, 8, 8)).astype(np.float32)
        f.attrs.update(energy_eV=80e3, semiangle_mrad=20.0, defocus_A=10.0, dk_invA=0.25, scan_step_A=0.5)
    code, err = run(tmp_path, capsys, {"path": str(tmp_path / "flat.h5")}, experiment={})
    assert code == 0, err
    said = [line for line in err if "calibration check skipped" in line]
    assert len(said) == 1 and "no bright-field disk" in said[0] and said[0].startswith("ptyacc: "), err


@pytest.mark.slow
def test_a_batch_larger_than_the_scan_is_said_and_clamped(tmp_path, capsys):
    config = tiny_config(tmp_path, optim={"iterations": 1, "batch_size": 100000})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", str(path), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "optim.batch_size: 100000 is more than the 36 positions drawn each iteration; using 36" in err
    assert main(["run", str(path), "--quiet", "--overwrite", "--set", "optim.batch_size=36"]) == 0
    assert "optim.batch_size" not in capsys.readouterr().err


@pytest.mark.slow
def test_a_defocus_of_the_wrong_sign_is_said_with_the_fix(tmp_path, capsys):
    simulated(tmp_path, defocus_A=60.0)
    code, err = run(tmp_path, capsys, {"path": str(tmp_path / "sim.h5")}, "experiment.defocus_A=-60")
    assert code == 0, err
    warned = [line for line in err if "bright-field parallax says the defocus has the opposite sign" in line]
    assert len(warned) == 1 and "try experiment.defocus_A: 60" in warned[0], err
    code, err = run(tmp_path, capsys, {"path": str(tmp_path / "sim.h5")}, output={"dir": str(tmp_path / "right")})
    assert code == 0 and not any("parallax" in line for line in err), err
    assert "defocus check: bright-field parallax 1." in (tmp_path / "right" / "run.log").read_text()


@pytest.mark.parametrize("sign", [1, -1])
def test_the_demo_defocus_sign_is_read_from_its_parallax(sign):
    data = load_data(load_config("configs/demo.yaml", [f"experiment.defocus_A={sign * 120}"]))
    warned = [line for line in data.checks if line.startswith("warning")]
    assert len(warned) == (sign < 0)
    ratio = float(next(line for line in data.checks if line.startswith("defocus check")).split("parallax ")[1].split()[0])
    assert ratio * sign > 0.8


def test_the_parallax_shift_against_a_known_shift():
    """image_shift recovers a known sub-step shift of a smooth image; the grid's steps are read
    back from rotated raster positions, and positions off a raster give none."""
    y, x = np.indices((20, 20), dtype=np.float64)

    def blob(cy, cx):
        return np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / 8) + 0.5 * np.exp(-((y - cy + 4) ** 2 + (x - cx - 7) ** 2) / 6)

    assert image_shift(blob(9.0, 9.0), blob(9.4, 8.7)) == pytest.approx([0.4, -0.3], abs=0.03)
    angle = np.deg2rad(30)
    steps = 0.5 * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    i, j = np.indices((5, 6)).reshape(2, -1)
    positions = np.stack([i, j], 1) @ steps.T + 3.0
    assert scan_grid_steps(positions, (5, 6)) == pytest.approx(steps)
    assert scan_grid_steps(np.random.default_rng(0).permutation(positions), (5, 6)) is None


def test_a_defocus_too_small_for_the_scan_step_is_not_judged(tmp_path):
    patterns = simulated(tmp_path, defocus_A=60.0)
    with h5py.File(tmp_path / "sim.h5") as f:
        positions = f["positions_A"][()]
    lam = wavelength_A(80e3, "electron")
    dk = 1 / (16 * 0.3)
    assert defocus_sign_check(patterns, tuple(SCAN), positions, 60.0, lam, dk, 2.87) > 0.5
    assert defocus_sign_check(patterns, tuple(SCAN), positions, -60.0, lam, dk, 2.87) < -0.5
    assert defocus_sign_check(patterns, tuple(SCAN), positions, 2.0, lam, dk, 2.87) is None
