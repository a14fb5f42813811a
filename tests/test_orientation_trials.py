"""``data.transform.orientation_trials`` (ptyacc/reconstruction/trials.py): where the data leave the detector's
orientation open, short reconstructions of the candidates choose it and then refine the scan rotation. The
candidates' frames against NumPy's rotation and flip matrices, the parabola's lowest point against a known
answer, and the trials on a few-count file of the independent simulator (benchmarks/grid/simulate.py), whose
true frame is the check."""

import dataclasses
import re

import numpy as np
import pytest

from ptyacc.config import load_config
from ptyacc.data import overlap_orientation
from ptyacc.data.autocalibration import TRIALS_SURE, OrientationCandidate, Verdict, orientation_candidates
from ptyacc.data.load import load_data
from ptyacc.data.overlap_orientation import OverlapOrientation
from ptyacc.data.trouble import Unsettled, trials_unsettled_warning
from ptyacc.reconstruction.trials import AUTO_ITERATIONS, FINE, FINE_DEG, FOCUS_GRAIN, GRAIN_DEG, SIDE, OrientationTrials, _vertex

TRUE_ROTATION, TRUE_DEFOCUS = 20.0, 120.0


def frame(flags, rotation_deg: float) -> np.ndarray:
    """R(theta)^T F: the map from the prepared patterns' axes to the scan's (NumPy, independent of ptyacc)."""
    t = np.radians(rotation_deg)
    turn = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    transpose, flip_y, flip_x = flags
    flips = np.diag([-1.0 if flip_y else 1.0, -1.0 if flip_x else 1.0])
    swap = np.array([[0.0, 1.0], [1.0, 0.0]]) if transpose else np.eye(2)
    return turn.T @ flips @ swap


def off_deg(flags, rotation_deg, true_flags, true_rotation_deg) -> tuple[float, bool]:
    """The angle (degrees) between two frames and whether they differ by a mirror."""
    difference = frame(flags, rotation_deg) @ frame(true_flags, true_rotation_deg).T
    return float(np.degrees(np.arctan2(difference[1, 0], difference[0, 0]))), bool(np.linalg.det(difference) < 0)


def off_used(data, flags, rotation_deg) -> tuple[float, bool]:
    """``off_deg`` of the frame a load used (its autos) against ``flags`` and ``rotation_deg``."""
    autos = data.autos
    used = (autos["data.transform.transpose"], autos["data.transform.flip_y"], autos["data.transform.flip_x"])
    return off_deg(used, autos["experiment.scan_rotation_deg"], flags, rotation_deg)


def off_truth(data) -> tuple[float, bool]:
    """``off_deg`` of the frame a load used (its autos) against the faint file's true one."""
    return off_used(data, (True, False, False), TRUE_ROTATION)


def turning_judge(turn_deg: float, seen: list | None = None):
    """A judge that turns its one candidate, a broad peak, by ``turn_deg``, noting (candidate, turn) in ``seen``."""
    def judge(candidates, turn=True, focus=True, modes=False):
        (peak,) = candidates
        if seen is not None:
            seen.append((peak, turn))
        return Verdict(dataclasses.replace(peak, rotation_deg=peak.rotation_deg + turn_deg), "judged")
    return judge


def test_the_parabola_is_lowest_where_it_should_be():
    for x0 in (-0.4, 0.0, 0.3):
        left, middle, right = ((x - x0) ** 2 for x in (-1.0, 0.0, 1.0))
        assert _vertex(left, middle, right) == pytest.approx(x0)
    assert _vertex(0.0, 1.0, 0.0) == 0.0  # no minimum between: the middle
    assert _vertex(10.0, 0.0, 0.0) == 0.5  # kept within half a step


def test_the_candidates_are_distinct_frames():
    def peak(flags, rotation_deg, defocus_A=100.0):
        return OverlapOrientation(flags, rotation_deg, defocus_A, 0.0)

    best = peak((False, True, True), 10.0)
    rivals = (peak((True, False, False), 40.0),  # another frame
              peak((False, False, False), 190.0))  # flips on both axes are a turn by 180: the best's frame again
    searched = OverlapOrientation(best.flags, best.rotation_deg, 100.0, 1.1, rivals)
    kept = orientation_candidates((True, True, False), -30.0, "the centre of mass", searched)
    assert [c.found_by for c in kept] == ["the Fourier regions' best peak", "a rival peak", "the centre of mass"]
    assert kept[0].defocus_A == 100.0 and kept[-1].defocus_A is None
    assert off_deg(rivals[1].flags, rivals[1].rotation_deg, best.flags, best.rotation_deg) == pytest.approx((0.0, False))
    for i, one in enumerate(kept):
        for other in kept[:i]:
            angle, mirrored = off_deg(one.flags, one.rotation_deg, other.flags, other.rotation_deg)
            assert mirrored or abs(angle) > 5.0


@pytest.fixture(scope="module")
def faint(grid_simulator, tmp_path_factory):
    """1e3 counts on a 16 x 16 raster turned 20 degrees, patterns transposed: the centre of mass is noise."""
    path = tmp_path_factory.mktemp("trials") / "faint.h5"
    setting = grid_simulator.Setting(detector_px=48, scan_shape=(16, 16), scan_step_A=0.45, dose=1e3,
                                     defocus_A=TRUE_DEFOCUS, edge_mrad=50.0, seed=2, scan_rotation_deg=TRUE_ROTATION,
                                     transpose=True)
    grid_simulator.write(str(path), setting)
    return path


def faint_config(path, **optim) -> dict:
    return {"data": {"path": str(path), "transform": {"orientation": "auto"}},
            "experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto", "scan_step_A": 0.45},
            "optim": {"iterations": 6, **optim}, "runtime": {"progress": False, "threads": 1}}


@pytest.mark.slow
@pytest.mark.parametrize("margin", [0.01, 0.001])
def test_an_unclear_search_hands_its_candidates_to_the_judge_and_takes_its_choice(faint, monkeypatch, margin):
    """The judge's choice is used; one it made by a data term barely below the next candidate's (under
    TRIALS_SURE) is said to be in doubt, with the keys that give the orientation; one made by a clearer margin is
    said too, since nothing measured the frame clearly: a wrong frame often wins by such margins at few counts."""
    monkeypatch.setattr(overlap_orientation, "CLEAR", 1e9)  # every search unclear
    seen = []
    chosen = OrientationCandidate((True, False, False), -3.0, TRUE_DEFOCUS, "the judge")
    rival = "transpose False, flip_y False, flip_x False, rotation 7.00 deg (a rival peak)"

    def judge(candidates):
        seen.extend(candidates)
        return Verdict(chosen, "judged", margin, rival)

    data = load_data(load_config(faint_config(faint)), judge=judge)
    assert len(seen) >= 2
    best = min(seen, key=lambda c: abs(off_deg(c.flags, c.rotation_deg, (True, False, False), TRUE_ROTATION)[0]))
    angle, mirrored = off_deg(best.flags, best.rotation_deg, (True, False, False), TRUE_ROTATION)
    assert not mirrored and abs(angle) < 5.0  # the truth is among them
    autos = data.autos
    # the choice is used (the disk's centring may turn it by quarter turns into the same frame)
    angle, mirrored = off_deg((autos["data.transform.transpose"], autos["data.transform.flip_y"],
                               autos["data.transform.flip_x"]), autos["experiment.scan_rotation_deg"],
                              chosen.flags, chosen.rotation_deg)
    assert not mirrored and abs((angle + 45.0) % 90.0 - 45.0) < 1e-6
    assert any("judged" in line for line in data.checks)
    doubt = [line for line in data.checks if line.startswith("warning: the trial reconstructions barely told")]
    assert len(doubt) == (margin < TRIALS_SURE)
    if doubt:
        assert "(a rival peak), ended 0.100% above the one taken" in doubt[0]
        assert "experiment.scan_rotation_deg" in doubt[0] and "data.transform.transpose" in doubt[0]
    unmeasured = [line for line in data.checks if line.startswith("warning: nothing measured the scan's frame")]
    assert len(unmeasured) == (margin >= TRIALS_SURE)  # one warning of the two, never both
    if unmeasured:
        assert f"among {len(seen)} candidates" in unmeasured[0] and f"({rival}) 1.00% above it" in unmeasured[0]
        assert "experiment.scan_rotation_deg" in unmeasured[0] and "data.transform.transpose" in unmeasured[0]
    assert not any(line.startswith("warning:") and "mirrored against the truth" in line for line in data.checks)


@pytest.mark.slow
@pytest.mark.parametrize("turn_deg", [-8.0, 3.0])
def test_trials_that_turn_a_broad_peak_far_are_said(faint, monkeypatch, turn_deg):
    """A clear but broad Fourier regions' peak (every one broad here) has its rotation turned by the trials: a turn
    over 5 degrees is two measures of one angle far apart, said with both angles and the key, and the run starts
    halfway between them; a turn of 3 is taken whole and not said."""
    from ptyacc.data import autocalibration

    monkeypatch.setattr(autocalibration, "SEARCH_SURE", 1e9)  # every clear peak broad: the trials turn it
    seen = []
    data = load_data(load_config(faint_config(faint)), judge=turning_judge(turn_deg, seen))
    (peak, turned), = seen
    assert turned and peak.found_by == "the Fourier regions' peak"
    warned = [line for line in data.checks if line.startswith("warning: the trial reconstructions turned the scan")]
    far = abs(turn_deg) > 5.0
    assert len(warned) == far
    start = peak.rotation_deg + (turn_deg / 2 if far else turn_deg)
    angle, mirrored = off_used(data, peak.flags, start)
    assert not mirrored and abs((angle + 45.0) % 90.0 - 45.0) < 1e-6  # the start (up to the centring's quarter turns)
    if warned:
        assert f"{turn_deg:+.1f} deg from the Fourier regions' peak ({peak.rotation_deg:.2f} deg" in warned[0]
        assert f"{peak.rotation_deg + turn_deg:.2f}" in warned[0] and "experiment.scan_rotation_deg" in warned[0]
        assert f"the run starts halfway, at {start:.2f} deg" in warned[0]


