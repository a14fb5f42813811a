"""`ptyacc init DATAFILE`: a commented config that runs as written when the file carries its
calibration, and names what is missing when it does not."""

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from ptyacc.commands.cli import cli
from ptyacc.commands.init_config import ASTIGMATISM_START, FOCUS_START, ROTATION_START

DEMO = Path(__file__).parents[1] / "ptyacc" / "demo" / "demo_mos2.h5"


def test_init_writes_a_config_that_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(DEMO, tmp_path / "scan.h5")
    result = CliRunner().invoke(cli, ["init", "scan.h5"])
    assert result.exit_code == 0, result.output
    assert "scan.yaml: ready: ptyacc run scan.yaml" in result.output
    text = (tmp_path / "scan.yaml").read_text()
    assert "# energy_eV: 80000   # from the file" in text
    assert "# calibration check: bright-field disk radius predicted 7.66 px" in text  # info's report, appended
    # the file's positions_A are its nominal raster: read as one, so the scan's autos apply
    assert "positions_A are a raster of 24 x 24 positions, step 0.4 A, turned 0.00 deg" in text
    assert "scan.yaml: positions: the file's positions_A are a raster of 24 x 24" in result.output  # said, too
    assert "scattering:" not in result.output  # a monolayer: not strong
    config = yaml.safe_load(text)
    assert config["data"] == {"path": "scan.h5", "key": "patterns", "bad_pixels": "auto",
                              "transform": {"orientation": "auto", "descan": "auto"}}
    assert config["optim"]["batch_size"] == "auto" and "positions" not in config["experiment"]
    assert config["experiment"]["scan_rotation_deg"] == "auto" and config["experiment"]["defocus_A"] == "auto"
    # the measured rotation is refined, as one angle; electrons' partial coherence taken by four probe modes
    assert config["model"] == {"probe_modes": 4, "scan_affine": "rotation"}
    assert config["optim"]["start"]["scan_affine"] == ROTATION_START > 0  # once the object has taken shape
    assert config["optim"]["start"]["probe_focus"] == FOCUS_START  # the measured defocus refined, with the probe
    assert config["optim"]["start"]["probe_astigmatism"] == ASTIGMATISM_START  # the beam's C12 refined, with the probe
    run = CliRunner().invoke(cli, ["run", "scan.yaml", "--quiet", "--set", f"optim.iterations={ROTATION_START + 1}",
                                   "--set", "output.figures=false"])
    assert run.exit_code == 0, run.output
    with h5py.File(tmp_path / "results" / "scan" / "results.h5") as f:  # the demo's descan moves no pattern
        assert yaml.safe_load(f.attrs["auto_values"])["optim.batch_size"] == 72  # 576 // 8
        assert abs(f["fitted/scan_turn_deg"][()]) > 0
        assert abs(f.attrs["probe_focus_change_A"]) > 0
        assert abs(f.attrs["probe_c12a_change_A"]) + abs(f.attrs["probe_c12b_change_A"]) > 0
    assert "probe focus: the run changed the defocus by" in (tmp_path / "results" / "scan" / "run.log").read_text()
    again = CliRunner().invoke(cli, ["init", "scan.h5"])
    assert again.exit_code == 2 and "scan.yaml exists; pass --force" in again.output


@pytest.mark.parametrize("pad", [((0, 0), (11, 5)), ((3, 13), (0, 0))])
def test_init_crops_patterns_that_are_not_square_to_the_square_the_beam_is_centred_in(tmp_path, monkeypatch, pad):
    """The demo's 64 x 64 patterns written into a wider (or taller) dark detector, off its centre:
    init's crop takes back exactly the demo's patterns, and the config is ready to run."""
    monkeypatch.chdir(tmp_path)
    with h5py.File(DEMO) as demo, h5py.File(tmp_path / "wide.h5", "w") as f:
        f.attrs.update(demo.attrs)
        original = demo["patterns"][()]
        f["patterns"] = np.pad(original, ((0, 0), (0, 0), *pad))
        f["positions_A"] = demo["positions_A"][()]
    result = CliRunner().invoke(cli, ["init", "wide.h5"])
    assert result.exit_code == 0, result.output
    assert "wide.yaml: ready" in result.output, result.output
    config = yaml.safe_load((tmp_path / "wide.yaml").read_text())
    transform = config["data"]["transform"]
    assert transform["crop"] == 64 and transform["crop_offset"] == [pad[0][0], pad[1][0]]
    assert transform["orientation"] == "auto" and transform["descan"] == "auto"  # the other entries kept
    from ptyacc.config import load_config
    from ptyacc.data import load_data

    prepared = load_config("wide.yaml", overrides=["data.bad_pixels=off", "data.transform.descan=off",
                                                   "data.transform.orientation=manual"])
    held = np.fft.fftshift(load_data(prepared).patterns.numpy(), axes=(-2, -1))  # zero frequency back at the centre
    np.testing.assert_array_equal(held, original.reshape(576, 64, 64))


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


