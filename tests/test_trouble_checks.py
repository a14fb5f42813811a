"""No silent wrong answer (ptyacc/data/trouble.py): a config that the data contradict (the scan
rotation, the transpose/flips, the defocus's sign or size, a turned raster read as given positions)
gives a line starting ``warning:`` that names the key to change; the true config gives none. Cases
of the independent simulator (benchmarks/grid/simulate.py); the runs: run.log, the terminal,
results.h5's ``warnings``, on 1 and 2 processes."""

import dataclasses
import math

import h5py
import numpy as np
import pytest
import yaml
from test_distributed import launch_configs

from ptyacc.config import load_config
from ptyacc.data.load import load_data
from ptyacc.data.orientation import SKEW_SURE_SCATTERED, Orientation
from ptyacc.data.overlap_orientation import OverlapOrientation
from ptyacc.data.trouble import (
    DEVIANCE_HIGH,
    ROTATION_UNSURE_DEG,
    com_warnings,
    deviance_warning,
    relative_misfit,
    search_warnings,
    unsure_rotation_warning,
    warnings_said,
)

TRUE_ROTATION, TRUE_DEFOCUS = 9.0, 60.0


@pytest.fixture(scope="module")
def scan(grid_simulator, tmp_path_factory):
    """A 24 x 24 raster turned 9 degrees, defocus 60 Å, transposed patterns, with descan, blur and bad pixels."""
    path = tmp_path_factory.mktemp("trouble") / "scan.h5"
    setting = grid_simulator.Setting(detector_px=48, scan_shape=(24, 24), scan_step_A=0.4, dose=3e4,
                                     defocus_A=TRUE_DEFOCUS, edge_mrad=50.0, seed=1, scan_rotation_deg=TRUE_ROTATION,
                                     transpose=True, blur_px=0.6, descan_offset_px=(0.3, -0.2), hot_pixels=3)
    grid_simulator.write(str(path), setting)
    return path


def told(path, **experiment) -> dict:
    """The config that tells the truth, with ``experiment`` (a key set to None is left out) changed."""
    given = {"scan_rotation_deg": TRUE_ROTATION, "defocus_A": TRUE_DEFOCUS, "scan_step_A": 0.4, **experiment}
    transform = given.pop("transform", {"transpose": True})
    return {"data": {"path": str(path), "bad_pixels": "auto", "transform": {**transform, "descan": "auto"}},
            "experiment": {key: value for key, value in given.items() if value is not None}}


def warnings_of(config: dict) -> list[str]:
    return [line for line in load_data(load_config(config)).checks if line.startswith("warning:")]


def test_the_truth_raises_no_alarm(scan):
    assert warnings_of(told(scan)) == []
    autos = told(scan, scan_rotation_deg="auto", defocus_A="auto", transform={"orientation": "auto"})
    assert warnings_of(autos) == []


@pytest.mark.parametrize("change, key", [
    ({"scan_rotation_deg": TRUE_ROTATION + 30}, "experiment.scan_rotation_deg"),
    ({"scan_rotation_deg": TRUE_ROTATION - 90}, "experiment.scan_rotation_deg"),
    ({"transform": {"transpose": False}}, "data.transform.orientation"),
    ({"defocus_A": -TRUE_DEFOCUS}, "experiment.defocus_A"),
    ({"defocus_A": 1.3 * TRUE_DEFOCUS}, "experiment.defocus_A"),
    ({"defocus_A": 0.7 * TRUE_DEFOCUS}, "experiment.defocus_A"),
    # the file's nominal raster read as given positions, the rotation left at 0
    ({"scan_rotation_deg": 0.0, "scan_step_A": None, "positions": {"key": "positions_A"}},
     "experiment.scan_rotation_deg"),
])
def test_a_wrong_config_is_named(scan, change, key):
    said = warnings_of(told(scan, **change))
    assert said and any(key in line for line in said), said  # a wrong sign: the older check's "try experiment..."