@pytest.mark.parametrize("turn_deg", [0.0, 3.0, -8.0])
def test_the_search_s_spread_is_said_after_a_small_turn_by_the_trials(faint, monkeypatch, turn_deg):
    """The Fourier regions' search's spread (every spread said here) stays the angle's uncertainty where the
    trials turn its broad peak a little, as where they leave it; a far turn is said by its own warning alone."""
    from ptyacc.data import autocalibration, trouble

    monkeypatch.setattr(autocalibration, "SEARCH_SURE", 1e9)
    monkeypatch.setattr(trouble, "ROTATION_UNSURE_DEG", 0.0)
    checks = load_data(load_config(faint_config(faint)), judge=turning_judge(turn_deg)).checks
    spread = [line for line in checks if line.startswith("warning: the Fourier regions' search fixes the scan rotation")]
    far = [line for line in checks if line.startswith("warning: the trial reconstructions turned the scan")]
    assert (len(spread), len(far)) == ((0, 1) if abs(turn_deg) > 5.0 else (1, 0))


@pytest.mark.slow
def test_a_verdict_taken_at_the_end_of_its_range_is_warned(faint, monkeypatch):
    """A judge whose defocus trials ended at the last value tried: the run says so, naming the key."""
    monkeypatch.setattr(overlap_orientation, "CLEAR", 1e9)  # every search unclear: the judge chooses
    chosen = OrientationCandidate((True, False, False), TRUE_ROTATION, 150.0, "the judge")

    def judge(candidates):
        return Verdict(chosen, "judged", 0.01, "a rival", (Unsettled("defocus", "150.0 A", "experiment.defocus_A"),))

    data = load_data(load_config(faint_config(faint)), judge=judge)
    said = [line for line in data.checks if line.startswith("warning: the trial reconstructions' data term still fell")]
    assert len(said) == 1 and "the last defocus they tried, 150.0 A" in said[0]
    assert "set experiment.defocus_A by hand" in said[0]


@pytest.mark.slow
@pytest.mark.parametrize("judged", [True, False])
def test_a_sure_parallax_that_the_search_mirrors_is_judged_or_warned(faint, monkeypatch, judged):
    """The centre of mass is noise and the parallax, sure of its handedness (50 times), gives the mirror of the
    truth; the Fourier search (clear on this file) gives the truth's handedness. With a judge, both go to it and
    its choice is used; without one, the parallax's stands and the run warns, naming the keys."""
    from ptyacc.data import autocalibration
    from ptyacc.data.parallax_orientation import ParallaxOrientation

    mirror = ParallaxOrientation((False, False, False), TRUE_ROTATION, TRUE_DEFOCUS, 50.0)
    monkeypatch.setattr(autocalibration, "_parallax_oriented", lambda *args: mirror)
    seen = []

    def judge(candidates):
        seen.extend(candidates)
        return Verdict(candidates[-1], "judged")

    data = load_data(load_config(faint_config(faint)), judge=judge if judged else None)
    angle, mirrored = off_truth(data)
    warned = [line for line in data.checks if line.startswith("warning: the bright-field parallax (its handedness")]
    if judged:
        assert [c.found_by for c in seen] == ["the bright-field parallax", "the Fourier regions' peak"]
        assert off_deg(seen[0].flags, seen[0].rotation_deg, (True, False, False), TRUE_ROTATION)[1]  # the mirror
        assert not mirrored and abs((angle + 45.0) % 90.0 - 45.0) < 5.0  # the search's frame, as judged
        assert not warned and any("judged" in line for line in data.checks)
    else:
        assert mirrored  # the parallax's frame stands,
        assert len(warned) == 1 and "data.transform.transpose" in warned[0]  # said to be in doubt


@pytest.mark.slow
def test_a_sure_parallax_of_the_search_s_handedness_keeps_its_rotation(faint, monkeypatch):
    """The same, the parallax of the truth's handedness 1.5 degrees off: no judge, no warning, its rotation kept
    (it lies nearer the truth than a search's on most such files)."""
    from ptyacc.data import autocalibration
    from ptyacc.data.parallax_orientation import ParallaxOrientation

    right = ParallaxOrientation((True, False, False), TRUE_ROTATION + 1.5, TRUE_DEFOCUS, 50.0)
    monkeypatch.setattr(autocalibration, "_parallax_oriented", lambda *args: right)

    def judge(candidates, turn=True, focus=True, modes=False):
        # no trials of the orientation where the parallax and the search agree on the handedness; the defocus the
        # coherence then measures (the shifts too large for the parallax's) is tried alone, in that orientation
        assert len(candidates) == 1 and not turn and focus and modes
        return Verdict(candidates[0], "the defocus tried")

    data = load_data(load_config(faint_config(faint)), judge=judge)
    autos = data.autos
    flags = (autos["data.transform.transpose"], autos["data.transform.flip_y"], autos["data.transform.flip_x"])
    angle, mirrored = off_deg(flags, autos["experiment.scan_rotation_deg"], right.flags, right.rotation_deg)
    assert not mirrored and abs((angle + 45.0) % 90.0 - 45.0) < 1.0  # the parallax's rotation (then the defocus's)
    assert any("the same handedness" in line for line in data.checks)
    assert not any(line.startswith("warning: the bright-field parallax (its handedness") for line in data.checks)


def _measured_parallax(defocus_A: float):
    """A parallax measurement that reads ``defocus_A`` and is trusted (made up: on the faint file the parallax's
    shifts are too large for the raster, so it would not be used)."""
    from ptyacc.data.parallax import Parallax

    return Parallax(defocus_A=defocus_A, defocus_error_A=2.0, c12a_A=0.0, c12b_A=0.0, c12_error_A=2.0,
                    rotation_left_deg=0.0, k_invA=np.zeros((8, 2)), shifts_A=np.zeros((8, 2)), errors_A=np.ones(8),
                    used=np.ones(8, bool), image=np.zeros((4, 4)), misfit=0.1, positions=256, reliable=True)


@pytest.mark.slow
@pytest.mark.parametrize("share", [0.7, 0.95])
@pytest.mark.parametrize("judged", [True, False])
def test_a_parallax_defocus_far_from_a_clear_search_s_is_tried_against_it(faint, monkeypatch, share, judged):
    """A sure parallax of the truth's frame beside a clear search of the same frame: where the parallax's defocus
    lies over 15 % from the search's, the two are handed to the judge as candidates of one frame (the run's probe
    modes, no turn), and the judge's choice is used; without trials (orientation_trials 0) the parallax's stands,
    with a warning naming both. Within 15 % neither happens: the parallax's is used."""
    from ptyacc.data import autocalibration
    from ptyacc.data.parallax_orientation import ParallaxOrientation

    right = ParallaxOrientation((True, False, False), TRUE_ROTATION, TRUE_DEFOCUS, 50.0)
    monkeypatch.setattr(autocalibration, "_parallax_oriented", lambda *args: right)
    monkeypatch.setattr(autocalibration, "measure_parallax",
                        lambda *args: (_measured_parallax(share * TRUE_DEFOCUS), "", 0.0))
    seen = []

    def judge(candidates, turn=True, focus=True, modes=False):
        seen.append((candidates, turn, focus, modes))
        return Verdict(dataclasses.replace(candidates[-1], defocus_A=candidates[-1].defocus_A + 1.0), "judged")

    config = faint_config(faint)
    if not judged:
        config["data"]["transform"]["orientation_trials"] = 0
    data = load_data(load_config(config), judge=judge if judged else None)
    used = data.autos["experiment.defocus_A"]
    warned = [line for line in data.checks if line.startswith("warning: the bright-field parallax and the Fourier "
                                                              "regions' search disagree on the defocus")]
    searched = data.detector.get("overlap_defocus_A")
    if share > 0.8:  # they agree: no trials, no warning, the parallax's defocus and no search's in results.h5
        assert not seen and not warned and used == pytest.approx(share * TRUE_DEFOCUS) and searched is None
        return
    assert searched is not None and abs(float(searched) - TRUE_DEFOCUS) < 0.15 * TRUE_DEFOCUS  # the search near the truth
    if judged:
        (candidates, turn, focus, modes), = seen
        assert [c.defocus_A for c in candidates] == pytest.approx([share * TRUE_DEFOCUS, float(searched)])
        assert all(c.flags == right.flags for c in candidates) and candidates[0].rotation_deg == candidates[1].rotation_deg
        assert not turn and focus and modes
        assert used == pytest.approx(float(searched) + 1.0) and not warned  # the judge's choice, as it refined it
        assert float(data.detector["trials_defocus_A"]) == pytest.approx(used)
    else:
        assert not seen and used == pytest.approx(share * TRUE_DEFOCUS)
        assert len(warned) == 1 and "experiment.defocus_A" in warned[0] and f"{float(searched):.1f}" in warned[0]


