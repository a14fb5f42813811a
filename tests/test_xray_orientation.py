"""X-ray far field: the detector's transpose and flips against the stage from the centre of mass
(data.transform.orientation: auto in a file without basis vectors), the sign of X-ray matter's phase, and the
run's end check of the object's phase against its absorption. The files come from benchmarks/xray_far_field.py,
a NumPy simulator independent of ptyacc (a zone plate's beam, a gold test pattern, a Fermat spiral, CXI)."""

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

import ptyacc
from ptyacc.commands.init_config import init_config
from ptyacc.config import load_config
from ptyacc.data.load import load_data
from ptyacc.data.orientation import ScatteredGrid, centres_of_mass, orientation_from_com
from ptyacc.data.trouble import (
    CONJUGATE_CLEAR,
    PHASE_ADVANCED_SKEW,
    advanced_phase_warning,
    conjugate_reason,
    conjugate_warning,
    pair_member_said,
)
from ptyacc.results.quality import best_shift_ncc, phase_absorption_correlation, phase_skew, placed_ncc, scanned_region

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def xff():
    """benchmarks/xray_far_field.py as a module, with the cases these tests make: 1e7 photons per pattern, 200
    positions, the sample 2.8 mm downstream of the focus (upstream: -2.8), the detector read out by each of the
    eight orientations."""
    spec = importlib.util.spec_from_file_location("xray_far_field", ROOT / "benchmarks" / "xray_far_field.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for index in range(8):
        module.CASES[f"test_o{index}"] = (1e7, 200, 5.0, 2.8, index, 10 + index)
    module.CASES["test_upstream"] = (1e7, 200, 5.0, -2.8, 0, 30)
    # the stage's axes turned against the detector's (the last value, degrees), read out flipped along y
    module.CASES["test_turned_small"] = (1e7, 200, 5.0, 2.8, 2, 40, 1.0, 3.5)
    module.CASES["test_turned_large"] = (1e7, 200, 5.0, 2.8, 2, 41, 1.0, -141.0)
    # the far-field simulator's turned draw 5, files 7 and 15 (read out transposed and flipped both ways, the sample
    # upstream): a centre of mass that cannot tell the handedness (turned 126 degrees, read 34), and one whose
    # rotation, 11 degrees off, leaves the sample place's trials blind to the conjugate
    module.CASES["test_turned_unclear"] = (3.24e6, 200, 4.4065, -2.3124, 7, 5007, 1.0, 125.611)
    module.CASES["test_turned_conjugate"] = (2.49e7, 156, 4.7809, -3.4948, 7, 5015, 1.0, 42.013)
    # draw 6 with --detector, file 14: read out transposed and reversed along y, module gaps and a beamstop masked,
    # hot and dead pixels not, the beam 2.75 px (y) and 0.32 px (x) off the middle pixel
    module.CASES["test_detector"] = (9.16e6, 245, 5.1844, 2.0271, 6, 6014, 1.0, 0.0, True)
    # draw 9 with --detector, file 0: a weak absorber (beta a twentieth of gold's) 3.44 mm upstream of the focus, 7e5
    # photons, whose centre of mass cannot tell the handedness
    module.CASES["test_weak_upstream"] = (725189.70, 281, 5.2063, -3.4438, 0, 9000, 0.05, 1.4989, True)
    # draw 12 with --turned --detector --weak, file 9: a weak absorber 3.79 mm upstream, 1.2e6 photons, the stage turned
    # 130 degrees, read out flipped along x; its centre of mass tells the handedness but its skew (-0.06) is noise
    module.CASES["test_weak_turned"] = (1206586.08, 245, 5.5608, -3.7863, 1, 12009, 0.05, 130.1197, True)
    return module


@pytest.fixture(scope="module")
def files(xff, tmp_path_factory):
    work = tmp_path_factory.mktemp("xff")
    return {name: xff.make(work, name) for name in xff.CASES if name.startswith("test_")}


def stored(path: Path) -> tuple[np.ndarray, np.ndarray, tuple[bool, ...]]:
    """The stored patterns, the probe positions (N, 2) Å as ptyacc reads them, and the flags that undo the read-out."""
    with h5py.File(path) as f:
        patterns = f["entry_1/instrument_1/detector_1/data"][()].astype(np.float64)
        translation = f["entry_1/sample_1/geometry_1/translation"][()]
        flags = tuple(bool(v) for v in f["ground_truth"].attrs["orientation"])
    return patterns, -translation[:, [1, 0]] * 1e10, flags


@pytest.mark.parametrize("index", range(8))
def test_the_centre_of_mass_reads_x_ray_matter_s_negative_phase(files, index):
    """On every read-out the centre of mass tells the handedness and, with the X-ray phase's sign, the flags; with
    the electron's sign it takes the pair's other member: the flags turned by 180 degrees (both flips reversed)."""
    patterns, positions_A, truth = stored(files[f"test_o{index}"])
    com = centres_of_mass(patterns, None)
    grid = ScatteredGrid(positions_A)
    found = orientation_from_com(com, grid=grid, phase_sign=-1.0)
    assert found.flags == truth
    assert abs(found.rotation_deg) < 3.0 and found.curl_left < 0.1 < found.curl_other
    electron = orientation_from_com(com, grid=grid)
    assert electron.flags == (truth[0], not truth[1], not truth[2])


def test_load_data_measures_the_flags_and_checks_given_ones(files):
    """data.transform.orientation: auto on an X-ray CXI file without basis vectors is measured, and given flags that
    mirror or turn the patterns are said before the run."""
    path = files["test_o5"]
    _, _, truth = stored(path)
    data = load_data(load_config({"data": {"path": str(path), "transform": {"orientation": "auto"}},
                                  "experiment": {"radiation": "xray"}}))
    assert tuple(data.detector["orientation_flags"]) == truth
    assert any("scan rotation from the centre of mass" in line and "from the X-ray phase's sign" in line
               for line in data.checks)
    assert "experiment.sample_side" not in data.autos  # downstream, the schema's default: nothing to try
    turned = load_data(load_config({"data": {"path": str(path), "transform": {"orientation": "auto"}},
                                    "experiment": {"radiation": "xray", "scan_rotation_deg": "auto"}}))
    assert turned.calibration["scan_rotation_deg"][1] == "fitted"
    assert abs(turned.calibration["scan_rotation_deg"][0]) < 3.0 and tuple(turned.detector["orientation_flags"]) == truth
    given = {"transpose": not truth[0], "flip_y": truth[1], "flip_x": truth[2]}
    mirrored = load_data(load_config({"data": {"path": str(path), "transform": given},
                                      "experiment": {"radiation": "xray"}}))
    assert any(line.startswith("warning: the patterns' centre of mass says they are mirrored") for line in
               mirrored.checks)
    given = {"transpose": not truth[0], "flip_y": not truth[1], "flip_x": truth[2]}  # turned by a quarter
    turned = load_data(load_config({"data": {"path": str(path), "transform": given},
                                    "experiment": {"radiation": "xray"}}))
    assert any(line.startswith("warning: the patterns' centre of mass says the scan is turned") for line in
               turned.checks)


def test_masked_gaps_and_a_beamstop_leave_the_beam_s_centre_where_it_is(files):
    """A detector of modules, its gaps and beamstop flagged in the CXI mask, read out reversed along one axis, the
    beam 2.75 px off the middle pixel: the beam's centre measured on the mean pattern with the masked pixels filled
    from their neighbours lies nearer the zero frequency with the flips that undo the read-out reversing the patterns
    than turning them about it (on the file centred, before the fill, the gaps' zeros pulled the centre 2 px the
    other way, the flips turned the patterns about the zero frequency, and the run lost 0.03 of its NCC)."""
    path = files["test_detector"]
    _, _, truth = stored(path)
    data = load_data(load_config({"data": {"path": str(path), "transform": {"orientation": "auto"}},
                                  "experiment": {"radiation": "xray", "scan_rotation_deg": "auto"}}))
    assert tuple(data.detector["orientation_flags"]) == truth
    assert data.autos["data.transform.flip_about_zero"] == [False, False]
    with h5py.File(path) as f:
        assert f["entry_1/instrument_1/detector_1/mask"][()].sum() > 500  # gaps and the beamstop


def test_init_writes_the_orientation_auto_for_x_ray_files(files, tmp_path):
    text = init_config(files["test_o1"], tmp_path / "scan.yaml")
    assert "centre of mass (far field)" in text
    (tmp_path / "scan.yaml").write_text(text)
    config = load_config(tmp_path / "scan.yaml")
    assert config.data.transform.orientation == "auto" and config.experiment.scan_rotation_deg == "auto"


def test_the_phase_against_the_absorption_tells_the_conjugate(xff, files):
    """Gold delays the phase where it absorbs: the true object correlates positively, its conjugate (what the data
    give under flags reversed in both axes and the probe's other curvature) negatively, and is said with the flags
    that give the object itself; a phase-only object says nothing."""
    with h5py.File(files["test_o0"]) as f:
        phase, positions_A = f["ground_truth/phase"][()], f["ground_truth/positions_A"][()]
    thickness = -phase * xff.WAVELENGTH_M / (2 * np.pi * xff.GOLD_DELTA)
    obj = np.exp(1j * phase - 2 * np.pi * xff.GOLD_BETA * thickness / xff.WAVELENGTH_M)[None]
    rows, cols = scanned_region(positions_A / (xff.DX_M * 1e10))
    assert phase_absorption_correlation(obj, rows, cols) > 0.95
    flipped = phase_absorption_correlation(np.conj(obj), rows, cols)
    assert flipped < -0.95
    said = conjugate_warning(flipped, (True, False, True))
    assert len(said) == 1 and "transpose: True, flip_y: True, flip_x: False" in said[0]
    assert "experiment.focus_to_sample_m with the other sign" in said[0]
    assert "experiment.sample_side: upstream" in conjugate_warning(flipped, (True, False, True), "downstream")[0]
    assert conjugate_warning(-CONJUGATE_CLEAR / 2, (False, False, False)) == []
    assert phase_absorption_correlation(np.exp(1j * phase)[None], rows, cols) == 0.0
    # a phase ramp (the probe's as much as the object's) does not hide it
    y, x = np.indices(phase.shape)
    assert phase_absorption_correlation(obj * np.exp(0.05j * (y + x)), rows, cols) > 0.95


def test_the_phase_s_skew_is_a_sparse_delay_s_known_value_and_its_conjugate_s_opposite():
    """A tenth of the pixels delayed by 0.3 rad on an empty background, laid out symmetrically (so that the plane
    freed from it is its mean): the skew of a two-valued distribution with a share p at the lower value,
    -(1 - 2 p) / sqrt(p (1 - p)) = -8/3; its conjugate +8/3; a phase ramp and an offset change nothing; a flat phase
    reads 0."""
    rows = np.arange(40) % 5 == 2
    cols = np.isin(np.arange(40) % 4, (1, 2))
    phase = -0.3 * (rows[:, None] & cols[None, :])
    assert phase.astype(bool).mean() == pytest.approx(0.1)
    obj = (0.999 * np.exp(1j * phase))[None]
    region = (slice(0, 40), slice(0, 40))
    assert phase_skew(obj, *region) == pytest.approx(-8 / 3, abs=1e-9)
    assert phase_skew(np.conj(obj), *region) == pytest.approx(8 / 3, abs=1e-9)
    y, x = np.indices(phase.shape)
    assert phase_skew(obj * np.exp(1j * (0.4 + 0.05 * y - 0.03 * x)), *region) == pytest.approx(-8 / 3, abs=1e-9)
    assert phase_skew(np.full((1, 40, 40), 0.9 + 0j), *region) == 0.0


def test_a_weak_absorber_s_forward_phase_reads_as_the_conjugate_where_the_absorption_cannot_say():
    """``conjugate_reason``: the phase against the absorption decides where it is clear; under CONJUGATE_CLEAR either
    way, a skew over PHASE_ADVANCED_SKEW (the phase departing forward) reads as the conjugate. The end-of-run warning
    (``advanced_phase_warning``) names the other member's keys and the other side."""
    assert "log amplitude -0.40" in conjugate_reason(-0.4, -2.5)  # the absorption says it, whatever the skew
    assert conjugate_reason(0.4, 2.5) is None  # the absorption says it is right
    assert "skew +2.52" in conjugate_reason(-0.14, 2.52)
    for correlation, skew in ((0.1, PHASE_ADVANCED_SKEW), (0.1, -2.5), (0.1, None)):
        assert conjugate_reason(correlation, skew) is None
    [said] = advanced_phase_warning(-0.14, 2.52, (True, True, True), "downstream")
    assert "likely the conjugate" in said and "skew +2.52" in said
    assert "transpose: True, flip_y: False, flip_x: False and experiment.sample_side: upstream" in said
    assert "focus_to_sample_m with the other sign" in advanced_phase_warning(-0.14, 2.52, (True, True, True), None)[0]
    for correlation, skew in ((-0.14, 0.9), (0.35, 2.52), (-0.35, 2.52)):
        assert advanced_phase_warning(correlation, skew, (True, True, True), "downstream") == []


def test_what_chose_a_weak_absorber_s_member_is_said_with_the_other_frame_s_keys():
    """``pair_member_said``: where the absorption cannot tell the pair apart and no forward skew warned, the run's end
    says (to the terminal too) that the frame rests on the phase departing backward, and gives the keys of the other
    frame, which holds the object where the sample is a film with holes; nothing where the absorption tells, or the
    skew is forward (the warning speaks)."""
    [(text, to_user)] = pair_member_said(0.05, -2.5, (False, True, False), "upstream")
    assert to_user and text.startswith("conjugate pair:") and "skew -2.50" in text and "film with holes" in text
    assert "transpose: False, flip_y: False, flip_x: True with experiment.sample_side: downstream" in text
    [(text, _)] = pair_member_said(0.05, 0.4, (False, True, False), None)
    assert "does not tell either" in text and "focus_to_sample_m with the other sign" in text
    for correlation, skew in ((0.35, -2.5), (-0.35, -2.5), (0.05, PHASE_ADVANCED_SKEW + 0.1)):
        assert pair_member_said(correlation, skew, (False, True, False), "upstream") == []


def run_file(path: Path, tmp_path: Path, **overrides) -> ptyacc.Reconstruction:
    """``ptyacc init``'s config for ``path`` run for 30 iterations with ``overrides``."""
    tmp_path.mkdir(exist_ok=True)
    text = init_config(path, tmp_path / "scan.yaml")
    (tmp_path / "scan.yaml").write_text(text)
    values = {"optim.iterations": 30, "output.figures": False, "output.dir": str(tmp_path / "out"), **overrides}
    return ptyacc.reconstruct(load_config(tmp_path / "scan.yaml", [f"{key}={value}" for key, value in values.items()]))


def warnings_of(rec) -> list[str]:
    return yaml.safe_load(rec.results.attrs.get("warnings") or "[]") or []


def truth_ncc(rec, path: Path) -> float:
    with h5py.File(path) as f:
        truth, positions_A = f["ground_truth/phase"][()], f["ground_truth/positions_A"][()]
    results = rec.results
    return placed_ncc(results.phase, results.origin_A, results.dx_A, positions_A, truth)


@pytest.mark.slow
def test_a_beam_off_the_detector_s_middle_pixel_leaves_the_object_in_place(files, tmp_path):
    """The detector file's beam lies 2.75 px (y) and 0.32 px (x) off the middle pixel (a tilted beam: the probe's
    phase ramp). Told the read-out, the turn and the sample's place, the run's object lies where the positions say:
    NCC at the exact place above 0.95 (0.988) and the best shift within 0.3 px (the initial probe advanced about the
    zero frequency instead sat lambda z q to the side, where the probe's hold kept it, and the object as far: best
    shift (1.0, 0.1) px, NCC 0.941 at the exact place)."""
    path = files["test_detector"]
    _, _, truth = stored(path)
    with h5py.File(path) as f:
        assert np.abs(f["ground_truth"].attrs["beam_offset_px"]).max() > 2.5
        focus_m = float(f["ground_truth"].attrs["defocus_m"])
    rec = run_file(path, tmp_path, **{
        "data.transform.orientation": "manual", "data.transform.transpose": truth[0], "data.transform.flip_y": truth[1],
        "data.transform.flip_x": truth[2], "experiment.scan_rotation_deg": 0, "experiment.focus_to_sample_m": focus_m})
    with h5py.File(path) as f:
        true_phase, positions_A = f["ground_truth/phase"][()], f["ground_truth/positions_A"][()]
    r = rec.results
    best, shift = best_shift_ncc(r.phase, r.origin_A, r.dx_A, positions_A, true_phase, ((0.5, 4), (0.1, 4)))
    assert truth_ncc(rec, path) > 0.95 and np.abs(shift).max() <= 0.3, (truth_ncc(rec, path), best, shift)


@pytest.mark.slow
def test_init_and_run_find_a_flipped_detector(files, tmp_path):
    """init + run on a detector read out transposed and flipped: the flags the trials keep are the true ones, the
    phase correlates with the truth as told (0.88 at these settings) and the run says nothing; told the other member
    of the pair, the same run stalls far from the data."""
    path = files["test_o5"]
    _, _, truth = stored(path)
    rec = run_file(path, tmp_path)
    assert tuple(rec.results.detector["orientation_flags"]) == truth
    assert truth_ncc(rec, path) > 0.85
    assert rec.results.attrs["phase_absorption_correlation"] > CONJUGATE_CLEAR
    assert warnings_of(rec) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["test_turned_small", "test_turned_large"])
