"""`ptyacc init --from-ptyrad`: a PtyRAD 1.0 params file made a ptyacc config. Each mapped value is
checked, and the geometry the config gives (positions in px, the probe from the optics, the object's
size, the prepared patterns) against what PtyRAD's own loader made of the same params file
(tests/data/ptyrad_geometry.npz, recorded by tests/ptyrad_reference.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

DATA = Path(__file__).parent / "data"
SCAN, K, STEP_A, DK_INVA, ENERGY_EV, SEMIANGLE, DEFOCUS_A = (5, 7), 32, 0.9, 0.057, 80e3, 21.4, 60.0

# a params file in PtyRAD's schema using what run_ptyrad.py's leaves out (tests/ptyrad_reference.py
# records PtyRAD's loader on it)
OWN_PARAMS = """
init_params:
  probe_kv: 80
  probe_conv_angle: 21.4
  probe_aberrations: {defocus: 40, A1: 12, A1phi: 30, B2: 300, B2phi: 10}
  meas_Npix: 32
  pos_N_scan_slow: 5
  pos_N_scan_fast: 7
  pos_scan_step_size: 0.9
  meas_calibration: {mode: kMax, value: 0.912}
  meas_reshape: [35, 32, 32]
  meas_flipT: [1, 0, 1]
  meas_crop: [null, null, [3, 31], [2, 30]]
  pos_scan_affine: [1.02, 0, 12, 0]
  pos_scan_rand_std: null
  probe_pmode_max: 3
  probe_pmode_init_pows: [0.05]
  obj_Nlayer: 3
  obj_slice_thickness: 4
  tilt_params: {tilt_type: all, init_tilts: [[1.5, -2.0]]}
  meas_params: {path: ptyrad_sim.h5, key: patterns}
  random_seed: 3
model_params:
  update_params:
    obja: {start_iter: 1, lr: 1.0e-3}
    objp: {start_iter: 1, lr: 1.0e-3}
    probe: {start_iter: 2, lr: 1.0e-4}
    probe_pos_shifts: {start_iter: 3, lr: 1.0e-3}
    obj_tilts: {start_iter: 5, lr: 0.02}
    slice_thickness: {start_iter: 6, lr: 0.1}
loss_params:
  loss_single: {state: false}
  loss_poissn: {state: true, weight: 1.0, dp_pow: 1.0}
constraint_params:
  obj_rblur: {start_iter: 1, step: 1, end_iter: null, obj_type: both, kernel_size: 5, std: 0.5}
  obj_zblur: {start_iter: 1, step: 1, end_iter: null, obj_type: both, kernel_size: 5, std: 0.7}
  obja_thresh: {start_iter: 1, step: 1, end_iter: null, relax: 0, thresh: [0.9, 1.1]}
  probe_mask_k: {start_iter: 1, step: 1, end_iter: null, radius: 0.3, width: 0.05, power_thresh: 0.95}
  kr_filter: {start_iter: 1, step: 1, end_iter: null, obj_type: both, radius: 0.15, width: 0.05}
recon_params:
  NITER: 9
  BATCH_SIZE: {size: 16, grad_accumulation: 2}
  GROUP_MODE: hilbert
  SAVE_ITERS: null
  output_dir: out