SEARCH = "coherence in Fourier space"


@pytest.fixture(scope="module")
def faint(grid_simulator, tmp_path_factory):
    """1e3 counts, a 150 Å defocus on a 20 x 20 raster: the centre of mass is noise, the Fourier search is clear."""
    path = tmp_path_factory.mktemp("faint") / "faint.h5"
    setting = grid_simulator.Setting(detector_px=48, scan_shape=(20, 20), scan_step_A=0.45, dose=1e3, defocus_A=150.0,
                                     edge_mrad=50.0, seed=1, scan_rotation_deg=TRUE_ROTATION, transpose=True)
    grid_simulator.write(str(path), setting)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("change, says", [
    ({}, None),
    ({"scan_rotation_deg": TRUE_ROTATION + 30}, "experiment.scan_rotation_deg"),
    ({"defocus_A": -150.0}, "wrong sign"),
])
def test_few_counts_the_fourier_search_judges_what_is_given(faint, change, says):
    """Where the centre of mass is noise the given rotation, flips and defocus are judged against a clear
    Fourier regions' search: the truth raises none of its warnings, a rotation 30 degrees off and a defocus
    of the wrong sign (the search's answer turned by 180 degrees) are named."""
    config = told(faint, **{"defocus_A": 150.0, "scan_step_A": 0.45, **change})
    said = [line for line in warnings_of(config) if SEARCH in line]
    if says is None:
        assert said == []
    else:
        assert said and says in said[0], said


def test_the_fourier_search_judged_against_the_rotation_flags_and_defocus_used():
    """``search_warnings`` on known answers (NumPy rotations): agreeing, 10 degrees off, mirrored, turned by
    180 degrees, the defocus 30 % off."""
    found = OverlapOrientation((True, False, False), 9.0, 150.0, 2.0)
    assert search_warnings(found, (True, False, False), 9.0, 150.0) == []
    assert search_warnings(found, (True, False, False), 11.0, 140.0) == []  # within 5 degrees and 15 %
    off = search_warnings(found, (True, False, False), 19.0, 150.0)
    assert len(off) == 1 and "-10.0 deg from experiment.scan_rotation_deg 19" in off[0]
    assert "mirrored" in search_warnings(found, (False, False, False), 9.0, 150.0)[0]
    turned = search_warnings(found, (True, True, True), 9.0, 150.0)  # the flips turn the patterns by 180 degrees
    assert len(turned) == 1 and "wrong sign" in turned[0]
    assert "experiment.defocus_A: auto" in search_warnings(found, (True, False, False), 9.0, 195.0)[0]


def test_the_centre_of_mass_judged_against_the_rotation_and_flags_used():
    clear = Orientation((False, False, False), 10.0, 0.1, 0.8, (9.5, 10.5), -1.5, 256)
    assert com_warnings(clear, (False, False, False), 11.0) == []  # within 5 degrees
    off = com_warnings(clear, (False, False, False), 40.0)
    assert len(off) == 1 and "-30.0 deg from experiment.scan_rotation_deg 40" in off[0]
    # the same prepared field: patterns turned by 180 degrees with the rotation turned by 180
    assert com_warnings(clear, (False, True, True), 190.0) == []
    mirrored = com_warnings(clear, (True, False, False), 10.0)
    assert len(mirrored) == 1 and "data.transform.orientation: auto" in mirrored[0]
    assert com_warnings(clear, (True, False, False), 10.0, flags_measured=True) == []
    noise = Orientation((False, False, False), 10.0, 0.9, 0.95, (-20.0, 40.0), -0.1, 256)
    assert com_warnings(noise, (True, False, False), 70.0) == []  # a field that cannot tell says nothing
    # a weak skew cannot tell 180 degrees: the turned rotation is no alarm, a clear skew's is
    weak = Orientation((False, False, False), 10.0, 0.1, 0.8, (9.5, 10.5), -0.2, 256)
    assert com_warnings(weak, (False, False, False), 190.0) == []
    assert len(com_warnings(clear, (False, False, False), 190.0)) == 1
    # at scattered positions the skew is noisier: -1.2 told the wrong turn on two of 31 files there (SKEW_SURE_SCATTERED)
    raster = dataclasses.replace(clear, skew=-1.2)
    scattered = dataclasses.replace(raster, skew_sure=SKEW_SURE_SCATTERED)
    assert raster.tells_turn and not scattered.tells_turn
    assert len(com_warnings(raster, (False, False, False), 190.0)) == 1
    assert com_warnings(scattered, (False, False, False), 190.0) == []


