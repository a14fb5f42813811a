"""X-ray near field: the holograms' motion on the detector as the sample moves gives the geometry (the patterns
move at all: near field), the magnification (experiment.focus_to_sample_m: auto) and the detector's transpose/flips
and rotation against the stage. The holograms here are made with NumPy alone (a structured beam, a smooth object,
the exact angular-spectrum propagator), the stage's frame turned and the detector read out in each of the eight
orientations; the PETRA III file is measured data."""

import importlib.util
import math
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

import ptyacc
from ptyacc.commands.init_config import NEAR_FIELD_POSITIONS_START, XRAY_FOCUS_START, init_config
from ptyacc.config import load_config
from ptyacc.data.hologram_motion import FOCUS_OFF, motion_from_patterns, near_field_geometry
from ptyacc.data.load import load_data
from ptyacc.errors import DataError
from ptyacc.results.quality import placed_ncc

ROOT = Path(__file__).resolve().parents[1]
PETRA = ROOT / "examples" / "data" / "PETRAIII_P25_Near_Field_Ptycho.cxi"
FLAGS = [(t, fy, fx) for t in (False, True) for fy in (False, True) for fx in (False, True)]
K = 64
WAVELENGTH_M = 1.0e-10
PIXEL_M, DISTANCE_M = 20e-6, 0.5
PROBE_RAD = 1.0


def smooth(rng: np.random.Generator, shape: tuple[int, int], width_px: float) -> np.ndarray:
    noise = np.fft.fft2(rng.standard_normal(shape))
    fy, fx = np.meshgrid(np.fft.fftfreq(shape[0]), np.fft.fftfreq(shape[1]), indexing="ij")
    field = np.fft.ifft2(noise * np.exp(-0.5 * (fy ** 2 + fx ** 2) * (2 * math.pi * width_px) ** 2)).real
    return field / field.std()


def holograms(focus_m: float, flags=(False, False, False), rotation_deg: float = 0.0, far: bool = False,
              seed: int = 0, photons: float = 1e3) -> tuple[np.ndarray, np.ndarray, float]:
    """Near-field holograms (K x K, ``photons`` per pixel) of a 6 x 6 jittered raster whose stage frame is turned by
    ``rotation_deg`` against the detector, read out by ``flags``; or, ``far``, the same exit waves' diffraction
    patterns. Returns the stored patterns, the stage positions (N, 2) Å (y, x; ptyacc's probe positions) and the
    object pixel (Å)."""
    rng = np.random.default_rng(seed)
    dx_m = PIXEL_M * focus_m / (focus_m + DISTANCE_M)
    z_m = DISTANCE_M * dx_m / PIXEL_M  # z2 / M
    obj = np.exp(1j * 1.2 * smooth(rng, (160, 160), 2.0) - 0.1 * np.abs(smooth(rng, (160, 160), 3.0)))
    yy, xx = np.mgrid[:K, :K] - (K - 1) / 2
    probe = np.exp(-((yy ** 2 + xx ** 2) / (0.45 * K) ** 2) ** 3) * np.exp(1j * PROBE_RAD * smooth(rng, (K, K), 3.0))
    fy, fx = np.meshgrid(np.fft.fftfreq(K, dx_m), np.fft.fftfreq(K, dx_m), indexing="ij")
    kernel = np.exp(2j * math.pi * z_m * np.sqrt(1 / WAVELENGTH_M ** 2 - fy ** 2 - fx ** 2))
    base = np.stack(np.meshgrid(np.arange(6), np.arange(6), indexing="ij"), -1).reshape(-1, 2) * 6.0
    base = base - base.mean(0) + rng.normal(0, 0.8, base.shape)  # px
    c, s = math.cos(math.radians(rotation_deg)), math.sin(math.radians(rotation_deg))
    true = base @ np.array([[c, s], [-s, c]]).T + 48  # the model's windows: R(theta) of the stage's frame
    patterns = []
    for y, x in true:
        iy, ix = int(y), int(x)
        window = obj[iy:iy + K, ix:ix + K]
        ramp = np.exp(-2j * math.pi * (fy * (y - iy) + fx * (x - ix)) * dx_m)  # the sub-pixel part, moved back
        exit_wave = probe * np.fft.ifft2(np.fft.fft2(window) * np.conj(ramp))
        if far:
            image = np.abs(np.fft.fftshift(np.fft.fft2(exit_wave))) ** 2
        else:
            image = np.abs(np.fft.ifft2(np.fft.fft2(exit_wave) * kernel)) ** 2
        patterns.append(rng.poisson(image / image.mean() * photons))
    prepared = np.array(patterns, dtype=np.float64)
    transpose, flip_y, flip_x = flags  # the read-out undoes the preparation: flip_x, flip_y, then the transpose
    stored = prepared[:, :, ::-1] if flip_x else prepared
    stored = stored[:, ::-1] if flip_y else stored
    stored = stored.transpose(0, 2, 1) if transpose else stored
    return np.ascontiguousarray(stored), base * dx_m * 1e10, dx_m * 1e10