"""


def write_dataset(path: Path) -> Path:
    """The small dataset both params files name (ptyacc's HDF5 layout; NumPy and h5py only, so
    that tests/ptyrad_reference.py makes the same one): a bright-field disk of the semi-angle and
    a spot off both axes, so that every flip and transpose shows, varying along the scan."""
    wavelength = 12.2643 / np.sqrt(ENERGY_EV * (1 + 0.978476e-6 * ENERGY_EV))
    radius = SEMIANGLE * 1e-3 / wavelength / DK_INVA
    ky, kx = np.mgrid[:K, :K] - K // 2
    disk = np.clip(radius + 0.5 - np.hypot(ky, kx), 0, 1) * 1000.0
    spot = 300.0 * np.exp(-((ky + 11) ** 2 + (kx - 6) ** 2) / 3.0)
    weights = 1 + 0.1 * np.arange(SCAN[0] * SCAN[1]).reshape(SCAN)
    patterns = (disk + spot)[None, None] * weights[..., None, None] + 1.0
    y, x = np.meshgrid(np.arange(SCAN[0]) * STEP_A, np.arange(SCAN[1]) * STEP_A, indexing="ij")
    with h5py.File(path, "w") as f:
        f["patterns"] = patterns.astype(np.float32)
        f["positions_A"] = np.stack([y.ravel(), x.ravel()], axis=1)
        f.attrs.update(energy_eV=ENERGY_EV, semiangle_mrad=SEMIANGLE, defocus_A=DEFOCUS_A, scan_step_A=STEP_A,
                       dk_invA=DK_INVA, dx_A=1 / (K * DK_INVA))
    return path


def converted(tmp_path: Path, name: str, **options):
    """The Conversion of tests/data/ptyrad_<name>_params.yaml, the dataset beside it, and the
    config written and loaded by ptyacc."""
    import ptyacc
    from ptyacc.interop.ptyrad_params import convert
    from ptyacc.interop.ptyrad_schema import config_text, load_ptyrad_params

    write_dataset(tmp_path / "ptyrad_sim.h5")
    params_path = shutil.copy(DATA / f"ptyrad_{name}_params.yaml", tmp_path)
    conversion = convert(load_ptyrad_params(Path(params_path)), tmp_path, **options)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(config_text(conversion, Path(params_path)))
    return conversion, ptyacc.load_config(config_path)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # PtyRAD reads the data path relative to the working directory
    return tmp_path


def test_the_benchmark_params_map_each_value(in_tmp):
    conversion, config = converted(in_tmp, "bench")
    e, m, o = config.experiment, config.model, config.optim
    assert Path(config.resolve_input(config.data.path)).resolve() == (in_tmp / "ptyrad_sim.h5").resolve()
    assert config.data.key == "patterns" and config.data.scan_shape == list(SCAN)
    assert (e.energy_eV, e.semiangle_mrad, e.defocus_A, e.dk_invA, e.scan_step_A) == (ENERGY_EV, SEMIANGLE, DEFOCUS_A,
                                                                                      DK_INVA, STEP_A)
    assert e.aberrations == {} and e.scan_rotation_deg == 0 and e.tilt_mrad == [0.0, 0.0]
    assert (m.probe_modes, m.probe_mode_power, m.object_modes, m.slices, m.slice_thickness_A) == (2, 0.02, 1, 1, 2.0)
    assert m.orthogonalize_probe and config.runtime.seed == 42
    assert (o.start.object, o.start.probe, o.start.positions, o.start.tilt) == (0, 0, None, None)
    assert (o.iterations, o.batch_size, o.grouping, o.loss) == (7, 32, "random", "amplitude")
    assert (o.regularize.lateral_blur_px, o.regularize.depth_blur_slices) == (0.4, 0.0)
    assert config.data.transform.crop is None and not config.data.transform.transpose
    unmapped = {path: value for path, value, _ in conversion.unmapped}
    assert unmapped["model_params.update_params.objp.lr"] == 5e-3
    assert unmapped["init_params.meas_normalization.mode"] == "max_at_one"
    assert "constraint_params.fix_probe_int" in unmapped


def test_a_params_file_with_flips_crop_affine_and_tilts_maps_each_value(in_tmp):
    conversion, config = converted(in_tmp, "own")
    e, m, o, t = config.experiment, config.model, config.optim, config.data.transform
    # [flipud, fliplr, transpose] = [1, 0, 1]: flipud then transpose = transpose then flip_x; the crop
    # rows [3, 31] x columns [2, 30] of the flipped frame are rows [2, 30] x columns [3, 31] stored
    assert (t.transpose, t.flip_y, t.flip_x, t.crop, t.crop_offset) == (True, False, True, 28, [2, 3])
    wavelength = 12.2643 / np.sqrt(ENERGY_EV * (1 + 0.978476e-6 * ENERGY_EV))
    assert e.dk_invA == pytest.approx(2 * 0.912 / 32) and e.defocus_A == 40.0
    assert e.aberrations == pytest.approx({"C12a": 12 * np.cos(np.radians(60)), "C12b": 12 * np.sin(np.radians(60)),
                                           "C21a": 900 * np.cos(np.radians(10)), "C21b": 900 * np.sin(np.radians(10))})
    assert e.scan_step_A == pytest.approx(0.9 * 1.02) and e.scan_rotation_deg == -12.0
    assert e.tilt_mrad == [-1.5, 2.0]
    assert (m.probe_modes, m.probe_mode_power, m.slices, m.slice_thickness_A) == (3, 0.05, 3, 4.0)
    assert m.object_amplitude_bounds == [0.9, 1.1] and m.detector_blur_px == 0.6  # PtyRAD's detector_blur_std
    assert m.recenter.probe_mask_mrad == pytest.approx(0.3 * 28 * e.dk_invA / 2 * wavelength * 1e3, rel=1e-3)
    assert (o.start.object, o.start.probe, o.start.positions, o.start.tilt, o.start.slice_thickness) == (0, 1, 2, 4, 5)
    assert (o.lr.positions, o.lr.tilt, o.lr.slice_thickness) == (1e-3, 0.02, pytest.approx(0.1 / 4))
    assert (o.iterations, o.batch_size, o.grouping, o.loss, config.output.save_every) == (9, 32, "compact", "poisson", 0)
    assert (o.regularize.lateral_blur_px, o.regularize.depth_blur_slices) == (0.5, 0.7)
    assert config.runtime.seed == 3 and o.object_optimizer == "auto"
    unmapped = {path for path, _, _ in conversion.unmapped}
    assert {"constraint_params.kr_filter", "model_params.update_params.objp.lr"} <= unmapped
    steps, _ = converted(in_tmp, "own", adam_steps=True)
    assert steps.get("optim.lr.object") == 1e-3 and steps.get("optim.object_optimizer") == "adam"


@pytest.mark.parametrize("name", ["bench", "own"])
def test_the_geometry_is_the_one_ptyrads_loader_makes(in_tmp, name):
    """Positions (px), pixel size, the prepared patterns' mean, the probe from the optics and the
    object's size, against PtyRAD's loader on the same params file and data, on the detector's own
    pixel as PtyRAD samples it (``data.transform.upsample: 1``; auto takes 2 where a tilt acts on
    several slices, as the own params file's does)."""
    import dataclasses

    from ptyacc.config import resolved_upsample
    from ptyacc.data.load import load_data
    from ptyacc.physics import stem_probe
    from ptyacc.physics.geometry import ObjectGeometry

    reference = np.load(DATA / "ptyrad_geometry.npz")
    _, config = converted(in_tmp, name)
    assert resolved_upsample(config)[0] == (2 if name == "own" else 1)  # the own params file tilts its slices
    config = dataclasses.replace(config, data=dataclasses.replace(
        config.data, transform=dataclasses.replace(config.data.transform, upsample=1)))
    data = load_data(config)
    k = data.detector_px
    assert data.dx_A == pytest.approx(float(reference[f"{name}_dx_A"]), rel=1e-6)
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, k, config.model.object_padding_px)
    theirs = reference[f"{name}_positions_px"] + k // 2  # the window's corner -> the probe's centre
    np.testing.assert_allclose(geometry.positions_px - geometry.positions_px.mean(0), theirs - theirs.mean(0), atol=1e-4)
    mean = np.fft.fftshift(data.patterns.numpy().mean(0))
    their_mean = reference[f"{name}_mean_pattern"]
    np.testing.assert_allclose(mean / mean.max(), their_mean / their_mean.max(), atol=1e-5)
    their_probe = reference[f"{name}_probe"][0]
    k_invA = np.fft.fftfreq(k, d=1 / (k * data.dk_invA))
    sharp = torch.from_numpy(np.hypot(k_invA[:, None], k_invA[None, :]) <= SEMIANGLE * 1e-3 / data.wavelength_A)

    def overlap(aberrations: dict, aperture: torch.Tensor | None) -> float:
        ours = stem_probe(k, data.dk_invA, data.wavelength_A, data.semiangle_mrad, aberrations,
                          aperture_values=aperture).numpy()
        return abs(np.vdot(their_probe, ours)) / (np.linalg.norm(their_probe) * np.linalg.norm(ours))

    assert overlap(data.aberrations, sharp) > 0.9999  # PtyRAD's sharp aperture edge
    assert overlap(data.aberrations, None) > 0.98  # ptyacc's one-pixel ramp at the edge
    assert overlap({key: -value for key, value in data.aberrations.items()}, sharp) < 0.98
    their_shape = reference[f"{name}_object_shape"][-2:]
    assert np.all(np.asarray(geometry.shape) >= their_shape) and np.all(np.asarray(geometry.shape) <= their_shape + 3)