def test_a_turned_stage_is_found_by_the_centre_of_mass_and_trials(xff, files, tmp_path, name):
    """The stage's axes turned 3.5 or -141 degrees against the detector, nothing in the file says so: init's
    experiment.scan_rotation_deg: auto reads the turn from the centre of mass and refines it by trials (a third of a
    degree off costs a tenth of the NCC at these photons); the flips that go with a turn by 180 degrees turn the
    patterns about the zero frequency, where the beam's centre says so. The run comes within 0.02 of the one told the
    truth (scored by the calibration matrix's scorer, which matches frames a quarter turn apart: the same data); left
    at 0, the same file ends far from it."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "calibration_matrix"))
    from matrix import score_run

    path = files[name]
    stage_deg = xff.CASES[name][-1]
    _, _, flags = stored(path)

    def ncc(folder: Path) -> float:
        return score_run(folder / "out" / "results.h5", path)["ncc"]

    rec = run_file(path, tmp_path / "auto")
    autos = yaml.safe_load(rec.results.attrs["auto_values"])
    turn = autos["experiment.scan_rotation_deg"] - stage_deg
    assert abs((turn + 45.0) % 90.0 - 45.0) < 0.5  # the turn, up to the quarter turns the flags take
    run_file(path, tmp_path / "told", **{
        "experiment.scan_rotation_deg": stage_deg, "data.transform.orientation": "manual",
        "data.transform.transpose": flags[0], "data.transform.flip_y": flags[1], "data.transform.flip_x": flags[2]})
    assert ncc(tmp_path / "auto") > ncc(tmp_path / "told") - 0.02 and ncc(tmp_path / "told") > 0.8
    run_file(path, tmp_path / "zero", **{"experiment.scan_rotation_deg": 0})
    assert ncc(tmp_path / "zero") < ncc(tmp_path / "told") - 0.1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["test_turned_unclear", "test_turned_conjugate"])
def test_a_turned_stage_the_centre_of_mass_reads_poorly(xff, files, tmp_path, name):
    """Two turned stages the centre of mass alone gets wrong, through init + run without a word before: where it
    cannot tell the handedness, trials of the frames around the circle in both handednesses find the turn (it was
    read 92 degrees off, the trials then ran at rotation 0, and the run mirrored the object: NCC -0.14, only the
    deviance warned); where the sample place's trials ran 11 degrees off, the turn's longer trials show the
    conjugate and the object's own frame is taken (before: the conjugate, NCC -0.87, said at the end). Scored by
    the calibration matrix's scorer (frames a quarter turn apart matched); told the truth these reach 0.86-0.87."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "calibration_matrix"))
    from matrix import score_run

    path = files[name]
    rec = run_file(path, tmp_path)
    autos = yaml.safe_load(rec.results.attrs["auto_values"])
    turn = autos["experiment.scan_rotation_deg"] - xff.CASES[name][-1]
    assert abs((turn + 45.0) % 90.0 - 45.0) < 0.5  # the turn, up to the quarter turns the flags take
    assert autos["experiment.sample_side"] == "upstream"
    assert score_run(tmp_path / "out" / "results.h5", path)["ncc"] > 0.85
    assert rec.results.attrs["phase_absorption_correlation"] > CONJUGATE_CLEAR
    assert warnings_of(rec) == []


