"""Several scans of one object (the top-level ``scans:``, ptyacc/quantities/scans.py): a focal
series simulated by the benchmark grid's NumPy multislice (independent of ptyacc) reconstructed
together beats each scan alone; every scan has its own probe and positions; 1 and 2 processes,
and the split object, agree; what the scans must share is checked where the user typed it."""


import h5py
import numpy as np
import pytest
import torch
import yaml
from conftest import tiny_config
from test_distributed import ONE_TWO_DATA_SPLIT, launch_configs

import ptyacc
from ptyacc.errors import ConfigError
from ptyacc.optim.descent import ProbeDescent, illumination
from ptyacc.reconstruction.engine import Reconstructor
from ptyacc.results.quality import placed_ncc

FOCI_A = (60.0, 200.0)


@pytest.fixture(scope="module")
def focal_series(grid_simulator, tmp_path_factory):
    """Two 12 x 12 scans of the same atoms (seed 3) at 60 and 200 Å underfocus, 1e4 electrons per
    pattern; the second file's positions 0.15 Å rms off the truth."""
    folder = tmp_path_factory.mktemp("focal")
    paths = []
    for number, focus in enumerate(FOCI_A):
        path = folder / f"focus_{focus:g}.h5"
        grid_simulator.write(str(path), grid_simulator.Setting(defocus_A=focus, dose=1e4, scan_shape=(12, 12),
                                                               detector_px=48, seed=3))
        if number == 1:
            with h5py.File(path, "r+") as f:
                f["positions_A"][...] += np.random.default_rng(5).normal(0.0, 0.15, f["positions_A"].shape)
        paths.append(path)
    with h5py.File(paths[0]) as f:
        truth = {"phase": f["ground_truth/phase"][()], "positions_A": f["ground_truth/positions_A"][()]}
    return paths, truth


def config(paths, tmp_path, **sections) -> dict:
    settings = {"data": {"path": str(paths[0])}, "experiment": {"positions": {"key": "positions_A"}},
                "optim": {"iterations": 30}, "runtime": {"progress": False}, "output": {"dir": str(tmp_path / "out")}}
    settings.update(sections)
    return settings


def ncc(rec: ptyacc.Reconstruction, truth: dict) -> float:
    """The phase NCC over scan 0's region, placed where its positions' common shift from the truth puts it."""
    positions = rec.results.positions_A[:len(truth["positions_A"])]
    shift_px = (positions - truth["positions_A"]).mean(0) / rec.results.dx_A
    return placed_ncc(rec.results.phase, np.asarray(rec.results.origin_A), rec.results.dx_A, truth["positions_A"],
                      truth["phase"], shift_px)


@pytest.mark.slow
def test_a_focal_series_together_beats_each_scan_alone(focal_series, tmp_path):
    """Measured: 0.984 and 0.968 alone, 0.989 together (30 iterations each); each scan keeps its
    own probe, whose focus is its file's."""
    paths, truth = focal_series
    alone = [ncc(ptyacc.reconstruct(ptyacc.load_config(config([p], tmp_path)), write=False), truth) for p in paths]
    settings = config(paths, tmp_path, scans=[{"data": {"path": str(p)}} for p in paths])
    together = ptyacc.reconstruct(ptyacc.load_config(settings))
    assert ncc(together, truth) > max(alone) + 0.003
    with h5py.File(tmp_path / "out" / "results.h5") as f:
        probes, scan_of = f["scans/probes"][()], f["scans/scan_of_position"][()]
        np.testing.assert_array_equal(f["probe"][()], probes[0])
    assert probes.shape == (2, 1, 48, 48) and np.array_equal(np.bincount(scan_of), [144, 144])
    # a wider defocus spreads the probe: the second scan's is the broader one
    spread = [float((np.abs(p[0]) ** 2 > 0.1 * (np.abs(p[0]) ** 2).max()).sum()) for p in probes]
    assert spread[1] > 1.5 * spread[0]


@pytest.mark.slow
def test_each_scan_refines_its_own_positions(focal_series, tmp_path):
    """The second file's positions are 0.15 Å rms off: refined together, they come to within half of that."""
    paths, truth = focal_series
    settings = config(paths, tmp_path, scans=[{"data": {"path": str(p)}} for p in paths],
                      optim={"iterations": 30, "start": {"positions": 1}})
    refined = ptyacc.reconstruct(ptyacc.load_config(settings), write=False).results.positions_A
    with h5py.File(paths[1]) as f:
        given = f["positions_A"][()]

    def rms(positions):
        error = positions - truth["positions_A"]
        return float(np.sqrt(((error - error.mean(0)) ** 2).sum(1).mean()))

    assert rms(given) > 0.18 and rms(refined[144:]) < 0.5 * rms(given)
    # the first scan's were right: they move no more than when that scan is refined alone (0.13 Å at this dose)
    alone = config(paths, tmp_path, optim={"iterations": 30, "start": {"positions": 1}})
    assert rms(refined[:144]) < 1.2 * rms(ptyacc.reconstruct(ptyacc.load_config(alone), write=False).results.positions_A)