def test_aberration_notations():
    from ptyacc.interop.aberrations import krivanek_cartesian

    assert krivanek_cartesian({"C10": -5, "C12": 10, "phi12": 45, "Cs": 1e4}) == pytest.approx(
        {"C10": -5.0, "C12a": 0.0, "C12b": 10.0, "C30": 1e4}, abs=1e-12)
    assert krivanek_cartesian({"C1": 3, "S3": 2, "S3phi": 0, "C23a": 1, "C23b": -1}) == pytest.approx(
        {"C10": 3.0, "C32a": 8.0, "C23a": 1.0, "C23b": -1.0})
    assert krivanek_cartesian({"defocus": 100}) == {"C10": -100.0}
    for bad in ({"C11": 1}, {"C10a": 1}, {"Q7": 1}, {"C12a": 1, "C12": 2}):
        with pytest.raises(ValueError):
            krivanek_cartesian(bad)


def test_the_cli_writes_the_config_and_lists_what_has_no_counterpart(in_tmp):
    from click.testing import CliRunner

    from ptyacc.commands.cli import cli

    write_dataset(in_tmp / "ptyrad_sim.h5")
    params = shutil.copy(DATA / "ptyrad_own_params.yaml", in_tmp)
    result = CliRunner().invoke(cli, ["init", "--from-ptyrad", str(params), "-o", "c.yaml"])
    assert result.exit_code == 0, result.output
    text = (in_tmp / "c.yaml").read_text()
    assert "#   constraint_params.kr_filter: {" in text and "obj_type: both" in text
    assert "#   model_params.update_params.objp.lr: 0.001" in text
    again = CliRunner().invoke(cli, ["init", "--from-ptyrad", str(params), "-o", "c.yaml"])
    assert again.exit_code != 0 and "exists" in again.output
    both = CliRunner().invoke(cli, ["init", str(in_tmp / "ptyrad_sim.h5"), "--from-ptyrad", str(params)])
    assert both.exit_code != 0 and "one of them" in both.output