def test_the_sample_s_distance_between_the_three_tried_is_found():
    """The three distances' data terms (0.6, 1 and 1.6 times the overlap's) from a judge whose trials' data term is
    least at 1.31 times it, between two of them, and rises as the square of the log of the distance (as a 6-iteration
    trial's does on a simulated file read by a detector of modules, 4.4e7 photons, where 1 times it cost 0.06 NCC):
    the parabola's lowest point is tried and taken, within 3 %."""
    from ptyacc.data.autocalibration import Verdict, _sample_place

    overlap_A, truth_m = 2.0e7, -1.31 * 2e-3

    def judge(candidates, **_):
        losses = tuple(math.log(c.focus_to_sample_m / truth_m) ** 2 if c.focus_to_sample_m < 0 else 5.0
                       for c in candidates)
        return Verdict(candidates[losses.index(min(losses))], "tried", correlation=0.5, losses=losses)

    place = _sample_place(judge, (False, False, False), 0.0, (False, False), True, overlap_A)
    assert place.side == "upstream" and place.focus_to_sample_m == pytest.approx(truth_m, rel=0.03)
    assert "the parabola through the three distances" in place.line


def test_a_conjugate_trial_object_takes_the_object_s_own_frame():
    """``_object_framed``: a trial object whose phase falls where it absorbs (below -CONJUGATE_CLEAR) under measured
    flags or a measured rotation takes the pair's other member and the sample to the other side at the same distance:
    with the rotation measured (flags measured or given, as basis vectors give them), the scan turned by 180 degrees
    (the flips, and their place against the zero frequency, kept), with it given, flip_y and flip_x reversed; a
    right-signed or unclear one, or flags and rotation both given, leave the place as it is."""
    from ptyacc.data.autocalibration import SamplePlace, _object_framed

    place = SamplePlace("downstream", 2.5e-3, (True, True, True), "taken", 30.0)
    swapped = _object_framed(place, -CONJUGATE_CLEAR - 0.05, True, False)
    assert (swapped.side, swapped.flags, swapped.rotation_deg) == ("upstream", (True, False, False), 30.0)
    assert swapped.focus_to_sample_m == pytest.approx(-2.5e-3) and "the conjugate" in swapped.line
    turned = _object_framed(place, -CONJUGATE_CLEAR - 0.05, True, True)
    assert (turned.side, turned.flags, turned.rotation_deg) == ("upstream", (True, True, True), -150.0)
    assert _object_framed(dataclasses.replace(place, rotation_deg=-30.0), -0.9, True, True).rotation_deg == 150.0
    assert _object_framed(place, -0.9, False, True).rotation_deg == -150.0  # flags given: the rotation turned alone
    for correlation, measured, rotation in ((-CONJUGATE_CLEAR + 0.05, True, True), (0.6, True, True),
                                            (None, True, True), (-0.9, False, False)):
        assert _object_framed(place, correlation, measured, rotation) == place
    # a weak absorber: its phase departing forward takes the other member, backward keeps it
    weak = _object_framed(place, -0.1, True, False, skew=2.5)
    assert (weak.side, weak.flags) == ("upstream", (True, False, False)) and "skew +2.50" in weak.line
    assert _object_framed(place, -0.1, True, False, skew=-2.5) == place
    assert _object_framed(place, 0.6, True, False, skew=2.5) == place  # a clear absorption outweighs the skew


