"""A slice of the calibration matrix (benchmarks/calibration_matrix/matrix.py): its scorer against
known shifts and turns, and ``ptyacc init`` + ``ptyacc run`` against ptyacc told the truth on small
cases of the project's NumPy simulator (no abTEM needed)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from ptyacc.commands.init_config import init_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "calibration_matrix"))
import matrix  # noqa: E402

DX_A = 0.3
DEMO = Path(__file__).resolve().parents[1] / "ptyacc" / "demo" / "demo_mos2.h5"


def _truth_and_positions(shape=(90, 90)) -> tuple[np.ndarray, np.ndarray]:
    """A random-atom phase (H, W), pixel [i, j] at (i, j) DX_A, and a 12 x 12 raster (N, 2) Å in its middle."""
    rng = np.random.default_rng(1)
    y, x = np.mgrid[:shape[0], :shape[1]]
    truth = np.zeros(shape)
    for cy, cx in rng.uniform(0, shape[0], size=(160, 2)):
        truth += np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * 1.3 ** 2))
    iy, ix = np.meshgrid(np.arange(12), np.arange(12), indexing="ij")
    positions = (np.stack([iy.ravel(), ix.ravel()], 1) * 4.0 + 25.0) * DX_A
    return truth, positions


def test_scores_place_the_reconstruction_at_its_origin_in_the_truths_frame():
    """A crop of the truth in a frame shifted by (3.3, -2.1) Å, both its origin and its positions in
    that frame: NCC 1; the origin told 1 px wrong: clearly less, and the best shift finds the
    pixel back."""
    from ptyacc.results.quality import best_shift_ncc

    truth, positions = _truth_and_positions()
    crop = truth[10:80, 12:82]
    shift_A = np.array([3.3, -2.1])
    origin_A = np.array([10, 12]) * DX_A + shift_A
    right = matrix.scores(crop, origin_A, DX_A, positions + shift_A, positions, truth)
    assert right["ncc"] > 0.9999 and right["quarter_turns"] == 0
    wrong = matrix.scores(crop, origin_A + [DX_A, 0.0], DX_A, positions + shift_A, positions, truth, best_shift_ncc)
    assert wrong["ncc"] < 0.9
    assert wrong["ncc_best_shift"] > 0.9999 and wrong["best_shift_px"] == [1.0, 0.0]


@pytest.mark.parametrize("quarters", [1, 2, 3])
def test_scores_turn_a_frame_turned_by_quarter_turns_back(quarters):
    """The reconstruction and its positions turned by 90, 180, 270 degrees about the positions' centre
    (what patterns turned as much with the scan explain equally well): the scorer turns them back
    (NCC 1); positions turned by 30 degrees leave the reconstruction as it is (the crop, untouched,
    still NCC 1)."""
    truth, positions = _truth_and_positions()
    crop = truth[10:80, 12:82]
    origin_A = np.array([10.0, 12.0]) * DX_A
    centre = positions.mean(0)
    turn = np.array([[0.0, -1.0], [1.0, 0.0]])  # (y, x) -> (-x, y): np.rot90's sense on [row, col]
    turned_positions, turned_crop = positions.copy(), crop
    far_corner = origin_A + (np.array(crop.shape) - 1) * DX_A
    corners = np.array([origin_A, far_corner, [origin_A[0], far_corner[1]], [far_corner[0], origin_A[1]]])
    for _ in range(quarters):
        turned_positions = centre + (turned_positions - centre) @ turn.T
        corners = centre + (corners - centre) @ turn.T
        turned_crop = np.rot90(turned_crop)
    found = matrix.scores(turned_crop, corners.min(0), DX_A, turned_positions, positions, truth)
    assert found["ncc"] > 0.9999
    assert found["quarter_turns"] == (-quarters) % 4 or found["quarter_turns"] == quarters % 4
    angle = np.radians(30.0)
    skew = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    left = matrix.scores(crop, origin_A, DX_A, centre + (positions - centre) @ skew.T, positions, truth)
    assert left["quarter_turns"] == 0 and left["ncc"] > 0.9999


def test_the_frame_angle_is_read_at_the_start_and_at_the_run_s_end():
    """Positions turned 3 degrees at the start and 0.5 (or a quarter turn and 0.5) at the end: the angles left,
    in the sense that maps the run's positions onto the truth's (NumPy rotations)."""
    truth, positions = _truth_and_positions()
    crop, origin_A, centre = truth[10:80, 12:82], np.array([10.0, 12.0]) * DX_A, positions.mean(0)

    def turned(deg: float) -> np.ndarray:
        t = np.radians(deg)
        return centre + (positions - centre) @ np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]).T

    for end_deg in (0.5, 90.5):
        found = matrix.scores(crop, origin_A, DX_A, turned(3.0), positions, truth, final_positions_A=turned(end_deg))
        assert found["frame_angle_deg"] == pytest.approx(-3.0, abs=1e-3)
        assert found["final_frame_angle_deg"] == pytest.approx(-0.5, abs=1e-3)
    assert "final_frame_angle_deg" not in matrix.scores(crop, origin_A, DX_A, turned(3.0), positions, truth)


@pytest.mark.parametrize("flags", [(True, False, True), (True, True, False), (False, False, False),
                                   (False, True, True), (True, False, False), (False, True, False)])
def test_the_told_run_puts_the_truth_in_the_frame_auto_chose(flags, tmp_path):
    """The told config's flags are the auto run's, its rotation the one that with them gives the truth's map
    from the stored patterns to the scan, R(theta)^T F (NumPy); a mirror of the truth has none."""
    from ptyacc.data.orientation import flag_matrix, rotation

    auto = {"auto_values": {"data.transform.transpose": flags[0], "data.transform.flip_y": flags[1],
                            "data.transform.flip_x": flags[2], "data.transform.flip_about_zero": [True, False]}}
    told = matrix.told_config(tmp_path / "c.h5", CASE, auto)
    true_map = rotation(CASE.rotation_deg).T @ flag_matrix(CASE.transpose, CASE.flip_y, CASE.flip_x)
    if np.linalg.det(flag_matrix(*flags)) != np.linalg.det(flag_matrix(CASE.transpose, CASE.flip_y, CASE.flip_x)):
        assert told is None
        return
    transform = told["data"]["transform"]
    assert (transform["transpose"], transform["flip_y"], transform["flip_x"]) == flags
    assert transform["flip_about_zero"] == [True, False] and "positions" not in told["experiment"]
    theta = told["experiment"]["scan_rotation_deg"]
    np.testing.assert_allclose(rotation(theta).T @ flag_matrix(*flags), true_map, atol=1e-6)
    assert told["experiment"]["defocus_A"] == CASE.defocus_A
    assert told["model"]["probe_modes"] == yaml.safe_load(init_config(DEMO, tmp_path / "c.yaml"))["model"]["probe_modes"]


CASE = matrix.Case(name="slice", sample="atoms", scan=16, step_A=0.45, rotation_deg=-37.0, transpose=True,
                   flip_y=False, flip_x=True, defocus_A=-80.0, nominal_factor=0.7, partial=False, descan=True,
                   blur_px=0.5, dose=1e5, stored=False, iterations=30, seed=3)


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    CASE,
    # the orientation auto's flags nearest a rotation of 0 are a quarter turn of the truth (transpose and flip_x for
    # flip_y, the detector read out backwards along y): those flags are taken only with the flips that leave the
    # bright-field disk where it lies, else descan: auto takes a pixel for a descan (auto 0.925 against 0.990)
    dataclasses.replace(CASE, name="slice_flipped", rotation_deg=121.0, transpose=False, flip_y=True, flip_x=False,
                        defocus_A=90.0, nominal_factor=1.3, descan=False, blur_px=0.0, dose=3e4, seed=4),
    # a raster that is not square: its rows and columns apart in every measure of the scan (``--oblong``)
    dataclasses.replace(CASE, name="slice_oblong", scan_x=24, rotation_deg=62.0, transpose=False, flip_y=True, seed=5)],
    ids=["transposed", "flipped", "oblong"])
@pytest.mark.processes
def test_init_and_run_come_within_the_margin_of_the_truth(case, tmp_path):
    """Files that say nothing of their scan rotation or orientation and read the defocus 30 % off:
    ``ptyacc init`` + ``ptyacc run`` within 0.02 NCC of ptyacc told the truth, which itself is good."""
    matrix.write_case(case, tmp_path / "data" / f"{case.name}.h5")
    auto, truth = (matrix.run_variant(case, variant, tmp_path) for variant in ("auto", "truth"))
    assert auto["returncode"] == 0 and truth["returncode"] == 0, (auto.get("error"), truth.get("error"))
    assert truth["ncc"] > 0.9
    assert auto["ncc"] >= truth["ncc"] - matrix.PASS_MARGIN, (auto["ncc"], truth["ncc"], auto["auto_values"])


def _write_records(cache, runs: dict) -> None:
    """The results JSON of each (case name, variant) in ``runs`` with its NCC; None: a told run skipped because
    the auto run found the mirror."""
    import json

    (cache / "results").mkdir()
    for (name, variant), value in runs.items():
        record = {"case": name, "variant": variant, "warnings": [], "ncc": value, "seconds": 1.0}
        if value is None:
            record = {"case": name, "variant": variant, "warnings": [], "skipped": "the auto run found the mirror"}
        (cache / "results" / f"{name}__{variant}.json").write_text(json.dumps(record))


def test_the_table_takes_the_truth_as_reference_where_auto_found_the_mirror(tmp_path):
    """A mirrored auto run has no told run (``told_config`` gives None): its told column compares it with the
    truth's own run; the others with their told run."""
    cases = matrix.cases()[:2]
    runs = {(cases[0].name, "auto"): 0.30, (cases[0].name, "truth"): 0.31, (cases[0].name, "told"): None,
            (cases[1].name, "auto"): 0.80, (cases[1].name, "truth"): 0.81, (cases[1].name, "told"): 0.85}
    _write_records(tmp_path, runs)
    table = matrix.summary(tmp_path, cases)
    assert "2 of 2 cases pass" in table and "1 of 2 pass (50 %)" in table  # 0.80 is 0.05 below its told 0.85
    row = next(line for line in table.splitlines() if line.startswith(f"| {cases[0].name} "))
    assert "0.310 (mirrored: truth) | -0.010 | pass" in row