def test_init_lists_the_candidate_datasets_and_takes_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with h5py.File(DEMO) as demo, h5py.File(tmp_path / "two.h5", "w") as f:
        f["raw/frames"] = demo["patterns"][()]
        f["processed/dark"] = np.zeros((2, 64, 64), np.float32)
        f.attrs.update({k: v for k, v in demo.attrs.items() if k != "scan_shape"})
    listed = CliRunner().invoke(cli, ["init", "two.h5"])
    assert listed.exit_code == 2
    assert "several datasets could hold the patterns (processed/dark, raw/frames)" in listed.output
    assert "processed/dark (2, 64, 64) float32, raw/frames (24, 24, 64, 64) uint16" in listed.output
    assert "--key" in listed.output and not (tmp_path / "two.yaml").exists()
    chosen = CliRunner().invoke(cli, ["init", "two.h5", "--key", "raw/frames"])
    assert chosen.exit_code == 0, chosen.output
    assert "ready: ptyacc run two.yaml" in chosen.output
    assert yaml.safe_load((tmp_path / "two.yaml").read_text())["data"]["key"] == "raw/frames"


def py4dstem_file(path: Path, q_units: str = "A^-1", r_units: str = "nm") -> None:
    """The demo's patterns in py4DSTEM's EMD 1.0 layout (a root group, the data cube's 'data'
    and dim vectors, the root's metadatabundle/calibration as scalar datasets), bare of ptyacc's
    attributes but energy and semi-angle."""
    with h5py.File(DEMO) as demo, h5py.File(path, "w") as f:
        f.attrs.update(emd_group_type="file", version_major=1, version_minor=0, energy_eV=80e3, semiangle_mrad=25.0)
        root = f.create_group("root")
        root.attrs.update(emd_group_type="root", python_class="Root")
        cube = root.create_group("datacube")
        cube.attrs.update(emd_group_type="array", python_class="DataCube")
        cube["data"] = demo["patterns"][()]
        for i, n in enumerate(cube["data"].shape):
            cube[f"dim{i}"] = np.arange(n, dtype=np.float64)
        calibration = root.create_group("metadatabundle/calibration")
        calibration.attrs.update(emd_group_type="metadata", python_class="Calibration")
        calibration["Q_pixel_size"] = 0.078125 * (10 if q_units == "nm^-1" else 1)
        calibration["R_pixel_size"] = 0.04 if r_units == "nm" else 0.4
        for name, units in (("Q_pixel_units", q_units), ("R_pixel_units", r_units)):
            calibration[name] = units.encode()


def test_init_reads_py4dstems_calibration(tmp_path, monkeypatch):
    from ptyacc.data.readers import inspect_patterns

    monkeypatch.chdir(tmp_path)
    py4dstem_file(tmp_path / "cube.h5", "nm^-1", "nm")
    attrs = inspect_patterns(tmp_path / "cube.h5").attrs
    assert attrs["dk_invA"] == 0.078125 and attrs["scan_step_A"] == 0.4  # 0.78125 1/nm, 0.04 nm
    result = CliRunner().invoke(cli, ["init", "cube.h5"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "cube.yaml").read_text()
    assert "# dk_invA: 0.078125   # from the file" in text and "# scan_step_A: 0.4   # from the file" in text
    assert "key: root/datacube/data" in text
    assert "# calibration check: bright-field disk radius predicted 7.66 px" in text
    py4dstem_file(tmp_path / "pixels.h5", "pixels", "pixels")  # not calibrated yet: asked for
    assert "dk_invA" not in inspect_patterns(tmp_path / "pixels.h5").attrs


def test_init_says_on_the_terminal_that_a_strongly_scattering_sample_wants_slices(tmp_path, monkeypatch):
    """abTEM's SrTiO3 10 unit cells thick: run on the one slice init leaves, its phase correlates with the truth at
    -0.07 (benchmarks/records/2026-12-06-thick-crystal-deviance.md); init cannot know the thickness, so it says so."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(Path(__file__).parent / "data" / "abtem" / "sto_untilted.h5", tmp_path / "thick.h5")
    result = CliRunner().invoke(cli, ["init", "thick.h5"])
    assert result.exit_code == 0, result.output
    said = [line for line in result.output.splitlines() if "scattering:" in line]
    assert len(said) == 1 and "of the counts beyond the bright-field disk (over 4%: strong" in said[0]
    assert "give it model.slices and model.slice_thickness_A" in said[0]