@pytest.mark.slow
@pytest.mark.parametrize("apart_deg", [12.5, 4.0])
@pytest.mark.parametrize("judged", [True, False])
def test_a_clear_centre_of_mass_far_from_a_clear_search_is_judged_or_warned(faint, monkeypatch, apart_deg, judged):
    """A centre of mass clear of curl, used alone (no parallax), apart_deg from the truth beside a clear search of the
    truth's frame: within 10 degrees the search's rotation replaces it; further, the judge chooses between the two
    (its choice used), or without one the centre of mass's stands with a warning naming both frames."""
    from ptyacc.data import autocalibration
    from ptyacc.data.orientation import Orientation

    com = Orientation((True, False, False), TRUE_ROTATION + apart_deg, 0.1, 0.9, (TRUE_ROTATION + apart_deg,) * 2,
                      -0.5, 256)
    monkeypatch.setattr(autocalibration, "measure_orientation", lambda *args, **kwargs: (com, "centre of mass"))
    monkeypatch.setattr(autocalibration, "_parallax_oriented", lambda *args: None)
    seen = []

    def judge(candidates, turn=True, focus=True, modes=False):
        seen.append(candidates)
        return Verdict(candidates[-1], "judged")

    data = load_data(load_config(faint_config(faint)), judge=judge if judged else None)
    angle, mirrored = off_truth(data)
    warned = [line for line in data.checks if line.startswith("warning: the centre of mass (scan rotation")]
    orientation_trials = [c for c in seen if len(c) == 2 and c[0].found_by == "the centre of mass"]
    if apart_deg < 10.0:  # the search's rotation replaces the centre of mass's: no trials between them, no warning
        assert not orientation_trials and not warned
        assert any("from the centre of mass's" in line for line in data.checks)
        return
    if judged:  # the judge's choice, the search's frame, is used
        (candidates,) = orientation_trials
        assert candidates[0].rotation_deg == com.rotation_deg and candidates[1].found_by == "the Fourier regions' peak"
        assert not warned and any("judged" in line for line in data.checks)
        assert not mirrored and abs((angle + 45.0) % 90.0 - 45.0) < 5.0
    else:  # the centre of mass's stands, said
        assert not seen and len(warned) == 1 and not mirrored and abs(abs(angle) - apart_deg) < 2.0
        assert f"rotation {com.rotation_deg:.2f} deg" in warned[0] and "deg apart" in warned[0]
        assert "experiment.scan_rotation_deg" in warned[0] and "data.transform.transpose" in warned[0]


@pytest.mark.slow
def test_a_given_rotation_keeps_the_trials_doubt(faint, monkeypatch):
    """The scan rotation given, the flags auto at few counts: the judge's doubt is said beside the checks of the
    given rotation, not replaced by them."""
    monkeypatch.setattr(overlap_orientation, "CLEAR", 1e9)  # every search unclear

    def judge(candidates):
        assert len(candidates) >= 2
        return Verdict(candidates[0], "judged", 0.001, candidates[1].line())

    config = faint_config(faint)
    config["experiment"]["scan_rotation_deg"] = TRUE_ROTATION
    data = load_data(load_config(config), judge=judge)
    assert any("judged" in line for line in data.checks)
    assert any(line.startswith("warning: the trial reconstructions barely told") for line in data.checks)


@pytest.mark.slow
def test_the_trials_take_the_true_frame_and_refine_its_rotation(faint):
    from accelerate import Accelerator

    from ptyacc.reconstruction.engine import reconstruct

    config = load_config(faint_config(faint))
    judge = OrientationTrials(config, Accelerator(cpu=True), reconstruct)
    true_flags = (True, False, False)
    candidates = [OrientationCandidate((False, False, False), TRUE_ROTATION + 5.0, TRUE_DEFOCUS, "mirrored"),
                  OrientationCandidate(true_flags, TRUE_ROTATION + 5.0, TRUE_DEFOCUS, "5 degrees off")]
    verdict = judge(candidates)
    assert verdict.taken.flags == true_flags and "5 degrees off" in verdict.said
    assert abs(verdict.taken.rotation_deg - TRUE_ROTATION) < abs(5.0) - 2.0  # nearer the truth than the candidate was


@pytest.mark.slow
@pytest.mark.parametrize("stored", [True, False])
def test_a_turn_and_a_defocus_of_the_loaded_data_are_what_a_reading_with_them_gives(grid_simulator, tmp_path, stored):
    """The rotation's and defocus's trials reuse the candidate's dataset (positions turned, defocus set) instead of
    reading the file again: the same positions on the object's canvas, the same probe, patterns and loss as the
    file read and calibrated with them; one reading per candidate orientation."""
    import dataclasses

    from accelerate import Accelerator

    from ptyacc.physics.geometry import ObjectGeometry
    from ptyacc.reconstruction.engine import reconstruct

    path = tmp_path / "faint.h5"
    grid_simulator.write(str(path), grid_simulator.Setting(
        detector_px=48, scan_shape=(16, 16), scan_step_A=0.45, dose=1e3, defocus_A=TRUE_DEFOCUS, edge_mrad=50.0,
        seed=2, scan_rotation_deg=TRUE_ROTATION, transpose=True, write_positions=stored))
    raw = faint_config(path, iterations=2, batch_size=32)
    raw["data"]["scan_shape"] = [16, 16]
    raw["optim"]["start"] = {"probe_focus": 1, "scan_affine": 4}  # the run's; the trials compare the defoci and
    raw["model"] = {**raw.get("model", {}), "scan_affine": "rotation"}  # rotations they are given
    judge = OrientationTrials(load_config(raw), Accelerator(cpu=True), reconstruct)
    judge.iterations = 2
    first = OrientationCandidate((True, False, False), TRUE_ROTATION + 5.0, TRUE_DEFOCUS, "a peak")
    assert judge.trial_config(first).optim.start.probe_focus is None
    assert judge.trial_config(first).optim.start.scan_affine is None
    judge.dataset(first, judge.trial_config(first))
    moved = dataclasses.replace(first, rotation_deg=TRUE_ROTATION - 1.0, defocus_A=1.08 * TRUE_DEFOCUS)
    reused = judge.dataset(moved, judge.trial_config(moved))
    read = load_data(judge.trial_config(moved))
    assert judge.reads == 1
    assert np.array_equal(reused.patterns, read.patterns) and reused.aberrations == read.aberrations
    canvas = [ObjectGeometry.around(d.positions_A, d.dx_A, d.detector_px) for d in (reused, read)]
    assert np.abs(canvas[0].positions_px - canvas[1].positions_px).max() < 1e-9
    assert canvas[0].shape == canvas[1].shape
    losses = [judge.loss(moved) for _ in range(2)]  # the second on the same reused arrays: nothing changed them
    fresh = reconstruct(judge.trial_config(moved), judge.accelerator, data=read, write=False, quiet=True).loss[-1]
    assert losses[0] == losses[1] and losses[0] == pytest.approx(float(fresh), rel=1e-6)
    other = dataclasses.replace(first, flags=(False, False, False))
    judge.dataset(other, judge.trial_config(other))
    assert judge.reads == 2  # another orientation is read anew


class _Bowl(OrientationTrials):
    """Trials whose data term is a bowl in the scan rotation, lowest at ``lowest_deg``, and higher by 1 for the
    mirrored frame (no reconstruction)."""

    def __init__(self, lowest_deg: float, lowest_defocus_A: float = 100.0, level: float = 0.0) -> None:
        from types import SimpleNamespace

        self.iterations, self.lowest_deg, self.lowest_defocus_A, self.asked = 6, lowest_deg, lowest_defocus_A, []
        self.read, self.level, self.modes, self.correlations, self.stand_ins, self.skews = {}, level, False, {}, {}, {}
        self.accelerator = SimpleNamespace(is_main_process=True)
        self.config = load_config({"data": {"path": "x.h5"}, "experiment": {"defocus_A": "auto"}})

    def loss(self, candidate, iterations=None) -> float:
        self.asked.append(candidate.rotation_deg)
        focus = 0.0 if candidate.defocus_A is None else 20.0 * np.log(candidate.defocus_A / self.lowest_defocus_A) ** 2
        return (candidate.rotation_deg - self.lowest_deg) ** 2 / 50.0 + (candidate.flags[0] is False) + focus + \
            self.level


@pytest.mark.parametrize("lowest_deg", [1.0, -4.2, 10.0, -12.8])
def test_the_rotation_walks_to_the_lowest_data_term(lowest_deg, capsys):
    judge = _Bowl(lowest_deg)
    verdict = judge([OrientationCandidate((True, False, False), 0.0, None, "a peak"),
                     OrientationCandidate((False, False, False), 0.0, None, "its mirror")])
    taken, said = verdict.taken, verdict.said
    told = capsys.readouterr().err  # before the trials: both kinds of trial named
    assert f"trying them by short reconstructions of {AUTO_ITERATIONS} iterations, then the rotation taken " \
           f"{FINE_DEG:g} deg apart by {2 * SIDE + 1} of {FINE * AUTO_ITERATIONS}" in told
    assert taken.flags == (True, False, False) and taken.rotation_deg == pytest.approx(lowest_deg, abs=1e-9)
    assert f"{lowest_deg:.2f} deg is used" in said
    # the candidates, the four turns, at most three more, the five finer turns of longer trials
    assert len(judge.asked) <= 2 + 2 * 2 + 3 + 2 * SIDE + 1
    best, mirror = (lowest_deg ** 2 / 50.0, lowest_deg ** 2 / 50.0 + 1.0)  # the bowl's data terms at 0 degrees
    assert verdict.margin == pytest.approx((mirror - best) / best) and verdict.rival.endswith("(its mirror)")
    alone = judge([OrientationCandidate((True, False, False), 0.0, None, "a peak")])
    assert alone.margin is None and alone.rival is None  # no other candidate: nothing to be in doubt against


def test_the_rotation_walks_on_in_strides_that_double_until_the_data_term_rises():
    """Past the last step (-15 degrees) the strides are 2, 4 and 8 steps (-21, -33, -57): a bowl at -40 is bracketed
    by -33 and -57 and found by the parabola through uneven points; a bowl at -80 is not, and the verdict says so."""
    judge = _Bowl(-40.0)
    verdict = judge([OrientationCandidate((True, False, False), 0.0, None, "a peak")])
    assert verdict.taken.rotation_deg == pytest.approx(-40.0, abs=1e-9) and verdict.unsettled == ()
    assert sorted(set(judge.asked) - set(np.arange(-42.0, -37.5))) == [-57.0, -33.0, -21.0, -15.0, -12.0, -9.0, -6.0,
                                                                       -3.0, 0.0, 3.0, 6.0]  # and -42 ... -38: finer
    judge = _Bowl(-80.0)
    verdict = judge([OrientationCandidate((True, False, False), 0.0, None, "a peak")])
    assert verdict.taken.rotation_deg == -57.0 and min(judge.asked) == -57.0  # no finer turns past an unsettled end
    assert verdict.unsettled == (Unsettled("scan rotation", "-57.00 deg", "experiment.scan_rotation_deg"),)