def test_the_deviance_and_the_end_of_run_line():
    assert deviance_warning(1.1) == [] and deviance_warning(float("nan")) == []
    high = deviance_warning(DEVIANCE_HIGH + 1)
    assert len(high) == 1 and high[0].startswith("warning:") and "experiment.defocus_A" in high[0]
    assert "set optim.iterations: auto (the run ends once converged)" in high[0]
    stopped = deviance_warning(DEVIANCE_HIGH + 1, converged=True)[0]  # the stop rule ended it: a number, not auto
    assert "give optim.iterations a number: the stop rule judged the run converged" in stopped and "auto (" not in stopped
    # at many counts a small misfit is a large deviance: 1 + counts x misfit^2 (relative_misfit)
    assert relative_misfit(1 + 1000 * 0.05**2, 1000) == pytest.approx(0.05)
    assert deviance_warning(5.22, counts=1093) == []  # the PETRA III near-field data, reconstructed right: 6 %
    assert deviance_warning(4.25, counts=520) == []  # abTEM, 1e6 electrons per pattern, right calibrations: 8 %
    flips = deviance_warning(57.9, counts=1093, electron=False)  # its detector's flips left out: 23 %
    assert len(flips) == 1 and "misfit of 23 %" in flips[0] and "data.transform" in flips[0]
    assert "scan_rotation" not in flips[0] and "experiment.geometry: near_field" in flips[0]  # holograms run as far field
    assert len(deviance_warning(18.0, counts=1093, electron=False)) == 1  # the near field's image shift left out
    assert len(deviance_warning(3.5, counts=2.0)) == 1  # few counts: 3.5 is far off the noise (112 %)
    # abTEM's SrTiO3 10 cells thick, 1e6 electrons (357 per counted pixel), 10 slices: right after 100 iterations 4.28
    # (10 %, no warning); a scan turned 10 degrees 13.4 (19 %): the warning names the multislice model's keys too
    assert deviance_warning(4.28, counts=357, slices=10) == []
    thick = deviance_warning(13.4, counts=357, slices=10)
    assert len(thick) == 1 and "misfit of 19 %" in thick[0] and "model.slices" in thick[0]
    assert "experiment.tilt_mrad" in thick[0] and "model.slices" not in deviance_warning(13.4, counts=357)[0]
    # one slice of it: 27.5 (27 %), 6.2 % of the counts beyond the disk: the warning names model.slices
    one = deviance_warning(27.5, counts=357, scattering=0.062)
    assert len(one) == 1 and "model.slices and model.slice_thickness_A (6.2 % of the counts" in one[0]
    end = warnings_said(["warning: a: set experiment.defocus_A: auto", "warning: b: set data.transform.orientation: "
                                                                        "auto"])
    assert end == ["at the end: 2 checks found trouble (said above, listed in results.h5); the keys to look at: "
                   "data.transform.orientation, experiment.defocus_A"]
    assert "warning" not in end[0] and warnings_said([]) == []


