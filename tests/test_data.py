"""Reading HDF5 patterns and positions, calibration from file attributes, results round trip."""

from pathlib import Path

import h5py
import numpy as np
import pytest

from ptyacc.config import load_config
from ptyacc.data import load_data
from ptyacc.data.positions import raster_positions_A
from ptyacc.errors import ConfigError, DataError
from ptyacc.results.h5file import Results, load_results, save_results


def config_for(path, **data):
    return load_config({"data": {"path": str(path), **data}})


def test_4d_file_with_attributes_needs_no_other_keys(pattern_file):
    """Patterns come back ifftshifted (zero frequency at [0, 0]); calibration from attributes."""
    path, patterns, _ = pattern_file
    data = load_data(config_for(path))
    expected = np.fft.ifftshift(patterns.reshape(12, 8, 8), axes=(-2, -1))
    np.testing.assert_array_equal(data.patterns.numpy(), expected)
    assert data.scan_shape == (3, 4)
    assert data.dx_A == pytest.approx(1 / (8 * 0.25))
    assert data.aberrations == {"C10": -10.0}
    np.testing.assert_allclose(data.positions_A, raster_positions_A((3, 4), 0.5))
    assert data.positions_A[1].tolist() == [0.0, 0.5]  # fast axis is x


def test_config_values_override_file_attributes(pattern_file):
    path, _, _ = pattern_file
    config = load_config({"data": {"path": str(path)}, "experiment": {"dx_A": 0.1, "defocus_A": -5.0}})
    data = load_data(config)
    assert data.dx_A == 0.1 and data.aberrations == {"C10": 5.0}


def test_3d_patterns_with_positions_from_file_and_transform(tmp_path, pattern_file):
    """(N, K, K) patterns, positions from a named dataset, transpose then flip_y."""
    _, patterns4, positions = pattern_file
    path = tmp_path / "three.h5"
    patterns = patterns4.reshape(12, 8, 8)
    with h5py.File(path, "w") as f:
        f["frames"] = patterns
        f["probe_xy"] = positions * 2
    config = load_config({"data": {"path": str(path), "transform": {"transpose": True, "flip_y": True}},
                          "experiment": {"energy_eV": 3e5, "dk_invA": 0.1, "positions": {"key": "probe_xy"}}})
    data = load_data(config)
    expected = np.fft.ifftshift(patterns.transpose(0, 2, 1)[:, ::-1, :], axes=(-2, -1))
    np.testing.assert_array_equal(data.patterns.numpy(), expected)
    np.testing.assert_array_equal(data.positions_A, positions * 2)


@pytest.mark.parametrize("experiment", [{"positions": {"key": "positions_A"}},
                                        {"positions": {"key": "positions_A"}, "dk_from_bright_field": True}])
def test_the_data_file_is_opened_once(pattern_file, monkeypatch, experiment):
    """Format, shape, attributes, mask, positions, a sample for the bright-field fit and the
    patterns all come through one open file."""
    path, patterns, _ = pattern_file
    with h5py.File(path, "a") as f:  # a bright-field disk of radius 2 px, so that the fit finds one
        disk = (np.hypot(*np.indices((8, 8)) - 4.0) <= 2.0) * 100.0
        f["patterns"][...] = patterns + disk
    opened, init = [], h5py.File.__init__

    def spy(self, name, *args, **kwargs):
        if isinstance(name, (str, Path)):  # h5py also wraps already open files (a FileID) in File objects
            opened.append(str(name))
        init(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.File, "__init__", spy)
    load_data(load_config({"data": {"path": str(path)}, "experiment": experiment}))
    assert opened == [str(path)]