@pytest.mark.parametrize("flags", FLAGS)
def test_the_motion_gives_each_read_out_and_the_magnification(flags):
    stored, positions_A, dx_A = holograms(4e-3, flags, rotation_deg=7.0, seed=FLAGS.index(flags))
    motion = motion_from_patterns(stored, positions_A)
    assert motion.moves
    assert motion.orientation() == (flags, pytest.approx(7.0, abs=0.5))
    # the beam's own structure pulls each registration towards no shift: the pixel reads about 1 % large here
    assert motion.dx_A == pytest.approx(dx_A, rel=0.03)
    assert motion.focus_to_sample_m(DISTANCE_M, PIXEL_M) == pytest.approx(4e-3, rel=0.03)
    assert motion.anisotropy < 0.03
    assert not motion.mirrored(flags) and motion.mirrored((not flags[0], flags[1], flags[2]))


def test_far_field_patterns_and_a_blank_sample_do_not_move():
    stored, positions_A, _ = holograms(4e-3, far=True)
    assert not motion_from_patterns(stored, positions_A).moves
    blank = np.random.default_rng(1).poisson(1e3, stored.shape).astype(np.float64)  # counting noise alone
    motion = motion_from_patterns(blank, positions_A)
    assert not motion.moves


def test_near_field_geometry_measures_and_checks():
    stored, positions_A, _ = holograms(4e-3, (False, True, False), seed=3)
    motion = motion_from_patterns(stored, positions_A)
    common = {"distance_m": DISTANCE_M, "pixel_m": PIXEL_M, "where": "file"}
    found = near_field_geometry(motion, "m", focus_to_sample_m="auto", fixed=None, rotation_deg="auto", **common)
    assert found.focus_to_sample_m == pytest.approx(4e-3, rel=0.03) and found.focus_measured
    assert found.flags == (False, True, False) and abs(found.rotation_deg) < 0.5
    assert not any(line.startswith("warning:") for line in found.lines)
    # the truth given: no warning; a distance 10 % off, a mirror, a turn by 180 degrees and a turned stage each said
    right = near_field_geometry(motion, "m", focus_to_sample_m=4e-3, fixed=(False, True, False), rotation_deg=0.0,
                                **common)
    assert right.lines == (right.lines[0],) and right.focus_to_sample_m == 4e-3
    off = near_field_geometry(motion, "m", focus_to_sample_m=4.4e-3 * (1 + FOCUS_OFF), fixed=(False, True, False),
                              rotation_deg=0.0, **common)
    assert "not the 4.62 mm given" in off.lines[1] and "focus_to_sample_m: auto" in off.lines[1]
    for fixed, said in (((False, False, False), "mirror image"), ((False, False, True), "turned by 180")):
        wrong = near_field_geometry(motion, "m", focus_to_sample_m=4e-3, fixed=fixed, rotation_deg=0.0, **common)
        assert said in wrong.lines[1] and "transpose False, flip_y True, flip_x False" in wrong.lines[1]
    turned = near_field_geometry(motion, "m", focus_to_sample_m=4e-3, fixed=None, rotation_deg=5.0, **common)
    assert "turned by -5.0 deg from experiment.scan_rotation_deg 5" in turned.lines[1]