@pytest.mark.slow
def test_a_run_says_its_warnings_in_run_log_results_and_on_two_processes(scan, tmp_path):
    config = told(scan, scan_rotation_deg=TRUE_ROTATION + 30)
    config.update(optim={"iterations": 2, "batch_size": 32}, runtime={"progress": False}, output={"figures": False})
    outs = launch_configs(tmp_path, [(f"p{n}", config, n, []) for n in (1, 2)])
    found = []
    for out in outs.values():
        log = (out / "results" / "run.log").read_text().splitlines()
        marked = [line for line in log if "warning:" in line]
        with h5py.File(out / "results" / "results.h5") as f:
            kept = yaml.safe_load(f.attrs["warnings"])
            found.append((kept, f["object"][()]))
        assert kept and all(text.startswith("warning:") for text in kept)
        assert len(marked) == len(kept)  # one run.log line per warning: a script counts them
        assert all(any(text in line for line in marked) for text in kept)
        assert any(line.split(" ", 1)[1].startswith("at the end: ") for line in log)
    assert found[0][0] == found[1][0]
    assert np.abs(found[0][1] - found[1][1]).max() < 1e-4


def test_what_reaches_the_terminal():
    """run.log's data lines that the terminal shows too: warnings, autos not applied, positions read as a raster."""
    from types import SimpleNamespace

    from ptyacc.results.runlog import data_lines

    checks = ("warning: x: set experiment.defocus_A: auto", "auto not applied: experiment.defocus_A: why",
              "positions: the 4 positions of f.h5:positions_A form a raster", "descan (data.transform.descan: auto)")
    data = SimpleNamespace(source="f.h5", n_patterns=4, detector_px=8, dx_A=0.5, overrides=(), calibration={},
                           checks=checks)
    shown = {text: to_terminal for text, to_terminal in data_lines(data, (8, 8))}
    assert [shown[text] for text in checks] == [True, True, True, False]


def test_a_centre_of_mass_alone_takes_a_clear_searchs_orientation():
    """``_search_turned``: a centre of mass clear of curl yet 3.5 degrees off (its halves +-1.4, as on a WSe2 crystal
    at 1e5 counts) gives way to a clear Fourier regions' peak of the same handedness, also in other flags of the
    same geometry; one turned by 180 degrees only where the centre of mass's skew cannot tell that turn; an unclear
    peak, a mirrored one or one more than SEARCH_APART_DEG away does not."""
    from ptyacc.data.autocalibration import SEARCH_APART_DEG, _search_turned

    com = Orientation((True, True, True), 95.47, 0.2, 0.83, (94.1, 96.9), -0.9, 576)
    assert _search_turned(com, None) is None
    peak = OverlapOrientation((True, True, True), 92.0, 145.0, 4.2)
    assert _search_turned(com, peak) == pytest.approx(3.47)
    # the same geometry in other flags (the patterns turned by 180 degrees with the rotation)
    assert _search_turned(com, OverlapOrientation((True, False, False), 92.0 - 180.0, 145.0, 4.2)) == pytest.approx(3.47)
    # a turn by 180 degrees: taken under a weak skew (-0.9), not under a sure one
    turned = OverlapOrientation((True, False, False), 92.0, 145.0, 4.2)
    assert abs(_search_turned(com, turned)) == pytest.approx(180.0 - 3.47)
    assert _search_turned(dataclasses.replace(com, skew=-1.5), turned) is None
    for searched in (OverlapOrientation((True, True, True), 92.0, 145.0, 1.2),  # not clear
                     OverlapOrientation((False, True, True), 92.0, 145.0, 4.2),  # mirrored
                     OverlapOrientation((True, True, True), 95.47 + SEARCH_APART_DEG + 1, 145.0, 4.2)):
        assert _search_turned(com, searched) is None