def test_the_table_of_a_fresh_draw_without_truth_runs_counts_the_told_runs(tmp_path):
    """``--runs auto told`` (how fresh draws are run): no truth run, so the told runs are the reference; a mirrored
    auto run, which has no told run and no truth run to compare with, is a failure."""
    cases = matrix.cases(54)[:3]
    runs = {(cases[0].name, "auto"): 0.30, (cases[0].name, "told"): None,
            (cases[1].name, "auto"): 0.80, (cases[1].name, "told"): 0.81,
            (cases[2].name, "auto"): 0.70, (cases[2].name, "told"): 0.75}
    _write_records(tmp_path, runs)
    table = matrix.summary(tmp_path, cases)
    assert "1 of 3 pass (33 %)" in table and "cases pass" not in table
    rows = {line.split(" | ")[0][2:]: line for line in table.splitlines() if line.startswith("| h54-")}
    assert "- (mirrored) | - | **fail**" in rows[cases[0].name]
    assert "0.810 | -0.010 | pass" in rows[cases[1].name]
    assert "0.750 | -0.050 | **fail**" in rows[cases[2].name]


def test_the_pooled_table_counts_each_draw_s_told_verdicts_by_sample_counts_and_coherence(tmp_path):
    """``--pool``: the verdicts of several caches (a fresh draw run ``--runs auto told``, the matrix's own cases with
    truth runs) in one table; each case in its sample's, its coherence's and the whole row at its counts, a mirrored
    auto run judged against the truth where one ran and failed where none did, a case without a reference left out."""
    fresh, own = matrix.cases(54)[:4], matrix.cases()[:2]
    runs = {(fresh[0].name, "auto"): 0.80, (fresh[0].name, "told"): 0.81,  # pass
            (fresh[1].name, "auto"): 0.70, (fresh[1].name, "told"): 0.75,  # fail
            (fresh[2].name, "auto"): 0.30, (fresh[2].name, "told"): None,  # mirrored, no truth: fail
            (fresh[3].name, "auto"): 0.50}  # no reference: not counted
    for cache in ("a", "b"):
        (tmp_path / cache).mkdir()
    _write_records(tmp_path / "a", runs)
    _write_records(tmp_path / "b", {(own[0].name, "auto"): 0.30, (own[0].name, "truth"): 0.31,
                                    (own[0].name, "told"): None,  # mirrored, judged against the truth: pass
                                    (own[1].name, "auto"): 0.60, (own[1].name, "truth"): 0.90,
                                    (own[1].name, "told"): 0.61})  # pass against told, fail against the truth
    table = matrix.pooled([tmp_path / "a", tmp_path / "b"])
    verdicts = [(fresh[0], 1), (fresh[1], 0), (fresh[2], 0), (own[0], 1), (own[1], 1)]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in table.splitlines() if line.startswith("| ")}

    def cell(row: str, dose: float) -> str:
        chosen = [ok for case, ok in verdicts if case.dose == dose and row in (
            case.sample, "partly coherent" if case.partial else "coherent", "all")]
        return f"{sum(chosen)}/{len(chosen)}" if chosen else "-"

    for row in {case.sample for case, _ in verdicts} | {"all", "coherent", "partly coherent"}:
        assert rows[row][:5] == [cell(row, dose) for dose in matrix.COUNTS], (row, rows[row])
    assert rows["all"][5].startswith("3/5 (60.0 %)")