def test_what_the_scans_must_share_is_checked(focal_series, tmp_path, grid_simulator):
    paths, _ = focal_series
    other = tmp_path / "300kV.h5"
    grid_simulator.write(str(other), grid_simulator.Setting(energy_eV=300e3, dose=1e4, scan_shape=(4, 4),
                                                            detector_px=48, seed=3))
    with pytest.raises(ConfigError, match=r"scans\[1\]: wavelength_A .* differs from scan 0's"):
        ptyacc.reconstruct(ptyacc.load_config(config(paths, tmp_path, scans=[{"data": {"path": str(p)}}
                                                                              for p in (paths[0], other)])), write=False)
    with pytest.raises(ConfigError, match=r"scans\[1\]\.experiment\.defocus_AA: unknown key"):
        ptyacc.load_config(config(paths, tmp_path, scans=[{}, {"experiment": {"defocus_AA": 3}}]))
    with pytest.raises(ConfigError, match="model.probe_variation: .* several scans"):
        ptyacc.load_config(config(paths, tmp_path, scans=[{}], model={"probe_variation": 2}))


@pytest.mark.slow
def test_two_processes_and_the_split_object_agree(tmp_path):
    """1 and 2 processes give the same joint reconstruction; the split object gives shard_data's
    (its batches). Two simulated scans of one object (the simulator's seed) at two defocus values,
    on a field wide enough for two tiles."""
    settings = tiny_config(tmp_path, optim={"iterations": 3, "batch_size": 8}, output={"figures": False})
    settings["scans"] = [{"experiment": {"defocus_A": 20.0}}, {"experiment": {"defocus_A": 60.0}}]
    settings["data"]["simulate"].update(scan_shape=[10, 10])
    settings["experiment"]["scan_step_A"] = 3.0
    outs = launch_configs(tmp_path, [(name, settings, processes, extra) for name, processes, extra in ONE_TWO_DATA_SPLIT])
    runs = {name: ptyacc.load_results(out / "results" / "results.h5") for name, out in outs.items()}
    assert runs["one"].quantities["scans"]["probes"].shape == (2, 1, 16, 16)
    for reference, name in (("one", "two"), ("data", "split")):
        mine, theirs = runs[reference], runs[name]
        np.testing.assert_allclose(theirs.loss, mine.loss, rtol=1e-4)
        assert np.linalg.norm(theirs.object - mine.object) / np.linalg.norm(mine.object) < 1e-4
        probes = mine.quantities["scans"]["probes"]
        assert np.linalg.norm(theirs.quantities["scans"]["probes"] - probes) / np.linalg.norm(probes) < 1e-4


def test_each_scans_calibration_autos_are_named_by_its_number(focal_series, tmp_path):
    """A calibration auto that each scan resolves on its own load (here ``data.bad_pixels``, from the top
    level) is named ``scans[i].<key>`` in auto_values, once per scan, and stays auto in the run's config."""
    paths, _ = focal_series
    settings = config(paths, tmp_path, scans=[{"data": {"path": str(p)}} for p in paths])
    settings["data"]["bad_pixels"] = "auto"
    run = Reconstructor(ptyacc.load_config(settings), write=False)
    run.build()
    run.closing.close()
    values = yaml.safe_load(run.texts["auto_values"])
    assert {key for key in values if "bad_pixels" in key} == {"scans[0].data.bad_pixels", "scans[1].data.bad_pixels"}
    assert all(isinstance(values[f"scans[{i}].data.bad_pixels"], int) for i in (0, 1))
    assert run.config.data.bad_pixels == "auto"


def built_bright_and_faint(tmp_path) -> Reconstructor:
    """A built run of two simulated scans, at 20 and 60 Å defocus, the second with four times the first's counts."""
    settings = tiny_config(tmp_path, output={"figures": False})
    settings["scans"] = [{"experiment": {"defocus_A": 20.0}},
                         {"experiment": {"defocus_A": 60.0}, "data": {"simulate": {"dose": 4e5}}}]
    settings["data"]["simulate"]["dose"] = 1e5
    run = Reconstructor(ptyacc.load_config(settings), write=False)
    run.build()
    run.closing.close()
    return run