def test_the_run_says_the_scan_rotation_it_refined():
    """``turned_scan_said``: the turn a run refined and the experiment.scan_rotation_deg that starts a run there (a
    turn adds to the rotation: ``positions._turn`` and ``orientation.rotation`` share a sense); none unrefined."""
    from types import SimpleNamespace

    from ptyacc.data.trouble import turned_scan_said

    refined = SimpleNamespace(quantities={"fitted": {"scan_turn_deg": np.float64(-2.91)}},
                              calibration={"scan_rotation_deg": (95.466, "fitted")})
    assert turned_scan_said(refined) == [("scan rotation: the run turned the scan -2.91 deg from the 95.47 deg it "
                                          "started at (fitted); experiment.scan_rotation_deg: 92.56 starts a run there"
                                          " (a run started there comes nearer still: the object holds the scan near the "
                                          "angle it first formed at)", True)]
    refined.quantities["fitted"]["scan_turn_deg"] = np.float64(0.4)  # run.log only, without the advice
    said = turned_scan_said(refined)[0]
    assert said[1] is False and "+0.40 deg" in said[0] and said[0].endswith("starts a run there")
    assert turned_scan_said(SimpleNamespace(quantities={}, calibration={"scan_rotation_deg": (9.0, "config")})) == []


@pytest.mark.slow
def test_a_run_turned_from_a_rotation_3_degrees_off_says_the_data_s(scan, tmp_path):
    """A run told the rotation 3 degrees off the simulator's, refining it (``model.scan_affine: rotation``), ends with
    run.log's and the terminal's ``scan rotation:`` line, whose experiment.scan_rotation_deg lies nearer the truth
    than the one it started at; told the truth, the line says a small turn, for run.log alone."""
    import re

    from click.testing import CliRunner

    from ptyacc.commands.cli import cli

    def ran(rotation_deg: float, name: str) -> tuple[float, str, str]:
        config = told(scan, scan_rotation_deg=rotation_deg)
        config.update(model={"scan_affine": "rotation"}, runtime={"progress": False, "threads": 1},
                      optim={"iterations": 20, "batch_size": 32, "start": {"scan_affine": 0}},
                      output={"figures": False, "dir": str(tmp_path / name)})
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
        result = CliRunner().invoke(cli, ["run", str(tmp_path / f"{name}.yaml")])
        assert result.exit_code == 0, result.output
        line = next(text for text in (tmp_path / name / "run.log").read_text().splitlines() if "scan rotation: " in text)
        return float(re.search(r"scan_rotation_deg: (-?[\d.]+) starts", line).group(1)), line, result.output

    refined, line, terminal = ran(TRUE_ROTATION + 3.0, "off")
    assert abs(refined - TRUE_ROTATION) < 1.5, line
    assert f"from the {TRUE_ROTATION + 3:.2f} deg it started at (config)" in line and "scan rotation: " in terminal
    refined, line, terminal = ran(TRUE_ROTATION, "right")
    assert abs(refined - TRUE_ROTATION) < 1.0 and "scan rotation: " not in terminal, line


def test_a_parallax_that_barely_tells_the_handedness_is_outvoted_by_a_clear_centre_of_mass():
    """``outvoted``: a parallax whose handedness is 2.6 times the other's, mirrored against a centre of mass that
    leaves 0.21 of its curl (0.84 mirrored), is not used; a parallax of the same handedness, one told 10 times or
    more, or a centre of mass that cannot tell (much curl, or the mirror nearly as curl-free) keeps it."""
    from ptyacc.data.autocalibration import PARALLAX_SURE, outvoted
    from ptyacc.data.parallax_orientation import ParallaxOrientation

    com = Orientation((False, False, False), 3.41, 0.21, 0.84, (2.3, 5.6), -0.9, 576)
    mirror = ParallaxOrientation((False, True, False), 9.73, 88.7, 2.6)
    assert outvoted(mirror, com)
    assert not outvoted(ParallaxOrientation((False, True, True), 183.0, 88.7, 2.6), com)  # the same, turned by 180
    assert not outvoted(dataclasses.replace(mirror, ratio=PARALLAX_SURE), com)
    assert not outvoted(mirror, dataclasses.replace(com, curl_left=0.6, curl_other=0.9))
    assert not outvoted(mirror, dataclasses.replace(com, curl_other=0.4))