def test_the_trials_turn_to_the_centre_of_mass_s_member_of_the_pair():
    """``_phase_delayed``: trials that ran at the default side took the turn by 180 degrees of the centre of mass's
    frame (a weak absorber upstream of the focus, the trials' files: the conjugate, NCC -0.98, said nothing): the
    centre of mass's member is taken, the rotation turned where measured, the flips reversed where given; a frame the
    trials took that is the centre of mass's own, mirrored, or a quarter turn from it is kept."""
    from ptyacc.data.autocalibration import _phase_delayed
    from ptyacc.data.orientation import Orientation, frame_difference

    found = Orientation((False, False, False), -5.46, 0.42, 0.70, (1.27, -11.36), -0.52, 281)
    flags, rotation_deg, said = _phase_delayed((False, True, True), 1.78, found, True)
    assert (flags, rotation_deg) == ((False, True, True), 1.78 - 180.0) and "divergence skew -0.52" in said
    mirrored, off_deg = frame_difference(flags, rotation_deg, found.flags, found.rotation_deg)
    assert not mirrored and abs(off_deg) < 10.0  # the centre of mass's frame, up to its rotation's error
    assert _phase_delayed((False, True, True), -170.0, found, True)[1] == -170.0  # the centre of mass's own frame
    given = dataclasses.replace(found, rotation_deg=0.0)
    assert _phase_delayed((False, True, True), 0.0, given, False)[:2] == ((False, False, False), 0.0)
    for kept in (((False, False, False), 1.78), ((True, False, False), 1.78), ((True, True, False), 1.78),
                 ((False, True, True), 91.78)):
        assert _phase_delayed(*kept, found, True) == (*kept, "")