class _Blurred(_Bowl):
    """A bowl whose short trials' lowest point lies ``short_off`` degrees from the longer trials' (``lowest_deg``), as
    the 6-iteration trials' lay a degree or two from the 12-iteration ones' on the calibration matrix's w121-19; the
    longer trials' data terms jittered by ``jitter`` (of 1 at one degree off) and their bowl ``longer_shape`` ("bowl";
    "flat": no lowest point, falling the whole way)."""

    def __init__(self, lowest_deg: float, short_off: float, jitter: float, longer_shape: str = "bowl") -> None:
        super().__init__(lowest_deg)
        self.short_off, self.jitter, self.longer_shape, self.longer = short_off, jitter, longer_shape, []

    def loss(self, candidate, iterations=None) -> float:
        if iterations is None:  # the trials' own: a bowl lowest short_off away
            return (candidate.rotation_deg - self.lowest_deg - self.short_off) ** 2 / 50.0
        assert iterations == FINE * self.iterations
        self.longer.append(candidate.rotation_deg)
        off = candidate.rotation_deg - self.lowest_deg
        wobble = self.jitter * np.sin(7.3 * candidate.rotation_deg)  # a deterministic jitter
        return (off ** 2 if self.longer_shape == "bowl" else -off) + wobble


@pytest.mark.parametrize("lowest_deg, short_off", [(3.0, 1.5), (-7.4, -1.2), (0.6, 0.0)])
def test_the_rotation_is_then_turned_by_longer_trials_a_degree_apart(lowest_deg, short_off):
    """The short trials' rotation a degree or two off is turned to within 0.15 degrees of the longer trials'
    lowest point, through their jitter, by the least-squares parabola over the five; where their data term has no
    lowest point the short trials' rotation is kept."""
    judge = _Blurred(lowest_deg, short_off, jitter=0.2)
    verdict = judge([OrientationCandidate((True, False, False), 0.0, None, "a peak")])
    start = lowest_deg + short_off  # where the short trials' parabola lands
    assert judge.longer == pytest.approx([start + k * FINE_DEG for k in range(-SIDE, SIDE + 1)], abs=1e-9)
    assert abs(verdict.taken.rotation_deg - lowest_deg) < 0.15
    assert f"then tried {FINE_DEG:g} deg apart by trials of {FINE * AUTO_ITERATIONS} iterations" in verdict.said
    assert verdict.unsettled == () and "lowest at" in verdict.said
    flat = _Blurred(lowest_deg, short_off, jitter=0.0, longer_shape="flat")
    verdict = flat([OrientationCandidate((True, False, False), 0.0, None, "a peak")])
    assert verdict.taken.rotation_deg == pytest.approx(start, abs=1e-9) and "no lowest point" in verdict.said
    assert verdict.unsettled == ()


class _Correlated(_Blurred):
    """``_Blurred`` whose every trial object's phase against its log amplitude is recorded, as an X-ray far-field
    trial's is: each trial's own rotation divided by 100, so the verdict's reading says which trial it came from."""

    def loss(self, candidate, iterations=None) -> float:
        self.correlations[candidate] = candidate.rotation_deg / 100.0
        return super().loss(candidate, iterations)


def test_a_rotation_between_the_finer_trials_reports_the_nearest_trial_s_object_and_names_it():
    """The finer trials' parabola lands between two of them, on a rotation never reconstructed: the verdict's
    correlation is the nearest trial's object's and ``correlated`` is that trial (not the rotation taken); where the
    rotation taken was reconstructed, it is its own."""
    judge = _Correlated(3.3, 1.5, jitter=0.0)
    verdict = judge([OrientationCandidate((True, False, False), 0.0, None, "a peak")])
    taken, near = verdict.taken.rotation_deg, verdict.correlated
    assert taken == pytest.approx(3.3, abs=0.06) and taken not in judge.longer
    nearest = min(judge.longer, key=lambda r: abs(r - taken))
    assert near is not None and near.rotation_deg == nearest and near.flags == verdict.taken.flags
    assert verdict.correlation == pytest.approx(nearest / 100.0)
    assert verdict.taken not in judge.correlations  # nothing recorded under a rotation never reconstructed
    on_one = _Correlated(3.0, 1.0, jitter=0.0)  # the longer trials' lowest on one of them: the taken one's own
    verdict = on_one([OrientationCandidate((True, False, False), 0.0, None, "a peak")])
    assert verdict.correlated == verdict.taken and verdict.correlation == pytest.approx(verdict.taken.rotation_deg / 100)


@pytest.mark.parametrize("short_off", [-3.5, 4.0])
def test_a_longer_trials_lowest_point_past_the_range_tried_stops_at_its_end_and_warns(short_off):
    """Where the longer trials' parabola is lowest further from the short trials' rotation than the finer turns reach,
    the rotation stops at the last one tried, run.log says where the lowest point lay, and the run warns that the
    rotation is unsettled (it does not say "lowest at" the end, as though that were a minimum)."""
    judge = _Blurred(5.0, short_off, jitter=0.0)
    verdict = judge([OrientationCandidate((True, False, False), 0.0, None, "a peak")])
    start, end = 5.0 + short_off, 5.0 + short_off - np.sign(short_off) * SIDE * FINE_DEG
    assert verdict.taken.rotation_deg == pytest.approx(end, abs=1e-9)
    assert f"lowest past the last one tried ({-short_off:+.2f} deg), stopped at" in verdict.said
    assert f"lowest at {end - start:+.2f}" not in verdict.said
    assert verdict.unsettled == (Unsettled("scan rotation", f"{end:.2f} deg", "experiment.scan_rotation_deg"),)
    warning = trials_unsettled_warning(verdict.unsettled[0])
    assert warning.startswith("warning:") and "experiment.scan_rotation_deg" in warning
    at_end = _Blurred(5.0, -np.sign(short_off) * SIDE * FINE_DEG, jitter=0.0)  # lowest at the last one tried: a minimum
    verdict = at_end([OrientationCandidate((True, False, False), 0.0, None, "a peak")])
    assert verdict.taken.rotation_deg == pytest.approx(5.0, abs=1e-6) and verdict.unsettled == ()
    assert "lowest at" in verdict.said and "past" not in verdict.said


class _Redigited(_Blurred):
    """The bowl's data terms with their last digits changed by ``digits`` of themselves, as a run on another number
    of processes changes them (the all-reduce's order)."""

    def __init__(self, lowest_deg: float, digits: float) -> None:
        super().__init__(lowest_deg, 0.0, jitter=0.0)
        self.digits = digits

    def loss(self, candidate, iterations=None) -> float:
        return super().loss(candidate, iterations) * (1.0 + self.digits * np.cos(11.0 * candidate.rotation_deg))


def test_the_trials_rotation_is_set_on_a_grain_that_the_data_terms_last_digits_do_not_move():
    """The parabolas' lowest points are set on a grain (GRAIN_DEG, 0.02 degrees): data terms 1e-7 of themselves
    apart give the same rotation to the last bit, within half a grain of the bowl's lowest."""
    taken = [_Redigited(0.4321, digits)([OrientationCandidate((True, False, False), 0.0, None, "a peak")]).taken
             for digits in (0.0, 1e-7, -1e-7)]
    assert taken[0].rotation_deg == taken[1].rotation_deg == taken[2].rotation_deg
    assert abs(taken[0].rotation_deg - 0.4321) <= GRAIN_DEG / 2 + 1e-12
    assert taken[0].rotation_deg / GRAIN_DEG == pytest.approx(round(taken[0].rotation_deg / GRAIN_DEG), abs=1e-6)


def test_a_parabola_through_uneven_points_is_lowest_where_it_should_be():
    from ptyacc.reconstruction.trials import _lowest

    for offsets, x0 in (([-4, 0, 8], 1.5), ([-2, 0, 1], -0.7), ([-1, 0, 1], 0.3)):
        losses = [(x - x0) ** 2 + 5.0 for x in offsets]
        assert _lowest(offsets, losses) == pytest.approx(x0)
    assert _lowest([-4, 0, 8], [100.0, 0.0, 0.0]) == pytest.approx(4.0)  # level with the middle: half way
    assert _lowest([-4, 0, 8], [1.0, 2.0, 1.0]) == 0.0  # no minimum between: the middle


def test_a_defocus_whose_data_term_falls_past_the_range_tried_keeps_the_measured_one():
    """A data term that still falls at the last scale tried (x2.14) has no minimum there: the measured defocus is kept
    and the warning names the end reached and what was kept; a minimum within reach is taken."""
    judge = _Bowl(0.0, -300.0)  # x3 of the candidate's: beyond x2.14, 19 steps of FOCUS_STEP
    verdict = judge([OrientationCandidate((True, False, False), 0.0, -100.0, "a peak")], turn=False)
    assert verdict.taken.defocus_A == -100.0 and verdict.taken.defocus_by == OrientationCandidate(
        (True, False, False), 0.0, -100.0, "a peak").defocus_by
    end = f"{-100.0 * np.exp(19 * 0.04):.1f} A"
    assert verdict.unsettled == (Unsettled("defocus", end, "experiment.defocus_A", kept="the measured -100.0 A"),)
    warning = trials_unsettled_warning(verdict.unsettled[0])
    assert f"the last defocus they tried, {end}" in warning and "the measured -100.0 A is kept" in warning
    near = _Bowl(0.0, -60.0)  # x0.6: 13 steps below, bracketed by the strides
    verdict = near([OrientationCandidate((True, False, False), 0.0, -100.0, "a peak")], turn=False)
    assert verdict.taken.defocus_A == pytest.approx(-60.0, rel=0.02) and verdict.unsettled == ()