def _mirroring_parallax(ratio: float):
    """A parallax whose fit's mirror part is ``ratio`` times its rotating part (M = D + J / ratio)."""
    from ptyacc.data.parallax import Parallax

    m = np.diag([1.0, -1.0]) + np.array([[0.0, -1.0], [1.0, 0.0]]) / ratio
    empty = np.zeros((0, 2))
    return Parallax(100.0, 2.0, 0.0, 0.0, 1.0, 0.0, empty, empty, np.zeros(0), np.zeros(0, bool), np.zeros((1, 1)),
                    0.1, 256, True, fit_A=np.column_stack([np.zeros(2), 100.0 * m]))


@pytest.mark.parametrize("ratio", [3.0, 5.0, 20.0])
def test_a_parallax_that_is_not_sure_of_the_mirror_is_outvoted_by_a_clear_second_opinion(ratio):
    """The parallax's mirror part ``ratio`` times its rotating part: a warning naming the key; where a clear centre
    of mass or search gave the flags' handedness, none under PARALLAX_SURE (10) times, the warning over it."""
    from ptyacc.data.autocalibration import PARALLAX_SURE
    from ptyacc.data.parallax_orientation import conformal_parts
    from ptyacc.data.trouble import parallax_warnings

    found = _mirroring_parallax(ratio)
    rotating, reflecting = conformal_parts(found.fit_A[:, 1:])
    assert reflecting / rotating == pytest.approx(ratio)
    alone = parallax_warnings(found, 100.0, 0.0, flags_measured=False)
    assert len(alone) == 1 and "mirrored against the scan" in alone[0] and "data.transform.orientation" in alone[0]
    outvoted = parallax_warnings(found, 100.0, 0.0, flags_measured=False, outvoted_under=PARALLAX_SURE)
    assert outvoted == ([] if ratio < PARALLAX_SURE else alone)
    assert parallax_warnings(found, 100.0, 0.0, flags_measured=True) == []


def test_a_loose_parallax_rotation_is_said_from_its_threshold_with_the_interval():
    from ptyacc.data.parallax_orientation import ParallaxOrientation

    def said(error):
        return unsure_rotation_warning(ParallaxOrientation((True, False, False), 9.5, 120.0, 20.0, error))

    assert said(float("nan")) == [] and said(ROTATION_UNSURE_DEG - 0.01) == []
    (line,) = said(2.0)
    assert line.startswith("warning: the bright-field parallax fixes the scan rotation only to 9.50 +- 2.00 deg")
    assert line.endswith("experiment.scan_rotation_deg 7.50 and 11.50") and "experiment.scan_rotation_deg if" in line


def test_a_loose_search_rotation_is_said_the_same_way_and_its_spread_computed_only_when_asked():
    """The search's rotation spread (eight more fine searches) is computed once, when the warning asks for it."""
    from ptyacc.data.overlap_orientation import OverlapOrientation

    asked = []

    def said(error):
        return unsure_rotation_warning(OverlapOrientation((False, True, False), -13.5, 160.0, 2.0,
                                                          error=lambda: asked.append(error) or error), by="search")

    assert said(ROTATION_UNSURE_DEG - 0.01) == [] and asked == [ROTATION_UNSURE_DEG - 0.01]
    (line,) = said(2.66)
    assert line.startswith("warning: the Fourier regions' search fixes the scan rotation only to -13.50 +- 2.66 deg")
    assert "each eighth of the disk's pixels left out" in line and line.endswith("-16.16 and -10.84")
    assert math.isnan(OverlapOrientation((False, False, False), 0.0, 100.0, 2.0).rotation_error_deg)