@pytest.mark.parametrize("turn_deg", [60.0, -150.0])
def test_a_stage_turned_against_the_detector_is_the_scan_rotation(turn_deg):
    """A stage turned against the detector by any angle, the detector's flags given (as basis vectors give them):
    measured (scan_rotation_deg: auto), the turn is the rotation, without a warning; given as 0, a turn of 45 degrees
    or more is said as the flags' (a wrong read-out turns the holograms as much)."""
    flags = (True, False, True)
    stored, positions_A, _ = holograms(4e-3, flags, rotation_deg=turn_deg, seed=11)
    motion = motion_from_patterns(stored, positions_A)
    common = {"focus_to_sample_m": 4e-3, "distance_m": DISTANCE_M, "pixel_m": PIXEL_M, "where": "file",
              "fixed": flags}
    measured = near_field_geometry(motion, "m", rotation_deg="auto", **common)
    assert measured.rotation_deg == pytest.approx(turn_deg, abs=0.5) and measured.flags == flags
    assert not any(line.startswith("warning:") for line in measured.lines)
    given = near_field_geometry(motion, "m", rotation_deg=0.0, **common)
    assert given.rotation_deg == 0.0 and "holograms move turned by" in given.lines[1]
    assert f"{abs(turn_deg):.0f} deg from the detector's transpose True" in given.lines[1]


def test_still_patterns_refuse_the_autos_and_warn_a_given_geometry():
    stored, positions_A, _ = holograms(4e-3, far=True)
    motion = motion_from_patterns(stored, positions_A)
    common = {"distance_m": DISTANCE_M, "pixel_m": PIXEL_M, "where": "file.cxi"}
    with pytest.raises(DataError, match="experiment.focus_to_sample_m: auto measures the near field"):
        near_field_geometry(motion, "m", focus_to_sample_m="auto", fixed=(False, False, False), rotation_deg=0.0,
                            **common)
    given = near_field_geometry(motion, "m", focus_to_sample_m=4e-3, fixed=(False, False, False), rotation_deg=0.0,
                                **common)
    assert "do not travel with the scan" in given.lines[1] and "experiment.geometry" in given.lines[1]


def write_cxi(path: Path, stored: np.ndarray, positions_A: np.ndarray) -> Path:
    with h5py.File(path, "w") as f:
        f["entry_1/instrument_1/detector_1/data"] = stored.astype(np.uint32)
        f["entry_1/instrument_1/detector_1/distance"] = DISTANCE_M
        f["entry_1/instrument_1/detector_1/x_pixel_size"] = PIXEL_M
        f["entry_1/instrument_1/detector_1/y_pixel_size"] = PIXEL_M
        f["entry_1/instrument_1/source_1/wavelength"] = WAVELENGTH_M
        translation = np.zeros((len(positions_A), 3))
        translation[:, :2] = -positions_A[:, [1, 0]] * 1e-10  # ptyacc's positions are -translation (y, x)
        f["entry_1/sample_1/geometry_1/translation"] = translation
    return path


def test_init_and_load_find_the_near_field(tmp_path):
    """init writes the near field for holograms (and the far field for diffraction patterns); the load measures the
    distance and the flags, and a far-field config of near-field data is warned."""
    stored, positions_A, dx_A = holograms(4e-3, (True, False, True), seed=5)
    path = write_cxi(tmp_path / "near.cxi", stored, positions_A)
    text = init_config(path, tmp_path / "near.yaml")
    assert "  geometry: near_field" in text and "  focus_to_sample_m: auto" in text
    assert yaml.safe_load(text)["experiment"]["scan_rotation_deg"] == "auto"
    assert "sample_side" not in text and "from the holograms' motion" in text
    optim = yaml.safe_load(text)["optim"]
    assert optim["iterations"] == "auto" and optim["start"] == {"positions": NEAR_FIELD_POSITIONS_START}
    data = load_data(load_config({"data": {"path": str(path), "transform": {"orientation": "auto"}},
                                  "experiment": {"radiation": "xray", "geometry": "near_field",
                                                 "focus_to_sample_m": "auto"}}))
    assert data.autos["experiment.focus_to_sample_m"] == pytest.approx(4e-3, rel=0.03)
    assert tuple(data.detector["orientation_flags"]) == (True, False, True)
    assert data.dx_A == pytest.approx(dx_A, rel=0.03)
    # a stage turned against the detector: init's config measures the turn with the flags
    stored, positions_A, _ = holograms(4e-3, (False, True, True), rotation_deg=-35.0, seed=8)
    turned = write_cxi(tmp_path / "turned.cxi", stored, positions_A)
    (tmp_path / "turned.yaml").write_text(init_config(turned, tmp_path / "turned.yaml"))
    data = load_data(load_config(tmp_path / "turned.yaml"))
    assert data.autos["experiment.scan_rotation_deg"] == pytest.approx(-35.0, abs=0.5)
    assert tuple(data.detector["orientation_flags"]) == (False, True, True)
    far = load_data(load_config({"data": {"path": str(path), "transform": {"orientation": "manual"}},
                                 "experiment": {"radiation": "xray", "focus_to_sample_m": 1e-3}}))
    assert any(line.startswith("warning: the patterns travel with the scan") and "geometry: near_field" in line
               for line in far.checks)
    stored, positions_A, _ = holograms(4e-3, far=True, seed=6)
    text = init_config(write_cxi(tmp_path / "far.cxi", stored, positions_A), tmp_path / "far.yaml")
    assert "geometry: near_field" not in text.replace("# geometry: near_field", "") and "sample_side: auto" in text
    optim = yaml.safe_load(text)["optim"]  # the far field refines the sample's distance from the focus
    assert optim["iterations"] == 20 and optim["start"] == {"probe_focus": XRAY_FOCUS_START} and "lr" not in optim