def test_raster_positions_rotation():
    """Rotating by 90 degrees turns the fast (x) axis into +y."""
    pos = raster_positions_A((1, 2), 1.0, 90.0)
    np.testing.assert_allclose(pos[1], [1.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("setup, message", [
    ("missing", "data file not found"),
    ("not_hdf5", "cannot be read as HDF5"),
    ("wrong_key", "no dataset 'nope' (data.key)"),
    ("ambiguous", "several datasets could hold the patterns (a, b)"),
    ("2d", "expected 3D (N, ky, kx) or 4D"),
    ("nan", "NaN/Inf pattern values"),
    ("scan_mismatch", "data.scan_shape: [5, 5] gives 25 positions but the data has 12 patterns"),
    ("positions_count", "12 positions for 6 patterns"),
    ("no_energy", "experiment.energy_eV: needed"),
])
def test_bad_data_names_file_and_problem(tmp_path, setup, message):
    path = tmp_path / "bad.h5"
    data_keys: dict = {}
    exp = {"energy_eV": 8e4, "dk_invA": 0.1, "scan_step_A": 1.0}
    if setup == "not_hdf5":
        path.write_text("hello")
    elif setup != "missing":
        with h5py.File(path, "w") as f:
            if setup == "wrong_key":
                f["patterns"] = np.ones((4, 8, 8))
                data_keys["key"] = "nope"
            elif setup == "ambiguous":
                f["a"] = np.ones((4, 8, 8))
                f["b"] = np.ones((4, 8, 8))
            elif setup == "2d":
                f["patterns"] = np.ones((8, 8))
            elif setup == "nan":
                f["patterns"] = np.full((2, 2, 8, 8), np.nan)
            elif setup == "scan_mismatch":
                f["patterns"] = np.ones((12, 8, 8))
                data_keys["scan_shape"] = [5, 5]
            elif setup == "positions_count":
                f["patterns"] = np.ones((6, 8, 8))
                f["positions_A"] = np.zeros((12, 2))
                exp["positions"] = {"key": "positions_A"}
            elif setup == "no_energy":
                f["patterns"] = np.ones((2, 2, 8, 8))
                exp.pop("energy_eV")
    config = load_config({"data": {"path": str(path), **data_keys}, "experiment": exp})
    with pytest.raises((DataError, ConfigError)) as info:
        load_data(config)
    assert message in str(info.value)
    if setup not in ("scan_mismatch", "no_energy"):
        assert str(path) in str(info.value)


def test_negative_values_clipped_or_refused(tmp_path):
    path = tmp_path / "neg.h5"
    with h5py.File(path, "w") as f:
        f["patterns"] = -np.ones((2, 2, 8, 8))
    exp = {"energy_eV": 8e4, "dk_invA": 0.1, "scan_step_A": 1.0}
    data = load_data(load_config({"data": {"path": str(path)}, "experiment": exp}))
    assert float(data.patterns.min()) == 0.0
    with pytest.raises(DataError, match="negative pattern values"):
        load_data(load_config({"data": {"path": str(path), "negative": "error"}, "experiment": exp}))


def test_results_round_trip(tmp_path):
    """save_results then load_results returns the same arrays and attributes."""
    rng = np.random.default_rng(1)
    obj = (rng.normal(size=(2, 3, 5, 6)) + 1j * rng.normal(size=(2, 3, 5, 6))).astype(np.complex64)
    probe = (rng.normal(size=(2, 4, 4)) + 1j * rng.normal(size=(2, 4, 4))).astype(np.complex64)
    results = Results(object=obj, probe=probe, positions_A=rng.normal(size=(7, 2)), loss=np.array([3.0, 2.0]),
                      dx_A=0.25, origin_A=(-1.5, -2.0), attrs={"world_size": 2, "config": "optim: {}\n"})
    path = tmp_path / "r" / "results.h5"
    save_results(path, results)
    back = load_results(path)
    np.testing.assert_array_equal(back.object, obj)
    np.testing.assert_array_equal(back.probe, probe)
    np.testing.assert_array_equal(back.positions_A, results.positions_A)
    np.testing.assert_array_equal(back.loss, results.loss)
    assert back.dx_A == 0.25 and back.origin_A == (-1.5, -2.0)
    assert back.attrs["world_size"] == 2 and back.config == {"optim": {}}
    assert [p.name for p in path.parent.iterdir()] == ["results.h5"]  # no temporary left behind
    with pytest.raises(DataError, match="not a ptyacc results file"):
        with h5py.File(tmp_path / "other.h5", "w") as f:
            f["x"] = 1
        load_results(tmp_path / "other.h5")


def test_reading_only_some_rows(pattern_file):
    """`keep` selects the patterns to read; the others never enter memory."""
    path, patterns, positions = pattern_file
    keep = lambda pos: np.array([1, 5, 6, 11])  # noqa: E731
    data = load_data(config_for(path), keep)
    expected = np.fft.ifftshift(patterns.reshape(12, 8, 8)[[1, 5, 6, 11]], axes=(-2, -1))
    np.testing.assert_array_equal(data.patterns.numpy(), expected)
    assert data.n_patterns == 12 and data.pattern_rows.tolist() == [1, 5, 6, 11]


@pytest.mark.parametrize("radiation", ["xray", "electron"])
def test_xray_results_also_in_metres(tmp_path, radiation):
    """An X-ray run's results.h5 carries positions_m, dx_m and origin_m = the Å values x 1e-10
    beside them; an electron run's only the Å ones."""
    import ptyacc

    experiment = {"energy_eV": 8000.0, "dx_A": 400.0, "scan_step_A": 1200.0}
    if radiation == "xray":
        experiment.update(radiation="xray")
    else:
        experiment.update(energy_eV=80e3, dx_A=0.3, scan_step_A=0.9, semiangle_mrad=25.0)
    config = ptyacc.load_config({"data": {"simulate": {"scan_shape": [3, 3], "detector_px": 16, "atoms": 4}},
                                 "experiment": experiment, "optim": {"iterations": 1, "batch_size": 9},
                                 "output": {"dir": str(tmp_path / "out"), "figures": False},
                                 "runtime": {"progress": False}})
    ptyacc.reconstruct(config)
    with h5py.File(tmp_path / "out" / "results.h5") as f:
        if radiation == "electron":
            assert "positions_m" not in f and "dx_m" not in f.attrs and "origin_m" not in f.attrs
            return
        np.testing.assert_allclose(f["positions_m"][()], f["positions_A"][()] * 1e-10, rtol=1e-15)
        assert f.attrs["dx_m"] == pytest.approx(f.attrs["dx_A"] * 1e-10, rel=1e-15)
        np.testing.assert_allclose(f.attrs["origin_m"], f.attrs["origin_A"] * 1e-10, rtol=1e-15)
        assert f.attrs["dx_A"] == pytest.approx(400.0)


@pytest.mark.parametrize("radiation, unit, per_A", [("xray", "µm", 1e-4), ("electron", "Å", 1.0)])
def test_figure_axes_in_micrometres_for_xray(tmp_path, monkeypatch, radiation, unit, per_A):
    """The object-phase figure's axes: µm for X-ray results (a 20 µm field is not read in Å),
    Å for electron results; the image extent follows the unit."""
    import yaml

    from ptyacc.results import figures as drawn

    results = Results(object=np.ones((1, 1, 10, 20), np.complex64), probe=np.ones((1, 4, 4), np.complex64),
                             positions_A=np.array([[3000.0, 4000.0], [5000.0, 6000.0]]), loss=np.array([2.0, 1.0]),
                             dx_A=1000.0, origin_A=(100.0, 200.0),
                             attrs={"config": yaml.safe_dump({"experiment": {"radiation": radiation}})})
    figures = []
    monkeypatch.setattr(drawn, "_save", lambda fig, path: figures.append(fig) or path)
    drawn.save_figures(tmp_path, results)
    ax = figures[0].axes[0]
    assert ax.get_xlabel() == f"x ({unit})" and ax.get_ylabel() == f"y ({unit})"
    np.testing.assert_allclose(ax.images[0].get_extent(), np.array([200.0, 20200.0, 10100.0, 100.0]) * per_A)


def test_overrides_are_told_on_the_terminal_in_run_log_and_by_info(pattern_file, tmp_path, capsys):
    """A config value that replaces the file's (within a factor of a correction) runs, and says so."""
    import yaml

    from ptyacc.commands.cli import main

    path, _, _ = pattern_file
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data": {"path": str(path)}, "experiment": {"energy_eV": 300e3},
                                      "optim": {"iterations": 1, "batch_size": 12},
                                      "output": {"dir": str(tmp_path / "out"), "figures": False},
                                      "runtime": {"progress": False}}))
    line = f"override: experiment.energy_eV 300000 overrides 80000 from {path} (energy_eV)"
    assert main(["run", str(config)]) == 0
    assert f"ptyacc: {line}\n" in capsys.readouterr().err
    assert line in (tmp_path / "out" / "run.log").read_text()
    assert main(["info", str(config)]) == 0
    assert line in capsys.readouterr().out.splitlines()


def test_empad_scan_shape_of_the_name_against_the_config(tmp_path):
    """The scan shape an EMPAD name carries (x fast, y slow) is the file's own: data.scan_shape
    replaces it as an override, and must still account for every frame."""
    frames = np.zeros((12, 130, 128), "<f4")
    frames[:, :128] = np.random.default_rng(0).poisson(5.0, (12, 128, 128))
    path = tmp_path / "scan_x4_y3.raw"
    frames.tofile(path)
    experiment = {"energy_eV": 80e3, "dk_invA": 0.01, "scan_step_A": 1.0}
    data = load_data(load_config({"data": {"path": str(path)}, "experiment": experiment}))
    assert data.scan_shape == (3, 4) and data.overrides == ()
    data = load_data(load_config({"data": {"path": str(path), "scan_shape": [2, 6]}, "experiment": experiment}))
    assert data.scan_shape == (2, 6) and data.positions_A[-1].tolist() == [1.0, 5.0]
    assert data.overrides == (f"data.scan_shape [2, 6] overrides [3, 4] from {path} (scan_shape)",)