def test_each_position_is_lit_by_its_own_scans_probe(tmp_path):
    """The object's preconditioner (``illumination``): every position adds its own scan's probe
    intensity at its window, against a NumPy sum; the batch path gives the same. The second scan
    has four times the counts and each probe starts at its own scan's (scan 0's was once scaled to
    the mean of both), so scan 0's probe at every position would be far off."""
    model = built_bright_and_faint(tmp_path).model
    probes = model.quantities["scans"].every_probe(model.complex_probe(), model.probe_scale).detach().numpy()
    intensity = (np.abs(probes) ** 2).sum(1)
    assert intensity[1].sum() > 3 * intensity[0].sum()
    corners, scan_of = model.fixed_corners.numpy(), model.quantities["scans"].scan_of_position.numpy()
    k = intensity.shape[-1]
    expected = np.zeros(tuple(model.object_shape))
    for (y, x), number in zip(corners, scan_of, strict=True):
        expected[y:y + k, x:x + k] += intensity[number]
    expected /= len(corners)
    every = torch.arange(len(corners))
    for light in (illumination(model), illumination(model, every)):
        np.testing.assert_allclose(light.numpy(), expected, rtol=0, atol=1e-5 * expected.max())


@pytest.mark.parametrize(("probe_lr", "stepped_by"), [(None, ProbeDescent), (3e-3, torch.optim.Adam)])
def test_every_scans_probe_takes_the_probes_step(tmp_path, probe_lr, stepped_by):
    """The probes of scans 1.. are stepped as scan 0's is: the least-squares step by default, Adam where
    optim.lr.probe is given (Adam's small steps beside scan 0's least-squares ones left the second scan's
    probe, and its counts, behind: docs/how-to/several-scans.md)."""
    settings = tiny_config(tmp_path, output={"figures": False})
    settings["scans"] = [{"experiment": {"defocus_A": 20.0}}, {"experiment": {"defocus_A": 60.0}}]
    if probe_lr is not None:
        settings["optim"]["lr"] = {"probe": probe_lr}
    run = Reconstructor(ptyacc.load_config(settings), write=False)
    run.build()
    run.closing.close()
    groups = {group.name: group for group in run.groups}
    mine, scan_0 = groups["scan_probes"], groups["probe"]
    assert type(mine.optimizer) is type(scan_0.optimizer) is stepped_by
    assert mine.lr == scan_0.lr and mine.optimizer.param_groups[0].get("factor") == scan_0.optimizer.param_groups[0].get("factor")


@pytest.fixture(scope="module")
def low_dose_scans(grid_simulator, tmp_path_factory):
    """12 x 12 scans of the same atoms (seed 3), each file with its true positions: ``a`` at 40 Å
    overfocus, 1e3 electrons per pattern; ``b`` at 120 Å underfocus turned 3 degrees, 1e3; ``b_summed``
    the same at 2e3 (the pair's counts in one scan); ``b_bright`` the same at 3e4."""
    folder, paths = tmp_path_factory.mktemp("low_dose"), {}
    for name, focus, dose, turn in (("a", -40.0, 1e3, 0.0), ("b", 120.0, 1e3, 3.0), ("b_summed", 120.0, 2e3, 3.0),
                                    ("b_bright", 120.0, 3e4, 3.0)):
        paths[name] = folder / f"{name}.h5"
        grid_simulator.write(str(paths[name]), grid_simulator.Setting(
            defocus_A=focus, dose=dose, scan_shape=(12, 12), detector_px=48, seed=3, scan_rotation_deg=turn))
        with h5py.File(paths[name], "r+") as f:  # the turned scan's positions as measured
            f["positions_A"][...] = f["ground_truth/positions_A"][()]
    with h5py.File(paths["a"]) as f:
        truth = {"phase": f["ground_truth/phase"][()], "positions_A": f["ground_truth/positions_A"][()]}
    return paths, truth