def test_a_weak_absorber_whose_flips_the_trials_chose_is_said_to_be_perhaps_its_conjugate():
    """Where trials chose the flips and the side and the object's phase against its absorption is too weak to tell
    it from its conjugate, the run says so, with the keys of either frame; a clear correlation says nothing here."""
    from ptyacc.data.trouble import unsure_conjugate_warning

    [said] = unsure_conjugate_warning(0.17, (False, True, True), "downstream")
    assert "this may be the conjugate of the object" in said and "+0.17" in said
    assert "set experiment.sample_side: upstream with data.transform.orientation: manual, transpose: False, " \
           "flip_y: False, flip_x: False" in said and "experiment.sample_side: downstream to keep this frame" in said
    for correlation in (CONJUGATE_CLEAR, -CONJUGATE_CLEAR - 0.1, 0.8):
        assert unsure_conjugate_warning(correlation, (False, True, True), "downstream") == []
    # the object's phase clearly delayed (a skew under -PHASE_ADVANCED_SKEW) says which member: nothing to say
    assert unsure_conjugate_warning(0.17, (False, True, True), "downstream", -PHASE_ADVANCED_SKEW - 0.1) == []
    [said] = unsure_conjugate_warning(0.17, (False, True, True), "downstream", -PHASE_ADVANCED_SKEW + 0.1)
    assert f"skew {-PHASE_ADVANCED_SKEW + 0.1:+.2f}" in said