def test_a_defocus_the_trials_chose_far_from_the_files_is_said():
    """h71-19 of the calibration matrix (graphene, 1e3 counts, 66 A read as 85.4): the trials ended at 221.7 A
    and a wrong frame, silently. A defocus 1.75 times the file's or more (or under its share) is said; the
    matrix's readouts (0.7-1.3 times the truth) and the trials' right answers on seeds 70-71 (0.71-1.59) are not."""
    from ptyacc.data.trouble import DEFOCUS_FAR, far_defocus_warning

    (line,) = far_defocus_warning(221.7, 85.4, "trial reconstructions")
    assert line.startswith("warning: the defocus 221.7 A of trial reconstructions is 2.60 times the file's 85.4 A")
    assert "experiment.defocus_A: 85.4" in line
    assert far_defocus_warning(-213.4, -112.2, "trial reconstructions")  # 1.9 times, the same sign
    assert far_defocus_warning(40.0, 100.0, "the Fourier regions' coherence")  # under 1 / 1.75
    for ratio in (0.71, 1.0, 1.59, DEFOCUS_FAR - 0.01):
        assert far_defocus_warning(100.0 * ratio, 100.0, "trial reconstructions") == []
    assert far_defocus_warning(150.0, None, "trial reconstructions") == []  # no nominal value to compare with


def test_a_parallax_and_a_search_apart_are_found_only_clear_same_handed_and_beyond_the_threshold():
    """rotations_apart_deg against frame_difference's known answers: the search given in other flags of the same
    handedness (transpose with flip_x is the identity turned by a quarter) is compared in the parallax's frame; a
    mirrored or unclear search, or one within ROTATIONS_APART_DEG, gives None. The warning names both angles and the
    one between them the run starts at, a quarter of the way to the search's."""
    from ptyacc.data.orientation import frame_difference
    from ptyacc.data.overlap_orientation import OverlapOrientation
    from ptyacc.data.parallax_orientation import ParallaxOrientation
    from ptyacc.data.trouble import (
        ROTATIONS_APART_DEG,
        SEARCH_SHARE,
        blended_rotation_deg,
        rotations_apart_deg,
        rotations_apart_warning,
    )

    parallax = ParallaxOrientation((False, False, False), 10.0, 120.0, 20.0, 0.3)
    quarter = (True, False, True)
    base = frame_difference(parallax.flags, 10.0, quarter, 0.0)[1]  # the search at 0 in those flags lies base from 10
    assert abs(abs((base - 10.0 + 180.0) % 360.0 - 180.0) - 90.0) < 1e-9  # the same frame a quarter turn on

    def search(apart, flags=quarter, contrast=3.0):
        return OverlapOrientation(flags, base + apart, 120.0, contrast)  # apart degrees from the parallax

    assert not frame_difference(parallax.flags, 10.0, quarter, base + 3.0)[0]
    assert rotations_apart_deg(parallax, search(3.0)) == pytest.approx(-3.0, abs=1e-9)
    assert rotations_apart_deg(parallax, search(-3.0)) == pytest.approx(3.0, abs=1e-9)
    (line,) = rotations_apart_warning(parallax, rotations_apart_deg(parallax, search(3.0)))
    assert SEARCH_SHARE == 0.25  # the weights of typical errors of 0.4 and 0.7 degrees: 1/0.16 against 1/0.49
    assert blended_rotation_deg(parallax, -3.0) == pytest.approx(10.75, abs=1e-12)
    assert blended_rotation_deg(parallax, 3.0) == pytest.approx(9.25, abs=1e-12)
    assert "3.0 deg apart (10.00 and 13.00 deg)" in line and "starts between them, at 10.75 deg" in line
    assert "turned against the truth by 0.8 deg if the parallax is right, 2.2 if the search is" in line
    assert line.endswith("experiment.scan_rotation_deg 10.00 and 13.00")
    assert rotations_apart_deg(parallax, search(ROTATIONS_APART_DEG - 0.05)) is None
    assert rotations_apart_deg(parallax, search(5.0, contrast=1.2)) is None  # not clear
    assert rotations_apart_deg(parallax, None) is None
    mirrored = OverlapOrientation((True, False, False), 13.0, 120.0, 3.0)
    assert frame_difference(parallax.flags, 10.0, mirrored.flags, 13.0)[0]
    assert rotations_apart_deg(parallax, mirrored) is None