@pytest.mark.processes
def test_one_and_two_processes_take_the_same_orientation_by_trials(faint, tmp_path):
    """On this file the search is clear but broad (its peak under SEARCH_SURE times the rival's): the run tries
    its rotation by reconstructions, on every process alike."""
    import h5py
    import yaml
    from test_distributed import launch_configs

    config = faint_config(faint)
    config["data"]["transform"]["orientation_trials"] = 2
    config.update(optim={"iterations": 2, "batch_size": 32}, output={"figures": False})
    outs = launch_configs(tmp_path, [(f"p{n}", config, n, []) for n in (1, 2)])
    found = []
    for out in outs.values():
        log = (out / "results" / "run.log").read_text()
        assert "(the Fourier regions' peak) reconstructed 2 iterations, final loss" in log
        assert log.count("ptyacc run: ") == 1  # the trials wrote nothing of their own into run.log
        with h5py.File(out / "results" / "results.h5") as f:
            found.append((yaml.safe_load(f.attrs["auto_values"]), f["object"][()]))
    # each process's trials see the all-reduced loss: one choice per run; 1 and 2 processes' losses agree to
    # about 1e-7, which moves a parabola's lowest point by up to 6e-4 degrees, under the grain it is set on (GRAIN_DEG)
    assert found[0][0]["experiment.scan_rotation_deg"] == found[1][0]["experiment.scan_rotation_deg"]
    assert np.abs(found[0][1] - found[1][1]).max() < 1e-4


def coarse_config(grid_simulator, tmp_path) -> dict:
    """The config of a file written here whose scan step (1.2 A) exceeds lambda / (2 alpha) (0.84 A at 80 kV, 25
    mrad), its true frame transposed and turned TRUE_ROTATION, 1e5 counts."""
    path = tmp_path / "coarse.h5"
    grid_simulator.write(str(path), grid_simulator.Setting(
        detector_px=48, scan_shape=(16, 16), scan_step_A=1.2, dose=1e5, defocus_A=150.0, edge_mrad=60.0, seed=3,
        scan_rotation_deg=TRUE_ROTATION, transpose=True))
    config = faint_config(path)
    config["experiment"]["scan_step_A"] = 1.2
    return config


@pytest.mark.slow
@pytest.mark.processes
def test_one_and_two_processes_try_a_coarse_scan_s_frames_down_the_same_ladder(grid_simulator, tmp_path):
    """A scan coarser than lambda / (2 alpha): the frames around the circle at the rungs of defoci, the two bowls and
    the longer trials decide alike on 1 and 2 processes (each sees the all-reduced loss), and the runs agree."""
    import h5py
    import yaml
    from test_distributed import launch_configs

    config = coarse_config(grid_simulator, tmp_path)  # its defocus auto: the rungs of defoci tried
    config["data"]["transform"]["orientation_trials"] = 1
    config.update(optim={"iterations": 2, "batch_size": 32}, output={"figures": False})
    outs = launch_configs(tmp_path, [(f"p{n}", config, n, []) for n in (1, 2)])
    found, ladders = [], []
    for out in outs.values():
        log = (out / "results" / "run.log").read_text()
        ladders.append(re.search(r"at defoci 1.3x apart \((.*?)\), the clearest's ([-\d.]+) A", log).groups())
        with h5py.File(out / "results" / "results.h5") as f:
            found.append((yaml.safe_load(f.attrs["auto_values"]), f["object"][()]))
    rungs = [[float(v) for v in re.findall(r"([-\d.]+) A", ladder[0])] for ladder in ladders]
    assert len(rungs[0]) >= 3 and rungs[0] == pytest.approx(rungs[1], rel=1e-6) and ladders[0][1] == ladders[1][1]
    autos = [f[0] for f in found]
    for key in ("data.transform.transpose", "data.transform.flip_y", "data.transform.flip_x"):
        assert autos[0][key] == autos[1][key]
    # the trials' parabolas pass through data terms whose last digits the all-reduce's order changes (their lowest
    # points 6e-4 degrees apart, measured); set on a grain (GRAIN_DEG, FOCUS_GRAIN) they give 1 and 2 processes one
    # rotation and defocus
    assert autos[0]["experiment.scan_rotation_deg"] == autos[1]["experiment.scan_rotation_deg"]
    assert autos[0]["experiment.defocus_A"] == autos[1]["experiment.defocus_A"]
    assert np.abs(found[0][1] - found[1][1]).max() < 1e-4  # 1.1e-6 measured (1.7e-4 with the lowest points unset)


@pytest.mark.parametrize("lowest_defocus_A", [-88.0, -100.0, -118.0])
def test_the_searched_defocus_walks_to_the_lowest_data_term(lowest_defocus_A, capsys):
    judge = _Bowl(2.0, lowest_defocus_A)
    verdict = judge([OrientationCandidate((True, False, False), 0.0, -100.0, "a peak")], turn=False)
    assert "the data leave the defocus uncertain: trying it by short" in capsys.readouterr().err
    taken, said = verdict.taken, verdict.said
    assert taken.rotation_deg == 0.0 and taken.defocus_A == pytest.approx(lowest_defocus_A, rel=FOCUS_GRAIN)
    assert "its scan rotation" not in said and f"{lowest_defocus_A:.1f} A is used" in said
    verdict = judge([OrientationCandidate((True, False, False), 0.0, -100.0, "a peak")])
    taken, said = verdict.taken, verdict.said
    assert taken.rotation_deg == pytest.approx(2.0) and taken.defocus_A == pytest.approx(lowest_defocus_A, rel=FOCUS_GRAIN)
    assert "its scan rotation turned by" in said and "its defocus scaled by" in said
    taken = judge([OrientationCandidate((True, False, False), 0.0, None, "the centre of mass")], turn=False).taken
    assert taken.defocus_A is None  # no defocus of its own: measured later, not tried


@pytest.mark.parametrize("level", [1e5, -1e5])
def test_one_mode_s_trials_keep_the_measured_defocus_where_the_data_term_hardly_falls(level):
    """A data term of about 1e5 that falls by 0.55 at the lowest defocus tried, x1.18 the measured one: under
    FLAT_FOCUS of itself, so one mode's trials keep the measured defocus and say why; at a data term of 1e3 (the
    same fall, 5e-4 of it) they take the lowest, and with the run's modes they take it at any level."""
    from ptyacc.reconstruction.trials import FLAT_FOCUS

    candidate = OrientationCandidate((True, False, False), 0.0, -100.0, "a peak")
    fall = 20.0 * np.log(100.0 / 118.0) ** 2
    assert fall < FLAT_FOCUS * abs(level) and fall > FLAT_FOCUS * 1e3
    verdict = _Bowl(0.0, -118.0, level)([candidate], turn=False)
    assert verdict.taken.defocus_A == -100.0 and verdict.unsettled == ()
    assert "(too flat to move the measured defocus)" in verdict.said and "-100.0 A is used" in verdict.said
    verdict = _Bowl(0.0, -118.0, 1e3)([candidate], turn=False)
    assert verdict.taken.defocus_A == pytest.approx(-118.0, rel=FOCUS_GRAIN) and "flat" not in verdict.said
    verdict = _Bowl(0.0, -118.0, level)([candidate], turn=False, modes=True)
    assert verdict.taken.defocus_A == pytest.approx(-118.0, rel=FOCUS_GRAIN) and "flat" not in verdict.said


@pytest.mark.slow
@pytest.mark.parametrize("c12_wins", [False, True])
def test_the_parallax_does_not_turn_a_rotation_the_trials_chose(grid_simulator, tmp_path, monkeypatch, c12_wins):
    """3e4 counts: the parallax is clear and would correct a rotation 4 degrees off. Where the trials chose the
    rotation (here a judge that returns it), the run keeps theirs, says what the parallax saw, and takes the
    parallax's C12 only where the trials of it (the judge's second call) take it."""
    from ptyacc.data import autocalibration

    path = tmp_path / "clear.h5"
    grid_simulator.write(str(path), grid_simulator.Setting(
        detector_px=48, scan_shape=(20, 20), scan_step_A=0.45, dose=3e4, defocus_A=TRUE_DEFOCUS, edge_mrad=50.0,
        seed=1, scan_rotation_deg=TRUE_ROTATION, transpose=True))
    monkeypatch.setattr(overlap_orientation, "CLEAR", 1e9)  # the search unclear,
    monkeypatch.setattr(autocalibration, "weak_com", lambda found: True)  # and asked for
    monkeypatch.setattr(autocalibration, "PARALLAX_SURE", 1e9)
    monkeypatch.setattr(autocalibration, "C12_SIGMAS", 0.0)  # any C12 it reads would be taken
    judged = OrientationCandidate((True, False, False), TRUE_ROTATION + 4.0, TRUE_DEFOCUS, "the judge")
    astigmatism = []

    def judge(candidates, **how):
        if how.get("subject") is None:
            return Verdict(judged, "judged")
        astigmatism.extend(candidates)
        return Verdict(candidates[1 if c12_wins else 0], "the C12 judged")

    data = load_data(load_config(faint_config(path)), judge=judge)
    autos = data.autos
    angle, mirrored = off_deg((autos["data.transform.transpose"], autos["data.transform.flip_y"],
                               autos["data.transform.flip_x"]), autos["experiment.scan_rotation_deg"],
                              (True, False, False), TRUE_ROTATION)
    assert not mirrored and abs((angle + 45.0) % 90.0 - 45.0) == pytest.approx(4.0, abs=1e-6)  # kept, not turned
    said = next(line for line in data.checks if line.startswith("defocus from the bright-field parallax"))
    assert "not taken: trial reconstructions judged the orientation" in said
    assert "C12b" in said and "not taken as read: trial reconstructions judged" in said  # nor its C12 as read:
    plain = load_data(load_config(faint_config(path)))  # a load without trials takes it (in its own frame)
    assert "experiment.aberrations.C12a" in plain.autos
    read = tuple(float(v) for v in re.search(r"C12a (\S+) A and C12b (\S+) A not taken as read", said).groups())
    # the trials try it: without and with, in the frame, rotation and defocus the run keeps
    assert [c.c12_A for c in astigmatism] == [(0.0, 0.0), pytest.approx(read, abs=0.051)]
    assert all(c.rotation_deg == autos["experiment.scan_rotation_deg"] and c.flags == judged.flags for c in astigmatism)
    assert astigmatism[0].defocus_A == astigmatism[1].defocus_A == pytest.approx(autos["experiment.defocus_A"])
    if c12_wins:
        assert (autos["experiment.aberrations.C12a"], autos["experiment.aberrations.C12b"]) == astigmatism[1].c12_A
    else:
        assert not any(key.startswith("experiment.aberrations.C12") for key in autos)
    tried = next(line for line in data.checks if line.startswith("the parallax's C12a"))
    assert tried.endswith(f"{'used' if c12_wins else 'not used'}: the C12 judged")
    left = float(said.split("its rotation left (")[1].split(" deg")[0])
    assert left == pytest.approx(-4.0, abs=1.5)  # what the parallax saw: the truth, 4 degrees back (ptyacc's sense)