@pytest.mark.slow
def test_two_low_dose_scans_pay_and_a_faint_one_never_hurts(low_dose_scans, tmp_path):
    """Measured (30 iterations): a and b alone 0.919 and 0.904, together 0.951 (+0.032), where b's
    counts in one scan give 0.943 (and a's 0.962: the overfocus sees this object better per count).
    A faint scan 0 (1e3) beside a bright one (3e4): 0.993, as the bright one alone; 0.879 when the
    object's step was scaled by scan 0's probe alone."""
    paths, truth = low_dose_scans

    def phase_ncc(*names):
        scans = [{"data": {"path": str(paths[name])}} for name in names] if len(names) > 1 else None
        settings = config([paths[names[0]]], tmp_path, **({"scans": scans} if scans else {}))
        return ncc(ptyacc.reconstruct(ptyacc.load_config(settings), write=False), truth)

    alone = [phase_ncc("a"), phase_ncc("b")]
    together = phase_ncc("a", "b")
    assert together > max(alone) + 0.02
    assert together > phase_ncc("b_summed")
    assert phase_ncc("a", "b_bright") > phase_ncc("b_bright") - 0.003


@pytest.mark.slow
def test_two_draws_of_one_scan_pay_as_their_summed_counts(grid_simulator, tmp_path):
    """Two scans at one focus and one set of positions, 300 electrons per pattern each (independent draws): their
    joint run must gain what their counts gain in one scan. Measured (30 iterations): 0.769 alone, 0.836 with the
    summed counts in one scan; together 0.774 while every scan's steps were least-squares ones (an iteration took
    twice one scan's steps, each from half the counts), 0.816 with the object's step divided by the scans' number,
    0.818 with each scan's share of the loss's floor as well (benchmarks/records/2026-12-02-two-scans-mos2.md)."""
    clean = tmp_path / "clean.h5"
    grid_simulator.write(str(clean), grid_simulator.Setting(defocus_A=120.0, dose=0, scan_shape=(12, 12),
                                                            detector_px=48, seed=3))
    with h5py.File(clean) as f:
        intensity = f["patterns"][()]
        truth = {"phase": f["ground_truth/phase"][()], "positions_A": f["ground_truth/positions_A"][()]}
    draws = [np.random.default_rng(seed).poisson(intensity * 300.0).astype(np.float32) for seed in (11, 12)]
    paths = {}
    for name, patterns in (("one", draws[0]), ("other", draws[1]), ("summed", draws[0] + draws[1])):
        paths[name] = tmp_path / f"{name}.h5"
        with h5py.File(clean) as source, h5py.File(paths[name], "w") as f:
            for key in source:
                source.copy(key, f)
            f.attrs.update(dict(source.attrs))
            f["patterns"][...] = patterns
            f["positions_A"][...] = truth["positions_A"]

    def phase_ncc(*names):
        scans = [{"data": {"path": str(paths[name])}} for name in names] if len(names) > 1 else None
        settings = config([paths[names[0]]], tmp_path, **({"scans": scans} if scans else {}))
        settings["runtime"]["threads"] = 1
        return ncc(ptyacc.reconstruct(ptyacc.load_config(settings), write=False), truth)

    alone, together = phase_ncc("one"), phase_ncc("one", "other")
    assert together > alone + 0.03
    assert together > phase_ncc("summed") - 0.03


def test_each_scan_carries_its_share_of_the_loss_floor(tmp_path):
    """Several scans: each pattern's Poisson floor is POISSON_FLOOR times its scan's share of the scans' mean counts
    (against NumPy), so that two scans of half the counts carry together the floor of one scan with their summed
    counts; the loss and its gradient factor then follow the NumPy formula with those floors."""
    from ptyacc.physics import intensity_loss_terms
    from ptyacc.physics.chain import POISSON_FLOOR

    run = built_bright_and_faint(tmp_path)
    scans = run.model.quantities["scans"]
    scan_of = scans.scan_of_position.numpy()
    counts = np.array([run.data.patterns[scan_of == s].sum(dim=(-2, -1), dtype=torch.float64).mean().item()
                       for s in (0, 1)])
    indices = torch.tensor([0, len(scan_of) - 1])
    share = scans.floor_share(indices).numpy().astype(np.float64)
    np.testing.assert_allclose(share, counts[scan_of[indices.numpy()]] / counts.sum(), rtol=1e-6)
    coherent = torch.rand(2, 4, 4, dtype=torch.float64) * 0.05
    measured = torch.poisson(coherent * 3)
    loss, factor, _, _ = intensity_loss_terms(coherent, measured, "poisson", floor_share=torch.from_numpy(share))
    floor = POISSON_FLOOR * share[:, None, None]
    model = coherent.numpy() + floor
    np.testing.assert_allclose(loss.item(), (model - measured.numpy() * np.log(model)).sum(), rtol=1e-12)
    np.testing.assert_allclose(factor.numpy(), 2 * (1 - measured.numpy() / model), rtol=1e-12)