@pytest.mark.slow
def test_a_weak_absorber_whose_centre_of_mass_took_the_conjugate_is_turned_by_its_trial_object_s_phase(files, tmp_path):
    """A weak absorber upstream whose centre of mass tells the handedness but reads the turn by 180 degrees from a
    skew lost in the noise: it took the conjugate's member, the side's trials followed (downstream), and the run ended
    at NCC -0.99 against told 0.99 with no warning. The side's trial object's phase departs from its background
    forward (skew +2.5; the object's own, -2.5): the pair's other member and the other side are taken, the object
    comes within 0.02 of told, its phase's skew is a delay's and nothing warns. Without trials (the centre of mass's
    member, the sample downstream) the run ends at the conjugate, and its end says so by the skew."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "calibration_matrix"))
    from matrix import score_run

    path = files["test_weak_turned"]
    rec = run_file(path, tmp_path)
    log = (tmp_path / "out" / "run.log").read_text()
    assert "is the conjugate (its phase departs from its background forward" in log
    autos = yaml.safe_load(rec.results.attrs["auto_values"])
    assert autos["experiment.sample_side"] == "upstream"
    assert score_run(tmp_path / "out" / "results.h5", path)["ncc"] > 0.97
    assert rec.results.attrs["phase_skew"] < -PHASE_ADVANCED_SKEW
    assert warnings_of(rec) == []
    assert "conjugate pair: the object absorbs too little" in log and "experiment.sample_side: downstream" in log
    untried = run_file(path, tmp_path / "untried", **{"data.transform.orientation_trials": 0})
    assert score_run(tmp_path / "untried" / "out" / "results.h5", path)["ncc"] < -0.5  # the rotation unrefined: -0.80
    assert untried.results.attrs["phase_skew"] > PHASE_ADVANCED_SKEW
    [said] = warnings_of(untried)
    assert "this is likely the conjugate of the object" in said and "experiment.sample_side: upstream" in said
    assert "conjugate pair:" not in (tmp_path / "untried" / "out" / "run.log").read_text()  # the warning spoke


@pytest.mark.slow
def test_a_sample_s_distance_given_a_fifth_short_is_refined_near_the_truth(files, tmp_path):
    """The sample 2.8 mm past the focus, the run told 2.24 mm (a fifth short, as the side's trials can find it) and
    the rest of the truth: init's config refines the probe's focus (``optim.start.probe_focus``, its step auto, a
    share of the beam's depth of focus), and the run ends with the sample's place within a third of the error it
    started with, run.log's end saying where; it fits the data better than the same run without the refinement and
    its object is as like the truth."""
    path = files["test_o0"]
    _, _, truth = stored(path)
    told = {"data.transform.orientation": "manual", "data.transform.transpose": truth[0],
            "data.transform.flip_y": truth[1], "data.transform.flip_x": truth[2], "experiment.scan_rotation_deg": 0,
            "experiment.focus_to_sample_m": 2.24e-3}
    refined = run_file(path, tmp_path / "refined", **told)
    attrs = refined.results.attrs
    assert attrs["probe_focus_to_sample_start_m"] == 2.24e-3
    end_m = 2.24e-3 - attrs["probe_focus_change_A"] * 1e-10
    assert abs(end_m - 2.8e-3) < 0.56e-3 / 3, end_m
    log = (tmp_path / "refined" / "out" / "run.log").read_text()
    assert f"experiment.focus_to_sample_m: {end_m:.6g} starts a run there" in log
    assert "optim.lr.probe_focus:" in log and "(auto: 0.0" in log
    fixed = run_file(path, tmp_path / "fixed", **told, **{"optim.start.probe_focus": "null"})
    assert "probe_focus_change_A" not in fixed.results.attrs
    assert refined.poisson_deviance < fixed.poisson_deviance
    assert truth_ncc(refined, path) > truth_ncc(fixed, path) - 0.002, (truth_ncc(refined, path), truth_ncc(fixed, path))


@pytest.mark.slow
def test_a_weak_absorber_upstream_whose_flips_the_trials_chose_is_not_its_conjugate(xff, files, tmp_path):
    """A weak absorber upstream of the focus whose centre of mass cannot tell the handedness, the stage's turn given:
    the trials, run with the sample downstream, take the conjugate's member of the pair, and the side's trials follow
    it (before: NCC -0.977 against told 0.984, no warning); the centre of mass's member is taken instead, the side's
    trials find upstream, the object comes within 0.02 of told; its phase against its absorption is too weak to tell
    the pair apart, but its phase's skew says delayed, so that the run's end has nothing to say."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "calibration_matrix"))
    from matrix import score_run

    path = files["test_weak_upstream"]
    rec = run_file(path, tmp_path, **{"experiment.scan_rotation_deg": xff.CASES["test_weak_upstream"][7]})
    autos = yaml.safe_load(rec.results.attrs["auto_values"])
    assert rec.results.detector["orientation_by_trials"] and autos["experiment.sample_side"] == "upstream"
    assert score_run(tmp_path / "out" / "results.h5", path)["ncc"] > 0.95
    assert abs(rec.results.attrs["phase_absorption_correlation"]) < CONJUGATE_CLEAR
    assert rec.results.attrs["phase_skew"] < -PHASE_ADVANCED_SKEW
    assert warnings_of(rec) == []


@pytest.mark.slow
def test_an_upstream_sample_s_side_is_found_by_trials(files, tmp_path):
    """The sample 2.8 mm upstream of the focus, nothing in the file says so: init's experiment.sample_side: auto
    tries both sides of the probe's focus and keeps the upstream one; the run reconstructs the object itself, as
    told the truth."""
    path = files["test_upstream"]
    rec = run_file(path, tmp_path)
    autos = yaml.safe_load(rec.results.attrs["auto_values"])
    assert autos["experiment.sample_side"] == "upstream" and autos["experiment.focus_to_sample_m"] < 0
    assert truth_ncc(rec, path) > 0.85
    assert warnings_of(rec) == []
    downstream = run_file(path, tmp_path / "downstream", **{"experiment.sample_side": "downstream"})
    assert truth_ncc(downstream, path) < 0.5  # started on the wrong side, the run stalls


@pytest.mark.slow
def test_the_conjugate_object_is_said(files, tmp_path):
    """Flags reversed in both axes under a probe started on the other side, the stage's rotation given (0: a measured
    one would take the reversal for a turn by 180 degrees), fit the data as the conjugate object: the end check says
    so and names the flags and the side that give the object itself."""
    path = files["test_o5"]
    _, _, (t, fy, fx) = stored(path)
    rec = run_file(path, tmp_path, **{"data.transform.orientation": "manual", "data.transform.transpose": t,
                                      "data.transform.flip_y": not fy, "data.transform.flip_x": not fx,
                                      "experiment.sample_side": "upstream", "experiment.scan_rotation_deg": 0})
    assert truth_ncc(rec, path) < -0.8
    said = [w for w in warnings_of(rec) if "conjugate of the object" in w]
    assert len(said) == 1 and f"transpose: {t}, flip_y: {fy}, flip_x: {fx}" in said[0]
    assert "experiment.sample_side: downstream" in said[0]


def test_the_place_s_trials_and_a_conjugate_turned_into_the_object():
    """The sample's place (``_sample_place``) with a judge that takes the trial at 1.6 times the overlap's distance
    upstream: the run starts there; where that trial's object reads as the conjugate and the flags were measured,
    the pair's other member and the other side are taken (the object's own frame, the same data); flags given are
    kept; without a judge, downstream at the overlap's distance (the probe start's own)."""
    from ptyacc.data.autocalibration import PLACE_SCALES, Verdict, _sample_place

    tried = []

    def judge_with(correlation):
        def judge(candidates, **_):  # the last candidate, at a lower data term in each call
            tried.append([c.focus_to_sample_m for c in candidates])
            losses = tuple(-float(len(tried)) * (i + 1) for i in range(len(candidates)))
            return Verdict(candidates[-1], "tried", correlation=correlation, losses=losses)
        return judge

    flags, overlap_A = (True, False, True), 2.0e7  # 2 mm
    place = _sample_place(judge_with(0.5), flags, 0.0, (False, False), True, overlap_A)
    assert tried == [pytest.approx([2e-3, -2e-3]),  # the side first, then the other distances on it
                     pytest.approx([-f * 2e-3 for f in PLACE_SCALES if f != 1.0])]
    assert (place.side, place.flags) == ("upstream", flags) and place.focus_to_sample_m == pytest.approx(-3.2e-3)
    place = _sample_place(judge_with(-0.6), flags, 0.0, (False, False), True, overlap_A)
    assert (place.side, place.flags) == ("downstream", (True, True, False)) and "the conjugate" in place.line
    assert place.focus_to_sample_m == pytest.approx(3.2e-3)
    assert _sample_place(judge_with(-0.6), flags, 0.0, (False, False), False, overlap_A).flags == flags
    place = _sample_place(None, flags, 0.0, (False, False), True, overlap_A)
    assert (place.side, place.focus_to_sample_m, place.flags) == ("downstream", None, flags)


@pytest.mark.slow
@pytest.mark.processes
def test_one_and_two_processes_take_the_same_flags_and_place(files, tmp_path):
    """init's config on a flipped detector: the centre of mass's flags and the place's trials (each sees the
    all-reduced data term, and the main process's trial object where it is split) decide alike on 1 and 2 processes
    and with the object split, and the runs agree."""
    from test_distributed import launched_four_ways

    path = files["test_o5"]
    config = yaml.safe_load(init_config(path, tmp_path / "scan.yaml"))
    config["data"]["path"] = str(path)
    config["data"]["transform"]["orientation_trials"] = 2
    config.update(optim={"iterations": 2, "batch_size": 32}, output={"figures": False})
    found = launched_four_ways(tmp_path, config)
    keys = ("data.transform.transpose", "data.transform.flip_y", "data.transform.flip_x", "experiment.sample_side",
            "experiment.focus_to_sample_m")
    for autos, _ in found.values():
        assert {key: autos[key] for key in keys[:4]} == {key: found["p1"][0][key] for key in keys[:4]}
        # the distance, the lowest point of a parabola through the trials' data terms, is continuous in them: alike
        # where the batches are (1 and 2 processes; the data split and the object split), near where they are not
        assert autos[keys[4]] == pytest.approx(found["p1"][0][keys[4]], rel=0.03)
    assert found["p2"][0][keys[4]] == found["p1"][0][keys[4]] and found["split"][0][keys[4]] == found["data"][0][keys[4]]
    assert tuple(found["p1"][0][key] for key in keys[:3]) == stored(path)[2]
    # two processes give the one process's answer; the object split batches as shard_data does, and gives its answer
    # (before, a sharded X-ray run's probe started from each process's own patterns: the processes drifted apart)
    assert np.abs(found["p2"][1] - found["p1"][1]).max() < 1e-4
    assert np.abs(found["split"][1] - found["data"][1]).max() < 1e-4