@pytest.mark.skipif(not PETRA.exists(), reason="the PETRA III file ships with the repository")
def test_the_petra_file_s_motion_agrees_with_its_basis_vectors():
    """Measured data: the holograms move as the file's basis vectors say (flip_y and flip_x), at a magnification
    near the 3.65 mm that the beamline's users give (the two axes about 5 % apart)."""
    with h5py.File(PETRA) as f:
        stored = f["entry_1/instrument_1/detector_1/data"][()].astype(np.float64)
        good = f["entry_1/instrument_1/detector_1/mask"][()] == 0
        translation = f["entry_1/sample_1/geometry_1/translation"][()]
    motion = motion_from_patterns(stored, -translation[:, [1, 0]] * 1e10, good)
    assert motion.moves
    flags, rotation_deg = motion.orientation()
    assert flags == (False, True, True) and abs(rotation_deg) < 1.0
    assert motion.focus_to_sample_m(1.12, 55e-6) == pytest.approx(3.65e-3, rel=0.04)
    assert 0.03 < motion.anisotropy < 0.08


@pytest.fixture(scope="module")
def xnf(tmp_path_factory):
    """benchmarks/xray_near_field.py (an independent NumPy simulator: a diffuser's beam, the exact angular spectrum on
    a grid twice as fine as the detector's, each detector pixel's intensity integrated) as a module, and its file
    of a detector read out flipped along x, without basis vectors, 0.2 px position errors (a named case)."""
    spec = importlib.util.spec_from_file_location("xray_near_field", ROOT / "benchmarks" / "xray_near_field.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module, module.make(tmp_path_factory.mktemp("xnf"), "xnf_fx_nobasis")


def truth_of(path: Path) -> tuple[float, tuple[bool, ...], np.ndarray, np.ndarray]:
    with h5py.File(path) as f:
        truth = f["ground_truth"]
        return (float(truth.attrs["focus_to_sample_m"]), tuple(bool(v) for v in truth.attrs["orientation"]),
                truth["phase"][()], truth["positions_A"][()])


@pytest.mark.slow
@pytest.mark.parametrize("case", ["xnf_fx_nobasis", "xnf_turned"])
def test_init_and_run_reach_the_truth_told(xnf, tmp_path, case):
    """init's config on the independent simulator's files: the distance within 1 %, the flags, the stage's turn
    against the detector (0, or 62 degrees with the flags from basis vectors), and the phase as close to the truth as
    the run told them (the same run's settings otherwise)."""
    module, path = xnf
    path = path if case == "xnf_fx_nobasis" else module.make(tmp_path, case)
    focus_m, flags, truth, positions_A = truth_of(path)
    with h5py.File(path) as f:
        stage_deg = float(f["ground_truth"].attrs["stage_deg"])
    (tmp_path / "scan.yaml").write_text(init_config(path, tmp_path / "scan.yaml"))
    common = {"optim.iterations": 20, "output.figures": False}
    found = ptyacc.reconstruct(load_config(tmp_path / "scan.yaml", [f"{k}={v}" for k, v in {
        **common, "output.dir": str(tmp_path / "init")}.items()]))
    told = ptyacc.reconstruct(load_config(tmp_path / "scan.yaml", [f"{k}={v}" for k, v in {
        **common, "output.dir": str(tmp_path / "told"), "experiment.focus_to_sample_m": focus_m,
        "experiment.scan_rotation_deg": stage_deg, "data.transform.orientation": "manual",
        "data.transform.transpose": flags[0], "data.transform.flip_y": flags[1],
        "data.transform.flip_x": flags[2]}.items()]))
    autos = yaml.safe_load(found.results.attrs["auto_values"])
    assert autos["experiment.focus_to_sample_m"] == pytest.approx(focus_m, rel=0.01)
    assert autos["experiment.scan_rotation_deg"] == pytest.approx(stage_deg, abs=0.3)
    assert tuple(found.results.detector["orientation_flags"]) == flags

    def ncc(rec):
        results = rec.results
        return placed_ncc(results.phase, results.origin_A, results.dx_A, positions_A, truth)

    assert ncc(told) > 0.6 and ncc(found) > ncc(told) - 0.02


@pytest.mark.slow
def test_the_near_field_s_batch_floor_keeps_the_loss_falling(xnf, tmp_path):
    """A weak object in a beam that fills the window (the simulator's drawn file xnd2-01: 197 positions of a spiral
    28 px apart under a beam 100 px across, 1.7e3 counts a pixel): without the batch floor the Poisson loss's step
    of 0.8 makes the loss climb under optim.iterations: auto (the stop rule warns that it rose) and the phase ends
    far from the truth; with the near field's floor (auto) it falls, and the phase comes closer by over 0.15."""
    module, _ = xnf
    module.draw(2, 2)
    path = module.make(tmp_path, "xnd2-01")
    focus_m, flags, truth, positions_A = truth_of(path)
    (tmp_path / "scan.yaml").write_text(init_config(path, tmp_path / "scan.yaml"))
    told = {"experiment.focus_to_sample_m": focus_m, "data.transform.orientation": "manual", "output.figures": False,
            "data.transform.transpose": flags[0], "data.transform.flip_y": flags[1], "data.transform.flip_x": flags[2]}
    runs = {floor: ptyacc.reconstruct(load_config(tmp_path / "scan.yaml", [f"{k}={v}" for k, v in {
        **told, "optim.preconditioner_batch_floor": floor, "output.dir": str(tmp_path / floor)}.items()]))
        for floor in ("0", "auto")}
    assert yaml.safe_load(runs["auto"].results.attrs["auto_values"])["optim.preconditioner_batch_floor"] == 0.5
    rose = {floor: any("the loss rose" in line for line in yaml.safe_load(run.results.attrs["warnings"]))
            for floor, run in runs.items()}
    assert rose == {"0": True, "auto": False}
    ncc = {floor: placed_ncc(run.results.phase, run.results.origin_A, run.results.dx_A, positions_A, truth)
           for floor, run in runs.items()}
    assert ncc["auto"] > ncc["0"] + 0.15, ncc


@pytest.mark.slow
@pytest.mark.processes
def test_one_and_two_processes_measure_the_near_field_alike(xnf, tmp_path):
    """The motion is measured alike on every process (the same patterns, the same consensus draws): 1 and 2
    processes, shard_data and shard_object take the same distance and flags, and the runs agree."""
    from test_distributed import launched_four_ways

    _, path = xnf
    config = yaml.safe_load(init_config(path, tmp_path / "scan.yaml"))
    config["data"]["path"] = str(path)
    config.update(optim={"iterations": 2, "batch_size": 32}, output={"figures": False})
    found = launched_four_ways(tmp_path, config)
    keys = ("experiment.focus_to_sample_m", "data.transform.transpose", "data.transform.flip_y",
            "data.transform.flip_x")
    for autos, _ in found.values():
        assert {key: autos[key] for key in keys} == {key: found["p1"][0][key] for key in keys}
    assert np.abs(found["p2"][1] - found["p1"][1]).max() < 1e-4
    assert np.abs(found["split"][1] - found["data"][1]).max() < 1e-4


def test_too_few_positions_refuse_the_autos_and_skip_the_checks(tmp_path):
    stored, positions_A, _ = holograms(4e-3, seed=7)
    path = write_cxi(tmp_path / "few.cxi", stored[:6], positions_A[:6])
    near = {"radiation": "xray", "geometry": "near_field"}
    with pytest.raises(DataError, match="experiment.focus_to_sample_m: auto measures the near field .* needs 8"):
        load_data(load_config({"data": {"path": str(path), "transform": {"orientation": "manual"}},
                               "experiment": {**near, "focus_to_sample_m": "auto"}}))
    given = load_data(load_config({"data": {"path": str(path), "transform": {"orientation": "manual"}},
                                   "experiment": {**near, "focus_to_sample_m": 4e-3}}))
    assert not any("hologram" in line for line in given.checks)