def test_another_seed_draws_fresh_cases_of_the_same_distribution(capsys):
    """The default seed keeps the matrix's 64 cases (c00 as it was drawn); another seed draws 64 cases that share
    no name and no simulation seed with them, each dimension taking its values as often as in the matrix (the
    scan: two of 64 x 64 in place of two drawn sides, so within one of the matrix's count per side), and
    ``--count`` lists the first of them."""
    from collections import Counter

    matrix_cases, fresh = matrix.cases(), matrix.cases(54)
    assert [case.name for case in matrix_cases] == [f"c{i:02d}" for i in range(64)]
    assert matrix_cases[0].describe() == ("amorphous 24x24 48px rot -57 T df +138 (file x1) coherent descan blur 0.8 "
                                          "1e+06 e stored")
    assert len(fresh) == 64 and fresh[0].name == "h54-00"
    assert not {case.name for case in fresh} & {case.name for case in matrix_cases}
    assert not {case.seed for case in fresh} & {case.seed for case in matrix_cases}
    for field in ("sample", "stored", "nominal_factor", "partial", "descan", "blur_px", "dose", "detector_px",
                  "transpose", "flip_y", "flip_x", "iterations"):
        assert Counter(getattr(case, field) for case in fresh) == Counter(getattr(case, field) for case in matrix_cases)
    sides, matrix_sides = Counter(case.scan for case in fresh), Counter(case.scan for case in matrix_cases)
    assert sides[64] == 2 and all(abs(sides[side] - matrix_sides[side]) <= 1 for side in (16, 20, 24, 32))
    assert [case.rotation_deg for case in fresh] != [case.rotation_deg for case in matrix_cases]
    assert matrix.main(["--seed", "54", "--count", "3", "--list"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["h54-00", "h54-01", "h54-02"]


def test_the_checks_accuse_no_right_config_and_catch_the_wrong_ones(tmp_path):
    """``--checks`` on one small case of the NumPy simulator: the config that tells the truth loads without a
    warning; the rotation 10 degrees off, the transpose reversed and the defocus 30 % too large each say one."""
    records = {record["kind"]: record for record in matrix.check_case(CASE, tmp_path)}
    assert list(records) == list(matrix.CHECKED)
    assert records["given"]["warnings"] == [] and "error" not in records["given"]
    for kind in ("rotation_10", "transposed", "defocus_30"):
        assert records[kind]["warnings"], kind
    table = matrix.checks_summary(tmp_path, [CASE])
    assert "| given | 0 | 1 |" in table and "| rotation_10 | 1 | 1 |" in table and "right config accused" not in table


def test_the_checks_table_counts_warnings_and_refusals_and_names_the_accused(tmp_path):
    import json

    (tmp_path / "results").mkdir()
    said = {("c00", "given"): ["warning: one"], ("c01", "given"): [], ("c00", "transposed"): [],
            ("c01", "transposed"): None}  # None: the config refused
    for (name, kind), warnings in said.items():
        record = {"case": name, "kind": kind, "warnings": warnings or []}
        if warnings is None:
            record["error"] = "DataError('mirrored')"
        (tmp_path / "results" / f"{name}__check_{kind}.json").write_text(json.dumps(record))
    table = matrix.checks_summary(tmp_path, matrix.cases()[:2])
    assert "| given | 1 | 2 |" in table and "| transposed | 1 | 2 |" in table and "| defocus_30 | 0 | 0 |" in table
    named = [line for line in table.splitlines() if line.startswith("| c0")]
    assert len(named) == 2 and named[0].startswith("| c00 |") and "warning: one" in named[0]
    assert named[1].startswith("| c00 | transposed |")  # not caught


def test_the_wide_draw_draws_the_microscope_within_its_stated_bounds(capsys):
    """``--wide``: 64 cases w<seed>-NN whose simulation seeds no other draw uses; the energy balanced over 60, 80,
    200 and 300 kV; the semi-angle 15-30 mrad, the detector's edge 1.8-2.6 times it; the probe's disk (2 alpha
    |defocus|) 25-50 % of the window (K / 2 lambda / edge) and the step 10-30 % of that disk; C12 up to 30 Å, C30
    within 5 µm; the rest balanced as in the matrix. The description names the optics the matrix's cases leave out."""
    import math
    from collections import Counter

    wide = matrix.wide_cases(117)
    assert [case.name for case in wide] == [f"w117-{i:02d}" for i in range(64)]
    assert not {case.seed for case in wide} & {case.seed for seed in (54, 117) for case in matrix.cases(seed)}
    assert Counter(case.energy_eV for case in wide) == Counter({60e3: 16, 80e3: 16, 200e3: 16, 300e3: 16})
    for case in wide:
        lam = matrix.simulate.wavelength_A(case.energy_eV)
        window_A = case.detector_px / 2 * lam / (case.edge_mrad * 1e-3)
        disk_A = 2e-3 * case.semiangle_mrad * abs(case.defocus_A)
        assert 15.0 <= case.semiangle_mrad <= 30.0 and 1.79 <= case.edge_mrad / case.semiangle_mrad <= 2.61
        assert 0.249 <= disk_A / window_A <= 0.501 and 0.099 <= case.step_A / disk_A <= 0.301
        assert math.hypot(*case.c12_A) <= 30.1 and abs(case.c30_A) <= 5e4 and case.scan in (16, 20, 24, 32)
    for field in ("sample", "stored", "nominal_factor", "partial", "descan", "blur_px", "dose"):
        assert Counter(getattr(case, field) for case in wide) == Counter(getattr(case, field) for case in matrix.cases())
    assert wide[0].describe().endswith("300kV 16.3/30.8mrad step 1.32 C12 11 C30 +3.5um")
    assert matrix.main(["--wide", "--seed", "117", "--count", "2", "--list"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["w117-00", "w117-01"]


def test_an_oblong_draw_is_the_draw_on_rasters_that_are_not_square(tmp_path):
    """``--oblong``: each case of the draw with its columns drawn apart from its rows (OBLONG_COLUMNS), named o + its
    name, otherwise the same case; its file's patterns, positions and scan shape are rows x columns, the rows of the
    raster along y."""
    import h5py

    for seed, wide in ((54, False), (117, True)):
        plain, oblong = matrix.drawn(seed, wide), matrix.drawn(seed, wide, oblong_scans=True)
        assert [case.name for case in oblong] == [f"o{case.name}" for case in plain]
        assert all(case.columns != case.scan and case.columns in matrix.OBLONG_COLUMNS for case in oblong)
        assert [dataclasses.replace(case, name=case.name[1:], scan_x=0) for case in oblong] == plain
        assert matrix.drawn_seed(oblong[3].name) == seed
    assert len({case.columns for case in matrix.drawn(54, oblong_scans=True)}) == len(matrix.OBLONG_COLUMNS)
    case = dataclasses.replace(CASE, name="oblong", scan=8, scan_x=12, rotation_deg=0.0, transpose=False, flip_x=False,
                               descan=False)
    assert " 8x12 " in case.describe()
    matrix.write_case(case, tmp_path / "oblong.h5")
    with h5py.File(tmp_path / "oblong.h5") as f:
        assert f["patterns"].shape[:2] == (8, 12) and list(f.attrs["scan_shape"]) == [8, 12]
        positions = f["ground_truth/positions_A"][()].reshape(8, 12, 2)
    assert np.diff(positions[:, :, 1], axis=1) == pytest.approx(case.step_A)  # along a row: x
    assert np.diff(positions[:, :, 0], axis=0) == pytest.approx(case.step_A)  # down a column: y


@pytest.mark.parametrize("flags", [(False, False, False), (True, True, False), (False, True, True), (True, False, True)])
def test_the_told_run_s_astigmatism_is_turned_into_the_frame_auto_chose(tmp_path, flags):
    """The told run is told C12 in the frame auto chose. Flags of the truth's handedness that are not the truth's
    turn the told frame by quarter turns (the told rotation minus the truth's); a two-fold astigmatism in a frame
    turned by theta reads C12a cos 2(phi + theta) + C12b sin 2(phi + theta) (NumPy, here): negated by an odd number of
    quarter turns, kept by a half turn. C30 is kept."""
    import dataclasses

    case = dataclasses.replace(matrix.wide_cases(117)[11], transpose=False, flip_y=False, flip_x=False,
                               rotation_deg=10.0, c12_A=(-15.1, -8.8), c30_A=-16200.0)
    auto = {"auto_values": {"data.transform.transpose": flags[0], "data.transform.flip_y": flags[1],
                            "data.transform.flip_x": flags[2]}}
    told = matrix.told_config(tmp_path / "x.h5", case, auto)
    turned = np.radians(told["experiment"]["scan_rotation_deg"] - case.rotation_deg)
    assert round(np.degrees(turned)) % 90 == 0 and round(np.degrees(turned)) % 360 != 0 or flags == (False,) * 3
    phi = np.linspace(0.0, 2 * np.pi, 7)
    expected = -15.1 * np.cos(2 * (phi + turned)) - 8.8 * np.sin(2 * (phi + turned))
    given = told["experiment"]["aberrations"]
    assert given["C12a"] * np.cos(2 * phi) + given["C12b"] * np.sin(2 * phi) == pytest.approx(expected, abs=1e-9)
    assert given["C30"] == -16200.0


def test_a_varied_run_takes_the_base_config_with_the_changes_after_the_matrix_s_own(tmp_path, monkeypatch, capsys):
    """``--vary told rot --set ...``: the cached told config, copied as it was, run with the matrix's settings and then
    the changes (a set iteration count after the case's, so it wins), scored, printed beside the told run's NCC and
    kept apart from the table's records; a base that has not run is refused by name."""
    case = matrix.cases(54)[0]
    told = tmp_path / "runs" / f"{case.name}__told"
    told.mkdir(parents=True)
    (told / "config.yaml").write_text("experiment: {scan_rotation_deg: 12.5}\n")
    _write_records(tmp_path, {(case.name, "auto"): 0.79, (case.name, "told"): 0.80})
    ran = []

    def fake_run(command, **kwargs):
        ran.append(command)
        return type("Done", (), {"returncode": 0, "stdout": "", "stderr": ""})()

    monkeypatch.setattr(matrix.subprocess, "run", fake_run)
    monkeypatch.setattr(matrix, "score_run", lambda results, data: {
        "ncc": 0.845, "frame_angle_deg": 0.43, "final_frame_angle_deg": 0.43, "final_loss": -373378.4})
    assert matrix.main(["--seed", "54", "--cases", case.name, "--cache", str(tmp_path), "--vary", "told", "rot",
                        "--set", "experiment.scan_rotation_deg=13.0", "--set", "optim.iterations=12"]) == 0
    command = ran[0]
    sets = [command[i + 1] for i, arg in enumerate(command) if arg == "--set"]
    assert sets[0] == f"optim.iterations={case.iterations}" and sets[-2:] == ["experiment.scan_rotation_deg=13.0",
                                                                             "optim.iterations=12"]
    folder = tmp_path / "runs" / f"{case.name}__told+rot"
    assert command[command.index("run") + 1] == str(folder / "config.yaml")
    assert (folder / "config.yaml").read_text() == (told / "config.yaml").read_text()
    line = capsys.readouterr().out
    assert f"{case.name} told+rot: NCC 0.845 (told 0.800), frame +0.43 -> +0.43 deg" in line
    assert matrix.run_record(tmp_path, case.name, "told+rot")["ncc"] == 0.845
    assert "1 of 1 pass" in matrix.summary(tmp_path, [case])  # the varied run is not a verdict
    with pytest.raises(SystemExit, match="no truth run"):
        matrix.main(["--seed", "54", "--cases", case.name, "--cache", str(tmp_path), "--vary", "truth", "x"])
    with pytest.raises(SystemExit):  # a change with no run to change: said, not ignored
        matrix.main(["--seed", "54", "--cases", case.name, "--cache", str(tmp_path), "--set", "optim.iterations=12"])
    assert "--set changes the config of a --vary run" in capsys.readouterr().err


def test_the_measures_are_each_said_against_the_truth_in_its_frame():
    """``--measure``'s words for the centre of mass and the parallax: each line's angle against the truth's frame
    (``frame_difference``; the other handedness is "mirrored"), with the spread or error its line gives; a measure
    whose line is not there is left out."""
    from ptyacc.data.orientation import Orientation
    from ptyacc.data.parallax_orientation import ParallaxOrientation

    case = dataclasses.replace(matrix.cases(54)[0], transpose=True, flip_y=False, flip_x=True, rotation_deg=40.0)
    # the lines as the calibration writes them: a reworded line fails here, not silently in --measure
    com = Orientation((True, False, True), 41.5, 0.1, 0.7, (41.0, 42.0), -0.3, 400).line("x.h5", 0.01)
    parallax = ParallaxOrientation((True, True, True), 40.0, 90.0, 9.0, 0.31).line() + ": these are used"
    assert matrix.measures_said([com, parallax], case) == "; centre of mass +1.50 deg +-0.50, parallax mirrored +-0.31"
    turned = ParallaxOrientation((True, False, True), 39.2, 90.0, 9.0, 0.31).line()
    assert matrix.measures_said([turned], case) == "; parallax -0.80 deg +-0.31"
    unsure = ParallaxOrientation((True, False, True), 39.2, 90.0, 9.0).line()  # no standard error: none said
    assert matrix.measures_said([unsure], case) == "; parallax -0.80 deg"
    assert matrix.measures_said([], case) == ""