@dataclasses.dataclass
class _Read:
    """What the trials use of a dataset: its flags (to check a candidate gets its own), positions and aberrations."""
    flags: tuple
    positions_A: np.ndarray
    aberrations: dict


def _counted_load(read_flags: list):
    """A stand-in for ``load_data`` in the trials: notes each reading's flags in ``read_flags`` and checks that the
    trial's config leaves out the calibration's checks."""
    def load(config, judge, device):
        assert config.experiment.check_calibration is False
        flags = (config.data.transform.transpose, config.data.transform.flip_y, config.data.transform.flip_x)
        read_flags.append(flags)
        return _Read(flags, np.zeros((4, 2)), {"C10": -config.experiment.defocus_A})
    return load


def test_the_rotation_and_defocus_trials_turn_the_best_candidates_dataset(monkeypatch):
    """Each candidate orientation is read once; the scan rotation's and the defocus's trials that follow reuse the
    dataset of the candidate with the lowest loss, not the one read last, and none is kept after the trials."""
    from types import SimpleNamespace

    from ptyacc.reconstruction import trials

    read_flags = []
    fake_load = _counted_load(read_flags)

    class Judge(OrientationTrials):
        def loss(self, candidate, iterations=None) -> float:
            data = self.dataset(candidate, self.trial_config(candidate))
            # the best frame is the first candidate's; its bowl is lowest at 2 degrees and 100 A
            frame = 0.0 if data.flags == (True, False, False) else 10.0
            return frame + (candidate.rotation_deg - 2.0) ** 2 / 50.0 + 20.0 * np.log(-data.aberrations["C10"] / 100.0) ** 2

    monkeypatch.setattr(trials, "load_data", fake_load)
    judge = Judge(load_config({"data": {"path": "x.h5"}, "experiment": {"defocus_A": "auto"}}),
                  SimpleNamespace(is_main_process=True, device="cpu"), None)
    judge.iterations = 6
    candidates = [OrientationCandidate((True, False, False), 0.0, 95.0, "best"),
                  OrientationCandidate((False, True, False), 0.0, 95.0, "worse, read last")]
    chosen = judge(candidates).taken
    assert read_flags == [(True, False, False), (False, True, False)]  # no third reading for the trials after
    assert chosen.flags == (True, False, False) and abs(chosen.rotation_deg - 2.0) < 0.5
    assert abs(chosen.defocus_A - 100.0) < 3.0 and judge.read == {}


def test_the_frames_around_the_circle_read_each_flag_set_once_and_skip_the_calibration_s_checks(monkeypatch):
    """A coarse scan's grid tries 47 frames in two flag sets after the candidates: each flag set is read and
    calibrated once, not once per frame (the best candidate's dataset and the last one read are both kept), the two
    finalists reuse what the grid read, and no trial's reading runs the calibration's checks (the centre of mass's or
    the Fourier regions' search's test of the frame under trial: the trials' own question)."""
    from types import SimpleNamespace

    from ptyacc.reconstruction import trials

    read_flags = []
    fake_load = _counted_load(read_flags)

    best_flags, rival_flags, mirrored = (True, False, False), (False, True, False), (False, False, False)

    class Judge(OrientationTrials):
        def loss(self, candidate, iterations=None) -> float:
            data = self.dataset(candidate, self.trial_config(candidate))
            assert data.flags == candidate.flags  # a dataset of the candidate's own flags
            # two bowls: the best candidate's frame, and its mirror (turned 90 degrees) a little higher
            bowls = [bottom + (off / 8.0) ** 2 for flags, rotation, bottom in ((best_flags, 2.0, 0.0),
                                                                                (mirrored, 92.0, 0.2))
                     for off, flipped in [off_deg(candidate.flags, candidate.rotation_deg, flags, rotation)]
                     if not flipped]
            return 100.0 + min(*bowls, 4.0) + 20.0 * np.log(candidate.defocus_A / 100.0) ** 2

    monkeypatch.setattr(trials, "load_data", fake_load)
    judge = Judge(load_config({"data": {"path": "x.h5"}, "experiment": {"defocus_A": "auto"}}),
                  SimpleNamespace(is_main_process=True, device="cpu"), None)
    judge.iterations = 6
    candidates = [OrientationCandidate(best_flags, 0.0, 95.0, "the Fourier regions' best peak"),
                  OrientationCandidate(rival_flags, 40.0, 95.0, "a rival peak")]
    verdict = judge(candidates, grid=True)
    assert "frames around the circle: 47 more" in verdict.said
    assert read_flags == [best_flags, rival_flags, mirrored]  # the grid's 24 mirrored frames: one reading
    assert verdict.taken.flags == best_flags and abs(verdict.taken.rotation_deg - 2.0) < 0.5
    assert verdict.rival is not None and "transpose False" in verdict.rival  # the mirror's bowl, tried longer
    assert judge.read == {}


def test_a_candidate_s_c12_reaches_its_trial(monkeypatch):
    """A candidate's two-fold astigmatism (``c12_A``) is its trial's: in the trial's config and in the dataset of a
    frame already read; a candidate without one keeps the run's aberrations."""
    import dataclasses
    from types import SimpleNamespace

    from ptyacc.reconstruction import trials

    @dataclasses.dataclass
    class Read:
        positions_A: np.ndarray
        aberrations: dict

    monkeypatch.setattr(trials, "load_data", lambda config, judge, device: Read(
        np.zeros((4, 2)), {"C10": -config.experiment.defocus_A, **config.experiment.aberrations}))
    judge = OrientationTrials(load_config({"data": {"path": "x.h5"}, "experiment": {"defocus_A": "auto",
                                                                                      "aberrations": {"C30": 1e4}}}),
                              SimpleNamespace(is_main_process=True, device="cpu"), None)
    plain = OrientationCandidate((True, False, False), 0.0, 95.0, "none", c12_A=(0.0, 0.0))
    astigmatic = dataclasses.replace(plain, c12_A=(12.0, -7.0))
    config = judge.trial_config(astigmatic)
    assert config.experiment.aberrations == {"C30": 1e4, "C12a": 12.0, "C12b": -7.0}
    assert judge.dataset(plain, judge.trial_config(plain)).aberrations == {"C10": -95.0, "C30": 1e4, "C12a": 0.0,
                                                                          "C12b": 0.0}
    assert judge.dataset(astigmatic, config).aberrations == {"C10": -95.0, "C30": 1e4, "C12a": 12.0, "C12b": -7.0}
    unsaid = OrientationCandidate((True, False, False), 0.0, 95.0, "as the run's")
    assert judge.trial_config(unsaid).experiment.aberrations == {"C30": 1e4}
    assert "C12a +12.0 A, C12b -7.0 A" in astigmatic.line() and "C12" not in unsaid.line()


@pytest.mark.parametrize("with_wins", [True, False])
def test_a_c12_withheld_from_a_judged_orientation_is_tried(with_wins):
    """Where trials judged the orientation, the parallax's C12 is withheld, then tried: two candidates in the frame,
    rotation and defocus used, without a C12 and with the parallax's, with the run's probe modes; the one taken goes
    into the calibration (the wide draw's w117-11, 1e6 counts, 17 A of astigmatism simulated: withheld 0.904 against
    the told run's 0.962, taken 0.950)."""
    from types import SimpleNamespace

    from ptyacc.data.autocalibration import MeasuredDefocus, _c12_tried

    defocus = MeasuredDefocus(-86.0, 3.8, None, c12_withheld=(-8.0, -10.8))
    calibration = _Calibrated({"C10": 86.0}, {"defocus_A": -86.0}, {"defocus_A": "fitted"})
    seen, asked = [], {}

    def judge(candidates, **how):
        seen.extend(candidates)
        asked.update(how)
        return Verdict(candidates[1 if with_wins else 0], "judged")

    found, measured, said = _c12_tried(judge, SimpleNamespace(scan_rotation_deg=-40.15), calibration,
                                       SimpleNamespace(transpose=False, flip_y=True, flip_x=True), (True, True), defocus)
    assert [c.c12_A for c in seen] == [(0.0, 0.0), (-8.0, -10.8)]
    assert {(c.flags, c.rotation_deg, c.defocus_A, c.flip_about_zero) for c in seen} == \
        {((False, True, True), -40.15, -86.0, (True, True))}
    assert asked["turn"] is False and asked["focus"] is False and asked["modes"] is True
    if with_wins:
        assert found.aberrations == {"C10": 86.0, "C12a": -8.0, "C12b": -10.8}
        assert measured.c12_set == ("C12a", "C12b") and measured.c12_withheld is None
    else:
        assert found.aberrations == {"C10": 86.0} and measured.c12_set == ()
    assert said == (f"the parallax's C12a -8.0 A and C12b -10.8 A {'used' if with_wins else 'not used'}: judged",)