def test_the_converted_config_reconstructs_as_well_as_ptyaccs_own(in_tmp):
    """On noise-free data simulated by ptyacc (a file with its ground truth), run_ptyrad.py's params
    for that data, converted, reach the NCC with the truth of the config `ptyacc init` writes for the
    same file within 0.005 (same iterations and batch)."""
    import yaml

    import ptyacc
    from ptyacc.commands.init_config import init_config
    from ptyacc.data.export import write_dataset as write_ptyacc_dataset
    from ptyacc.data.load import load_data
    from ptyacc.interop.ptyrad_params import convert
    from ptyacc.interop.ptyrad_schema import config_text
    from ptyacc.results.quality import best_shift_ncc

    simulated = ptyacc.load_config({"data": {"simulate": {"scan_shape": [10, 10], "detector_px": 32}},
                                    "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 30.0,
                                                   "scan_step_A": 0.5, "dk_invA": 0.06}})
    data = load_data(simulated)
    write_ptyacc_dataset(in_tmp / "sim.h5", data)
    params = yaml.safe_load((DATA / "ptyrad_bench_params.yaml").read_text())
    params["init_params"].update(probe_kv=80.0, probe_conv_angle=25.0, probe_aberrations={"C10": -30.0}, meas_Npix=32,
                                 pos_N_scans=100, pos_N_scan_slow=10, pos_N_scan_fast=10, pos_scan_step_size=0.5,
                                 meas_calibration={"mode": "dk", "value": 0.06}, meas_reshape=None,
                                 meas_params={"path": "sim.h5", "key": "patterns"})
    params["recon_params"].update(NITER=12, output_dir="converted")
    (in_tmp / "converted.yaml").write_text(config_text(convert(params, in_tmp), in_tmp / "ptyrad.yaml"))
    own = yaml.safe_load(init_config(in_tmp / "sim.h5", in_tmp / "own.yaml"))
    own["optim"].update(iterations=12, batch_size=32)
    truth, scores = data.ground_truth, {}
    frame = np.asarray(truth["geometry"].origin_A)
    for name, config in (("converted", ptyacc.load_config(in_tmp / "converted.yaml")),
                         ("own", ptyacc.load_config({**own, "data": {"path": str(in_tmp / "sim.h5")}}))):
        config.runtime.progress = False
        results = ptyacc.reconstruct(config, write=False).results
        scores[name], _ = best_shift_ncc(results.phase, np.asarray(results.origin_A) - frame, results.dx_A,
                                         data.positions_A - frame, truth["phase"].sum(0))
    assert scores["own"] > 0.9
    assert scores["converted"] > scores["own"] - 0.005, scores


def test_a_file_that_is_not_ptyrads_params_is_refused_in_one_line(in_tmp):
    from click.testing import CliRunner

    from ptyacc.commands.cli import cli

    (in_tmp / "other.yaml").write_text("data: {path: x.h5}\n")
    result = CliRunner().invoke(cli, ["init", "--from-ptyrad", str(in_tmp / "other.yaml")])
    assert result.exit_code != 0 and "other.yaml: not a PtyRAD params file (no init_params section)" in result.output
    assert "Traceback" not in result.output and not (in_tmp / "other_ptyacc.yaml").exists()


def test_a_required_setting_missing_is_named(in_tmp):
    import yaml

    from ptyacc.errors import ConfigError
    from ptyacc.interop.ptyrad_params import convert

    params = yaml.safe_load(OWN_PARAMS)
    del params["init_params"]["pos_scan_step_size"]
    with pytest.raises(ConfigError, match="init_params.pos_scan_step_size: missing"):
        convert(params, in_tmp)
