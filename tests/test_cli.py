"""The command line: run (both entry points), validate, plot, config-reference, errors."""

import shlex
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner
from conftest import tiny_config

from ptyacc.commands.cli import cli
from ptyacc.config import config_reference

ROOT = Path(__file__).parents[1]
EXPECTED_FILES = {"results.h5", "run.log", "object_phase.png", "probe.png", "loss.png", "positions.png", "summary.png"}


def write_config(tmp_path, name="c.yaml", **sections) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(tiny_config(tmp_path, **sections)))
    return path


def test_module_and_console_script_do_the_same(tmp_path):
    """`python -m ptyacc.run c.yaml` and `ptyacc run c.yaml` write the same files and results."""
    config = write_config(tmp_path)
    outputs = []
    for name, command in (("a", [sys.executable, "-m", "ptyacc.run"]),
                          ("b", [sys.executable, "-c", "from ptyacc.commands.cli import entry_point; entry_point()", "run"])):
        out = tmp_path / name
        done = subprocess.run([*command, str(config), "--set", f"output.dir={out}"], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        assert "final loss" in done.stderr
        assert {p.name for p in out.iterdir()} == EXPECTED_FILES
        outputs.append(out / "results.h5")
    with h5py.File(outputs[0]) as a, h5py.File(outputs[1]) as b:
        np.testing.assert_array_equal(a["object"][()], b["object"][()])
        np.testing.assert_array_equal(a["loss"][()], b["loss"][()])
        assert a["loss"].shape == (2,) and a["object"].dtype == np.complex64


@pytest.mark.slow
def test_results_layout_and_plot(tmp_path):
    """results.h5 holds the contract's datasets and attributes; `ptyacc plot` remakes figures."""
    config = write_config(tmp_path, model={"probe_modes": 2, "slices": 2})
    runner = CliRunner()
    result = runner.invoke(cli, ["run", str(config), "--quiet"])
    assert result.exit_code == 0, result.output
    path = tmp_path / "out" / "results.h5"
    with h5py.File(path) as f:
        assert f["object"].shape[:2] == (1, 2) and f["probe"].shape == (2, 16, 16)
        assert f["positions_A"].shape == (36, 2) and f["loss"].shape == (2,)
        for key in ("dx_A", "origin_A", "config", "versions", "world_size"):
            assert key in f.attrs
        assert f.attrs["dx_A"] == 0.3 and f.attrs["world_size"] == 1
        assert yaml.safe_load(f.attrs["config"])["model"]["slices"] == 2
        # probe centres in the results map onto object pixels inside the canvas
        px = (f["positions_A"][()] - f.attrs["origin_A"]) / f.attrs["dx_A"]
        assert (px >= 8).all() and (px[:, 0] < f["object"].shape[2] - 8).all()
    with h5py.File(path) as f:  # measured and predicted mean patterns, centred, for the summary figure
        measured, predicted = f["mean_pattern_measured"][()], f["mean_pattern_predicted"][()]
        assert measured.shape == predicted.shape == (16, 16)
        assert np.unravel_index(np.argmax(measured), measured.shape)[0] in (7, 8, 9)
        assert abs(predicted.sum() / measured.sum() - 1) < 0.2
    figures = tmp_path / "figs"
    result = runner.invoke(cli, ["plot", str(path), "-o", str(figures)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in figures.iterdir()} == EXPECTED_FILES - {"results.h5", "run.log"}


def test_validate_prints_full_config_and_errors_are_one_line(tmp_path):
    runner = CliRunner()
    good = write_config(tmp_path)
    result = runner.invoke(cli, ["validate", str(good), "--set", "optim.iterations=7"])
    assert result.exit_code == 0
    assert yaml.safe_load(result.stdout)["optim"]["iterations"] == 7
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim: {batch_size: -4}\n")
    for args in (["validate", str(bad)], ["run", str(bad)], ["plot", str(tmp_path / "none.h5")]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ptyacc: error: ")
        assert "Traceback" not in result.output


@pytest.mark.parametrize("words", [["model.object_amplitude_bounds=[0.5, 1.5]"],
                                   ["model.object_amplitude_bounds=[0.5,", "1.5]"]])
def test_set_takes_a_yaml_list_with_spaces_quoted_or_split_by_the_shell(tmp_path, capsys, words):
    """`--set model.object_amplitude_bounds=[0.5, 1.5]`, one word (quoted) or two (the shell split it at the
    space): the list, and the next --set still its own."""
    from ptyacc.commands.cli import main

    assert main(["validate", str(write_config(tmp_path)), "--set", *words, "--set", "optim.iterations=7"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["object_amplitude_bounds"] == [0.5, 1.5]
    assert printed["optim"]["iterations"] == 7


def test_error_exit_code_from_a_real_process(tmp_path):
    """A bad key gives exit code 2 and one line on stderr from the real entry point."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim: {iteratons: 3}\n")
    done = subprocess.run([sys.executable, "-m", "ptyacc.run", str(bad)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == ("ptyacc: error: optim.iteratons: unknown key (did you mean 'iterations'?); "
                                   "allowed: iterations, stop, batch_size, grouping, loss, lr, adam_beta2, object_optimizer, "
                                   "preconditioned_step, probe_optimizer, preconditioned_probe_step, "
                                   "preconditioner_floor, preconditioner_batch_floor, lr_final_fraction, start, "
                                   "max_position_offset_fraction, on_nan, regularize, validation_fraction")


def test_readme_config_reference_is_current():
    """docs/reference/config.md holds the generated reference
    (run `ptyacc config-reference --readme docs/reference/config.md`)."""
    readme = (ROOT / "docs" / "reference" / "config.md").read_text()
    start, end = "<!-- config-reference:start -->\n", "<!-- config-reference:end -->"
    assert start in readme and end in readme
    block = readme.split(start, 1)[1].split(end, 1)[0]
    assert block == config_reference()


def test_info_reports_environment_and_derived_sampling(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["info"])
    assert result.exit_code == 0, result.output
    assert "versions: ptyacc" in result.stdout and "runtime.backend auto -> " in result.stdout
    config = write_config(tmp_path)
    result = runner.invoke(cli, ["info", str(config)])
    assert result.exit_code == 0, result.output
    # tiny_config: dx 0.3 Å, K 16 -> dk = 1 / (16 * 0.3); 80 keV, 25 mrad -> disk radius 25e-3 / lambda / dk px
    assert "dk 0.208333 1/A; dx 0.3 A; probe window 16 x 16 px = 4.8 A" in result.stdout
    assert "bright-field disk radius 2.87 px" in result.stdout


def electron_wavelength_A(energy_eV: float) -> float:
    """Relativistic de Broglie wavelength from CODATA constants (independent of ptyacc)."""
    h, m, e, c = 6.62607015e-34, 9.1093837015e-31, 1.602176634e-19, 299792458.0
    return h / np.sqrt(2 * m * e * energy_eV * (1 + e * energy_eV / (2 * m * c**2))) * 1e10


def info_lines(args: list[str]) -> tuple[list[str], list[str]]:
    result = CliRunner().invoke(cli, ["info", *args])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    return lines, [line for line in lines if line.startswith("warning: ")]


def test_info_on_a_data_file_with_a_config(tmp_path):
    """`ptyacc info data.h5 --config c.yaml`: the numbers against values computed here."""
    k, dk, energy, semiangle, defocus, step = 32, 0.05, 200e3, 10.0, 50.0, 1.0
    data_path = tmp_path / "scan.h5"
    with h5py.File(data_path, "w") as f:
        f["patterns"] = np.ones((4, 5, k, k), np.float32)
        f.attrs.update(energy_eV=energy, semiangle_mrad=semiangle, defocus_A=defocus, dk_invA=dk, scan_step_A=step)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data": {"path": "elsewhere.h5"}, "model": {"object_padding_px": 0}}))
    lines, warnings = info_lines([str(data_path), "--config", str(config)])
    text = "\n".join(lines)
    wavelength, dx = electron_wavelength_A(energy), 1 / (k * dk)
    assert f"data: {data_path}: 20 patterns of 32 x 32 px, scan 4 x 5" in text
    assert f"wavelength {wavelength:.6g} A; dk 0.05 1/A; dx 0.625 A; probe window 32 x 32 px = 20 A" in text
    # the object holds every window: the scanned span in pixels, rounded up, + K + 2 spare pixels
    rows, cols = int(np.ceil(3 * step / dx)) + k + 2, int(np.ceil(4 * step / dx)) + k + 2
    assert f"object {rows} x {cols} px = {rows * dx:.4g} x {cols * dx:.4g} A" in text
    assert "scan extent (y, x) 3 x 4 A = 4.8 x 6.4 px" in text
    radius = semiangle * 1e-3 / wavelength / dk
    assert f"bright-field disk radius {radius:.2f} px" in text
    diameter = 2 * defocus * semiangle * 1e-3 + 1.22 * wavelength / (semiangle * 1e-3)
    assert f"probe diameter {diameter:.4g} A = {diameter / dx:.3g} px" in text
    assert warnings == []

    # binning by 2 doubles dk (the object pixel stays: K halves); cropping to 12 px puts the disk
    # (radius ~8 px) beyond the detector (the window stays 1 / dk = 20 A wide); a 2000 A defocus makes
    # the probe wider than it
    lines, warnings = info_lines([str(data_path), "-c", str(config), "--set", "data.transform.bin=2"])
    assert "dk 0.1 1/A; dx 0.625 A; probe window 16 x 16 px = 10 A" in "\n".join(lines)
    lines, warnings = info_lines([str(data_path), "-c", str(config), "--set", "data.transform.crop=12",
                                  "--set", "experiment.defocus_A=2000"])
    assert any(f"the bright-field disk (radius {radius:.1f} px) is larger than the 12 x 12 detector" in w
               for w in warnings), warnings
    wide = 2 * 2000 * semiangle * 1e-3 + 1.22 * wavelength / (semiangle * 1e-3)
    assert any(f"the defocused probe ({wide:.4g} A across) is wider than the 12 x 12 px window (20 A)" in w
               for w in warnings), warnings
    assert "32 x 32 (stored" not in "\n".join(lines) and "(stored 32 x 32, data.transform)" in "\n".join(lines)


def test_info_on_a_data_file_alone_and_a_config_given_twice(tmp_path, pattern_file):
    path, _, _ = pattern_file
    lines, _ = info_lines([str(path)])
    assert f"data: {path}: 12 patterns of 8 x 8 px, scan 3 x 4" in "\n".join(lines)
    result = CliRunner().invoke(cli, ["info", "c.yaml", "--config", "d.yaml"])
    assert result.exit_code == 2 and "c.yaml is a config; give a data file with --config d.yaml" in result.output


def test_simulate_writes_a_file_that_data_path_reads_back(tmp_path):
    from ptyacc.config import load_config
    from ptyacc.data import load_data

    config = write_config(tmp_path)
    out = tmp_path / "sim.h5"
    result = CliRunner().invoke(cli, ["simulate", str(config), str(out)])
    assert result.exit_code == 0, result.output
    simulated = load_data(load_config(config))
    again = load_data(load_config({"data": {"path": str(out)}, "experiment": {"positions": {"key": "positions_A"}}}))
    np.testing.assert_allclose(again.patterns.numpy(), simulated.patterns.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(again.positions_A, simulated.positions_A)
    assert again.dx_A == simulated.dx_A and abs(again.wavelength_A / simulated.wavelength_A - 1) < 1e-9
    assert again.aberrations == simulated.aberrations
    with h5py.File(out) as f:
        assert f["ground_truth/phase"].shape == simulated.ground_truth["phase"].shape[1:]


def test_bench_reports_iteration_time_fft_bound_and_ratio(tmp_path):
    import json

    config = write_config(tmp_path)
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, ["bench", str(config), "-k", "3", "--warmup", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    for label in ("iteration", "FFT bound", "ratio", "patterns/s", "peak memory"):
        assert label in result.stdout
    report = json.loads(out.read_text())
    assert report["iterations_timed"] == 3 and len(report["s_per_iteration_all"]) == 3
    assert report["s_per_iteration"] == sorted(report["s_per_iteration_all"])[1]
    assert report["ratio"] == report["s_per_iteration"] / report["fft_bound_s"]
    assert report["patterns"] == 36 and report["batch_size"] == 8


def test_fft_bound_times_exactly_the_transforms_an_iteration_needs(monkeypatch):
    """Per pattern and mode pair: 2 (2 S - 1) transforms, plus 2 for refined positions."""
    import torch

    from ptyacc.speed import bench

    calls = []
    real_fft2, real_ifft2 = torch.fft.fft2, torch.fft.ifft2
    monkeypatch.setattr(torch.fft, "fft2", lambda x, *a, **k: calls.append(x.shape[:-2].numel()) or real_fft2(x, *a, **k))
    monkeypatch.setattr(torch.fft, "ifft2", lambda x, *a, **k: calls.append(x.shape[:-2].numel()) or real_ifft2(x, *a, **k))
    bench.fft_bound_s([8, 8, 9], probe_modes=2, object_modes=1, slices=3, k=8, shifted=False, repeats=1)
    assert sum(calls) == 25 * 2 * 1 * 2 * (2 * 3 - 1)
    calls.clear()
    bench.fft_bound_s([8, 8, 9], probe_modes=2, object_modes=3, slices=1, k=8, shifted=True, repeats=1)
    assert sum(calls) == 25 * 2 * 3 * 2 * 1 + 25 * 2 * 2
    calls.clear()  # the near field: the propagation to the detector, each way
    bench.fft_bound_s([8, 8, 9], probe_modes=2, object_modes=1, slices=1, k=8, shifted=False, repeats=1, near_field=True)
    assert sum(calls) == 25 * 2 * 1 * 2 * 2


def test_predict_runs_the_benchmark_from_a_clone_with_its_arguments_and_exit_code(tmp_path):
    """``ptyacc predict`` is the repository's benchmarks/predict.py, run with the arguments given (its
    own options and errors, its exit code), from any folder of this clone."""
    command = [sys.executable, "-c", "import sys; from ptyacc.commands.cli import main; sys.exit(main())", "predict"]
    shown = subprocess.run([*command, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert shown.returncode == 0 and "--link" in shown.stdout and "--batch-sizes" in shown.stdout, shown.stderr
    refused = subprocess.run([*command, "--processes", "two"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert refused.returncode == 2 and "expected comma-separated integers" in refused.stderr


def test_predict_outside_a_clone_says_where_it_moved_in_one_line(tmp_path, monkeypatch):
    import ptyacc.commands.cli as cli_module

    monkeypatch.setattr(cli_module, "BENCHMARKS", tmp_path / "benchmarks")  # an installed ptyacc: no benchmarks/
    result = CliRunner().invoke(cli, ["predict", "--processes", "1,2"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and "python -m benchmarks.predict" in lines[0], result.output


def test_info_save_writes_what_the_calibration_measured_and_how_to_fix_it(tmp_path, monkeypatch):
    """`ptyacc info c.yaml --save m.h5` on the own-data tutorial's file (made with the scan turned by
    9 degrees, the patterns transposed, the defocus 120 A read as 96): m.h5 holds the detector arrays,
    the calibration with its sources and the autos' values; the `--set` line it prints gives a config
    whose calibration is those values without measuring them again."""
    import shutil

    shutil.copy(ROOT / "examples" / "data" / "raw_scan.h5", tmp_path)
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(cli, ["init", "raw_scan.h5"]).exit_code == 0
    lines, _ = info_lines(["raw_scan.yaml", "--save", "m.h5"])
    said = next(line for line in lines if line.startswith("measured: written to m.h5"))
    with h5py.File(tmp_path / "m.h5") as f:
        values = yaml.safe_load(f.attrs["auto_values"])
        bad = f["detector/bad_pixels"][()]
        calibration = dict(f["calibration"].attrs)
        assert "raw_scan.h5" in f.attrs["source"] and f.attrs["report"].splitlines()[0] in lines
    assert values["data.transform.transpose"] is True and values["data.bad_pixels"] == len(bad) > 0
    assert abs(values["experiment.scan_rotation_deg"] - 9.0) < 1.0
    assert abs(values["experiment.defocus_A"] - 120.0) < 5.0
    assert calibration["defocus_A_source"] == "fitted" and calibration["defocus_A"] == values["experiment.defocus_A"]
    fixed = shlex.split(said.split("to fix these autos at these values: ")[1])  # as a shell reads them
    assert "data.transform.orientation=manual" in fixed and not any("bad_pixels" in word for word in fixed)
    again, _ = info_lines(["raw_scan.yaml", "--save", "n.h5", *fixed])
    assert not any(line.startswith("scan rotation from the centre of mass") for line in again)
    with h5py.File(tmp_path / "n.h5") as f:
        assert f["calibration"].attrs["scan_rotation_deg"] == pytest.approx(values["experiment.scan_rotation_deg"])
        assert f["calibration"].attrs["defocus_A"] == pytest.approx(values["experiment.defocus_A"])
        assert f["calibration"].attrs["scan_rotation_deg_source"] == "config"


def test_info_save_gives_flips_turned_about_the_zero_frequency_as_set_options(grid_simulator, tmp_path):
    """A scan turned by 171 degrees read out as it is: the orientation auto's flip_y and flip_x turn the
    patterns about the zero frequency (given flips reverse them unless data.transform.flip_about_zero says so);
    `--save` prints them with flip_about_zero, and the config those options make prepares the very same
    patterns (NumPy's k -> -k of the plain read) with the same rotation, measured no more."""
    from ptyacc.config import load_config
    from ptyacc.data.load import load_data

    setting = grid_simulator.Setting(detector_px=32, scan_shape=(24, 24), scan_step_A=0.5, dose=1e6, defocus_A=40.0,
                                     edge_mrad=50.0, seed=2, scan_rotation_deg=171.0)
    grid_simulator.write(str(tmp_path / "turned.h5"), setting)
    config = tmp_path / "c.yaml"
    base = {"data": {"path": str(tmp_path / "turned.h5"), "bad_pixels": "auto", "transform": {"orientation": "auto"}},
            "experiment": {"scan_rotation_deg": "auto"}}
    config.write_text(yaml.safe_dump(base))
    lines, _ = info_lines([str(config), "--save", str(tmp_path / "m.h5")])
    said = next(line for line in lines if line.startswith("measured: written to"))
    fixed = shlex.split(said.split("to fix these autos at these values: ")[1])  # as a shell reads them
    assert "data.transform.flip_about_zero=[true, true]" in fixed and "data.transform.flip_y=true" in fixed
    with h5py.File(tmp_path / "m.h5") as f:
        assert list(f["detector/flip_about_zero"][()]) == [True, True]
        assert yaml.safe_load(f.attrs["auto_values"])["data.transform.flip_about_zero"] == [True, True]
    measured = load_data(load_config(base))
    given = {key: yaml.safe_load(value) for key, value in (word.split("=", 1) for word in fixed if "=" in word)}
    transform = {key.removeprefix("data.transform."): value for key, value in given.items()
                 if key.startswith("data.transform.")}
    told = load_data(load_config({"data": {**base["data"], "transform": transform},
                                  "experiment": {"scan_rotation_deg": given["experiment.scan_rotation_deg"]}}))
    assert torch.equal(told.patterns, measured.patterns)
    np.testing.assert_array_equal(told.positions_A, measured.positions_A)
    assert not any(line.startswith("scan rotation from the centre of mass") for line in told.checks)
    plain = load_data(load_config({"data": {**base["data"], "transform": {"orientation": "manual"}},
                                   "experiment": {"scan_rotation_deg": 0.0}}))
    k = plain.patterns.numpy()  # model layout: the pattern at -k is index (-i) mod K
    np.testing.assert_array_equal(told.patterns.numpy(), np.roll(np.flip(k, (-2, -1)), 1, axis=(-2, -1)))