@pytest.mark.parametrize("from_file", [False, True])
def test_a_trial_fits_one_probe_mode_unless_the_probe_comes_from_a_file(tmp_path, from_file):
    """Further probe modes absorb part of a wrong defocus or rotation, which the trials are there to tell apart: a
    trial fits one mode where the run would fit four; a probe read from a file keeps its own modes."""
    from accelerate import Accelerator

    from ptyacc.reconstruction.engine import reconstruct

    raw = faint_config(tmp_path / "scan.h5")
    raw["model"] = {"probe_modes": 4, **({"probe_init": {"path": str(tmp_path / "probe.h5")}} if from_file else {})}
    judge = OrientationTrials(load_config(raw), Accelerator(cpu=True), reconstruct)
    config = judge.trial_config(OrientationCandidate((True, False, False), 3.0, TRUE_DEFOCUS, "a peak"))
    assert config.model.probe_modes == (4 if from_file else 1)
    assert config.experiment.defocus_A == TRUE_DEFOCUS and config.experiment.scan_rotation_deg == 3.0


def test_a_measured_defocus_s_trials_keep_the_run_s_modes_and_flips_about_zero(tmp_path):
    """The trials of a defocus the Fourier regions' coherence measured (``modes``) fit the run's probe modes, and a
    candidate's flips about the zero frequency reach its trial's preparation."""
    from accelerate import Accelerator

    from ptyacc.reconstruction.engine import reconstruct

    raw = faint_config(tmp_path / "scan.h5")
    raw["model"] = {"probe_modes": 4}
    judge = OrientationTrials(load_config(raw), Accelerator(cpu=True), reconstruct)
    candidate = OrientationCandidate((False, True, True), 3.0, TRUE_DEFOCUS, "the orientation used",
                                     flip_about_zero=(False, True))
    for modes, expected in ((False, 1), (True, 4)):
        config = judge.trial_config(candidate, modes)
        assert config.model.probe_modes == expected
        assert list(config.data.transform.flip_about_zero) == [False, True]
        assert (config.data.transform.transpose, config.data.transform.flip_y, config.data.transform.flip_x) == \
            (False, True, True)


SEARCHED_DEFOCUS = 170.0


@pytest.fixture(scope="module")
def wide_shift(grid_simulator, tmp_path_factory):
    """A 16 x 16 raster, 170 A underfocus (the disk's edge pixels see the sample moved 9 steps: too far for the
    parallax, whose defocus the Fourier regions' coherence then gives), a partly coherent beam (0.35 A source, 30 A
    focal spread), 1e5 counts; the file's nominal defocus 200 A. Its orientation and rotation are given."""
    path = tmp_path_factory.mktemp("focus") / "wide.h5"
    grid_simulator.write(str(path), grid_simulator.Setting(
        detector_px=48, scan_shape=(16, 16), scan_step_A=0.45, dose=1e5, defocus_A=SEARCHED_DEFOCUS, edge_mrad=50.0,
        seed=2, source_size_A=0.35, focal_spread_A=30.0, nominal_defocus_A=200.0, transpose=True,
        scan_rotation_deg=TRUE_ROTATION))
    return path


def wide_config(path, **transform) -> dict:
    return {"data": {"path": str(path), "transform": {"orientation": "manual", "transpose": True, **transform}},
            "experiment": {"scan_rotation_deg": TRUE_ROTATION, "defocus_A": "auto", "scan_step_A": 0.45},
            "model": {"probe_modes": 4}, "optim": {"iterations": 6}, "runtime": {"progress": False, "threads": 1}}


def searched_defocus_A(checks) -> float:
    """The defocus the Fourier regions' coherence gave, from its line."""
    import re

    said = [line for line in checks if "A of the Fourier regions' coherence" in line]
    return float(re.search(r"the defocus ([-0-9.]+) A of the Fourier regions' coherence", said[-1]).group(1))


@pytest.mark.slow
def test_a_defocus_the_coherence_measured_goes_to_the_judge_with_the_orientation_used(wide_shift):
    """Where the parallax cannot tell the defocus and the coherence of the prepared patterns gives it, the judge
    tries that defocus alone (no turn, the run's probe modes) in the orientation and rotation used, and its choice is
    the run's, with a warning where it is unsettled; without a judge the line says what ``ptyacc run`` will do, or,
    with the trials off, that the coherence's defocus is kept."""
    asked = []

    def judge(candidates, **how):
        asked.append((candidates, how))
        return Verdict(dataclasses.replace(candidates[0], defocus_A=171.0), "judged", None, None,
                       (Unsettled("defocus", "171.0 A", "experiment.defocus_A"),))

    data = load_data(load_config(wide_config(wide_shift)), judge=judge)
    assert len(asked) == 1 and asked[0][1] == {"turn": False, "focus": True, "modes": True}
    (candidate,) = asked[0][0]
    assert candidate.flags == (True, False, False) and candidate.rotation_deg == TRUE_ROTATION
    assert candidate.flip_about_zero == (False, False)
    assert candidate.defocus_A == pytest.approx(searched_defocus_A(data.checks), abs=0.05)
    assert -data.aberrations["C10"] == 171.0 and "judged" in data.checks
    # results.h5's /detector keeps both: what the coherence read and what the trials took
    assert float(data.detector["overlap_defocus_A"]) == candidate.defocus_A
    assert float(data.detector["trials_defocus_A"]) == 171.0
    assert any(line.startswith("warning:") and "experiment.defocus_A" in line for line in data.checks)

    alone = load_data(load_config(wide_config(wide_shift)))
    assert -alone.aberrations["C10"] == pytest.approx(candidate.defocus_A)
    assert any("ptyacc run tries it by short reconstructions" in line for line in alone.checks)
    assert "trials_defocus_A" not in alone.detector and float(alone.detector["overlap_defocus_A"]) == candidate.defocus_A
    off = load_data(load_config(wide_config(wide_shift, orientation_trials=0)))
    assert any("kept: data.transform.orientation_trials is 0" in line for line in off.checks)


@pytest.mark.slow
def test_the_trials_bring_the_coherence_s_low_defocus_to_the_truth(wide_shift):
    """The coherence reads this partly coherent file's defocus low (0.87 of the truth measured); the trials with the
    run's four probe modes take it within 3 % (0.998 measured; with one mode 1.013)."""
    from accelerate import Accelerator

    from ptyacc.reconstruction.engine import reconstruct

    config = load_config(wide_config(wide_shift))
    data = load_data(config, judge=OrientationTrials(config, Accelerator(cpu=True), reconstruct))
    assert searched_defocus_A(data.checks) < 0.92 * SEARCHED_DEFOCUS
    assert -data.aberrations["C10"] == pytest.approx(SEARCHED_DEFOCUS, rel=0.03)
    assert any("its defocus scaled by" in line for line in data.checks)


@dataclasses.dataclass
class _Calibrated:
    """What ``_focus_tried`` reads and replaces of a calibration."""

    aberrations: dict
    values: dict
    sources: dict


@pytest.mark.parametrize("search_wins", [True, False])
def test_a_parallax_reading_beaten_by_the_search_s_defocus_is_dropped_as_a_whole(search_wins):
    """Trials between the parallax's defocus and a clear search's far from it: each is tried in its own scan rotation
    (the parallax's with its rotation left added, the search's without); where the search's wins, the parallax's
    rotation left and its C12 go with its defocus (fresh h113-08, WSe2 at 1e6 counts: the parallax read 84.9 A with a
    C12 of 70 A and a rotation left of -3.5 degrees for a truth of 174 A; kept, they scored -0.117, dropped 0.966
    against the told run's 0.971); where the parallax's wins, all of it stays."""
    from types import SimpleNamespace

    from ptyacc.data.autocalibration import MeasuredDefocus, _focus_tried

    defocus = MeasuredDefocus(84.9, 8.5, None, rival_A=173.8, turn_deg=-3.51, c12_set=("C12a", "C12b"))
    calibration = _Calibrated({"C10": -84.9, "C12a": 3.6, "C12b": 69.6}, {"defocus_A": 84.9}, {"defocus_A": "fitted"})
    prep = SimpleNamespace(transpose=False, flip_y=True, flip_x=True)
    seen = []

    def judge(candidates, **kwargs):
        seen.extend(candidates)
        taken = candidates[1 if search_wins else 0]
        return Verdict(dataclasses.replace(taken, defocus_A=1.02 * taken.defocus_A, defocus_by="trial reconstructions"),
                       "judged")

    found, measured, said, rotation = _focus_tried(judge, False, SimpleNamespace(scan_rotation_deg=18.99), calibration,
                                                    prep, (True, True), defocus)
    assert [c.rotation_deg for c in seen] == [18.99, pytest.approx(22.50)]
    assert [c.defocus_A for c in seen] == [84.9, 173.8]
    taken_A = 1.02 * (173.8 if search_wins else 84.9)
    assert measured.defocus_A == pytest.approx(taken_A) and found.aberrations["C10"] == pytest.approx(-taken_A)
    if search_wins:
        assert rotation == pytest.approx(22.50) and "C12a" not in found.aberrations and "C12b" not in found.aberrations
        assert said[1] == ("the parallax's reading dropped as a whole: its rotation left (-3.51 deg: the scan rotation "
                           "22.50 deg) and its C12 not used")
    else:
        assert rotation == 18.99 and (found.aberrations["C12a"], found.aberrations["C12b"]) == (3.6, 69.6)
        assert said == ("judged",)


def test_a_step_is_aliased_beyond_lambda_over_two_alpha():
    """``aliased_step``: a raster whose step exceeds lambda / (2 alpha) (the central bright-field pixel's finest
    detail sampled at under two points a period) is said, with the step and that length; a finer one is not."""
    from types import SimpleNamespace

    from ptyacc.data.autocalibration import aliased_step
    from ptyacc.data.positions import raster_positions_A

    calibration = SimpleNamespace(values={"semiangle_mrad": 20.7}, wavelength_A=0.0250793)  # 200 kV
    finest = 0.0250793 / (2 * 20.7e-3)  # 0.606 A, by hand
    coarse = aliased_step(calibration, raster_positions_A((8, 8), 0.9, 0.0), (8, 8))
    assert coarse == pytest.approx((0.9, finest))
    assert aliased_step(calibration, raster_positions_A((8, 8), 0.55, 0.0), (8, 8)) is None
    assert aliased_step(SimpleNamespace(values={}, wavelength_A=0.025), raster_positions_A((8, 8), 0.9, 0.0),
                        (8, 8)) is None  # no semi-angle: nothing said


@pytest.mark.slow
@pytest.mark.parametrize("pick", ["mirror", None])
def test_a_coarse_scan_s_frame_is_tried_against_the_other_handedness(grid_simulator, tmp_path, pick):
    """A scan whose step (1.2 A) exceeds lambda / (2 alpha) (0.84 A at 80 kV, 25 mrad): whatever the measures say,
    the frame used, the Fourier regions' peak and its rivals, among them a frame of the other handedness, go to the
    judge, asked to try every frame around the circle too (``grid``), and the load takes its choice (here the other
    handedness's). Without a judge, a warning names the step
    and what it does."""
    config = coarse_config(grid_simulator, tmp_path)
    seen, grids = [], []

    def handed(candidate) -> bool:
        return bool(np.linalg.det(frame(candidate.flags, candidate.rotation_deg)) > 0)

    def judge(candidates, **how):
        if how.get("subject") is not None:  # a C12's trials, not the frame's
            return Verdict(candidates[0], "the C12 judged")
        seen.extend(candidates)  # the last: the frame the measures gave
        grids.append(how.get("grid", False))  # every frame around the circle tried too
        taken = next(c for c in candidates if handed(c) != handed(candidates[-1]))
        return Verdict(taken, "data.transform.orientation_trials: judged is used")

    data = load_data(load_config(config), judge=judge if pick else None)
    line = next(line for line in data.checks if line.startswith("scan rotation from the centre of mass"))
    assert "the scan's step 1.20 A is coarser than lambda / (2 alpha) = 0.84 A" in line
    if pick:
        assert len(seen) >= 2 and {handed(c) for c in seen} == {True, False} and grids == [True]
        taken = next(c for c in seen if handed(c) != handed(seen[-1]))
        assert off_used(data, taken.flags, taken.rotation_deg) == (pytest.approx(0.0, abs=1e-6), False)
        assert line.endswith("data.transform.orientation_trials: judged is used")
        assert not any("coarser than lambda" in line for line in data.checks if line.startswith("warning:"))
    else:
        warning = next(line for line in data.checks if line.startswith("warning: the scan's step 1.20 A"))
        assert "mirrored or turned" in warning and "data.transform.orientation_trials" in warning


def test_the_frames_around_the_circle_leave_no_frame_far():
    """``frames_around``: the best candidate's frame turned GRID_DEG at a time, then mirrored and turned likewise,
    at its defocus; every frame of either handedness (NumPy's R(theta)^T F, drawn at random) lies within GRID_DEG / 2
    of one of them or of the candidate itself."""
    from ptyacc.reconstruction.trials import GRID_DEG, frames_around

    best = OrientationCandidate((True, False, True), 33.0, 140.0, "the Fourier regions' best peak")
    around = frames_around(best)
    assert len(around) == 2 * round(360.0 / GRID_DEG) - 1 and best not in around
    assert {c.defocus_A for c in around} == {140.0} and {c.found_by for c in around} == {"the frames around the circle"}
    rng = np.random.default_rng(5)
    for _ in range(200):
        flags, rotation = tuple(bool(b) for b in rng.integers(0, 2, 3)), float(rng.uniform(-180.0, 180.0))
        nearest = min(abs(off) for off, mirrored in (off_deg(c.flags, c.rotation_deg, flags, rotation)
                                                     for c in [best, *around]) if not mirrored)
        assert nearest <= GRID_DEG / 2 + 1e-9


@pytest.mark.parametrize("grid", [True, False])
def test_a_coarse_scan_s_true_frame_is_found_beside_the_candidates_and_compared_longer(grid):
    """A data term (made up here, not a reconstruction) with two bowls: a mirrored decoy at the measured candidates'
    own frame, lowest after the short trials, and the true frame, 37 degrees away from any candidate and lowest only
    after longer ones, each lowest at 100 A. With ``grid`` the frames around the circle find the true bowl, both
    bowls' rotations and defoci are refined, and the longer trials take the truth, its margin theirs; the candidates
    alone take the decoy."""
    from types import SimpleNamespace

    from ptyacc.reconstruction.trials import LONGER

    true_flags, true_deg, decoy_flags, decoy_deg = (False, False, False), 37.0, (True, False, False), 5.0
    calls = []

    class Judge(OrientationTrials):
        def loss(self, candidate, iterations=None) -> float:
            longer = (iterations or self.iterations) > self.iterations
            calls.append(iterations or self.iterations)
            focus = 20.0 * np.log(candidate.defocus_A / 100.0) ** 2
            bowls = []
            for flags, rotation, bottom in ((true_flags, true_deg, 0.0 if longer else 0.5),
                                            (decoy_flags, decoy_deg, 0.3 if longer else 0.0)):
                off, mirrored = off_deg(candidate.flags, candidate.rotation_deg, flags, rotation)
                bowls.append(np.inf if mirrored else bottom + (off / 8.0) ** 2)
            return 100.0 + min(*bowls, 4.0) + focus

    judge = Judge(load_config({"data": {"path": "x.h5"}, "experiment": {"defocus_A": "auto"}}),
                  SimpleNamespace(is_main_process=True, device="cpu"), None)
    judge.iterations = 6
    candidates = [OrientationCandidate(decoy_flags, decoy_deg + 1.0, 95.0, "the Fourier regions' best peak"),
                  OrientationCandidate((False, True, False), 70.0, 95.0, "a rival peak")]
    verdict = judge(candidates, grid=grid)
    off, mirrored = off_deg(verdict.taken.flags, verdict.taken.rotation_deg, true_flags, true_deg)
    if grid:
        assert not mirrored and abs(off) < 0.5 and verdict.taken.defocus_A == pytest.approx(100.0, abs=3.0)
        assert calls.count(LONGER * 6) == 2  # the two bowls' lowest, reconstructed LONGER times as long
        assert calls.count(FINE * 6) == 2 * SIDE + 1  # then the taken one's finer turns
        assert verdict.margin == pytest.approx(0.3 / 100.0, rel=0.05)
        assert "frames around the circle: 47 more" in verdict.said
        assert f"reconstructed {LONGER * 6} iterations each" in verdict.said
    else:
        assert mirrored and calls.count(6) == len(calls) - 2 * SIDE - 1  # short trials but the finer turns


@pytest.mark.parametrize(("more", "seeded"), [(3, False), (0, False), (0, True)])
def test_a_coarse_scan_s_frames_are_tried_down_a_ladder_of_defoci_to_the_truth_s(monkeypatch, capsys, more, seeded):
    """A made-up data term (no reconstruction): the true frame's bowl lies below two mirrored decoys' only near the
    true 100 A, every frame's bowl grows shallower away from it, and the level falls as the defocus grows (as a wider
    probe's few iterations fit few counts better). The best candidate lies at a decoy and 1.7 times the true defocus
    (as the search read the coarse scans that ended turned). The grids at defoci 1.3 times apart walk down, past the
    end where the lowest frame stands out most, to the rung nearest 100 A, and take the true frame; stopped after the
    first three rungs (``RUNGS_MORE`` 0) a decoy is taken, unless another candidate's defocus (``seeded``: 98 A)
    puts a rung near the truth."""
    from types import SimpleNamespace

    from ptyacc.reconstruction import trials

    true_flags, true_deg, decoy_flags, decoy_deg = (False, False, False), 37.0, (True, False, False), 5.0
    defoci = set()

    class Judge(OrientationTrials):
        def loss(self, candidate, iterations=None) -> float:
            defoci.add(round(candidate.defocus_A, 1))
            focus = np.log(candidate.defocus_A / 100.0) ** 2
            bowls = []
            for flags, rotation, bottom in ((true_flags, true_deg, 5.0 * focus), (decoy_flags, decoy_deg, 0.3),
                                            (decoy_flags, decoy_deg + 90.0, 0.32)):
                off, flipped = off_deg(candidate.flags, candidate.rotation_deg, flags, rotation)
                bowls.append(np.inf if flipped else bottom + (off / 8.0) ** 2)
            return 100.0 - 2.0 * np.log(candidate.defocus_A / 100.0) + min(*bowls, 4.0) / (1.0 + 10.0 * focus)

    monkeypatch.setattr(trials, "RUNGS_MORE", more)
    judge = Judge(load_config({"data": {"path": "x.h5"}, "experiment": {"defocus_A": "auto"}}),
                  SimpleNamespace(is_main_process=True, device="cpu"), None)
    judge.iterations = 6
    candidates = [OrientationCandidate(decoy_flags, decoy_deg + 1.0, 170.0, "the Fourier regions' best peak")]
    if seeded:  # a candidate whose trial ends higher (its frame far from every bowl), at a defocus near the truth
        candidates.append(OrientationCandidate(decoy_flags, decoy_deg + 45.0, 98.0, "the centre of mass"))
    verdict = judge(candidates, grid=True)
    off, flipped = off_deg(verdict.taken.flags, verdict.taken.rotation_deg, true_flags, true_deg)
    # the terminal says, before the minutes they take, that the frames go round at several defoci
    assert "48 frames around the circle in both handednesses at several defoci 1.3x apart" in capsys.readouterr().err
    rungs = sorted(d for d in defoci if any(abs(d - 170.0 * trials.RUNG ** k) < 0.05 for k in range(-5, 5)))
    if more or seeded:
        assert not flipped and abs(off) < 0.5 and abs(np.log(verdict.taken.defocus_A / 100.0)) < np.log(trials.RUNG)
        assert rungs == pytest.approx([170.0 * trials.RUNG ** k for k in ((-2, -1, 0, 1) if seeded else
                                                                           (-3, -2, -1, 0, 1))], abs=0.05)
        assert "defoci 1.3x apart" in verdict.said and "the clearest's 100.6 A" in verdict.said
    else:
        assert flipped and rungs == pytest.approx([170.0 * trials.RUNG ** k for k in (-1, 0, 1)], abs=0.05)
