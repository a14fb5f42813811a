"""The validation positions (optim.validation_fraction): chosen seeded and spread over the scan,
never in a batch on any process, and their error recorded per iteration."""

import h5py
import numpy as np
import pytest
import torch
import yaml
from conftest import tiny_config
from test_distributed import WORKER, launch, ranks

import ptyacc
from ptyacc.data import EpochBatches, load_data
from ptyacc.data.store import spatial_shards
from ptyacc.errors import ConfigError
from ptyacc.reconstruction.validation import validation_positions


def raster(side: int) -> np.ndarray:
    return np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), -1).reshape(-1, 2).astype(float)


def test_validation_positions_are_seeded_counted_and_spread_over_the_scan():
    positions = raster(20)  # 400 positions
    chosen = validation_positions(positions, 0.04, seed=3)
    assert len(chosen) == 16 and len(np.unique(chosen)) == 16
    assert np.array_equal(chosen, validation_positions(positions, 0.04, seed=3))
    assert not np.array_equal(chosen, validation_positions(positions, 0.04, seed=4))
    # one in each quarter of the field, 4 in each: spread, not clustered in one corner
    quarter = (positions[chosen, 0] >= 10) * 2 + (positions[chosen, 1] >= 10)
    assert np.bincount(quarter.astype(int), minlength=4).tolist() == [4, 4, 4, 4]
    assert len(validation_positions(positions, 0.0, seed=3)) == 0
    assert len(validation_positions(positions, 1e-4, seed=3)) == 1  # a fraction > 0 leaves out at least one
    with pytest.raises(ConfigError, match="optim.validation_fraction"):
        validation_positions(positions[:3], 0.9, seed=0)


@pytest.mark.parametrize("world, sharded", [(1, False), (3, False), (3, True)])
def test_batches_never_draw_left_out_positions_and_draw_the_rest_once(world, sharded):
    positions = raster(9)
    left_out = validation_positions(positions, 0.1, seed=0)
    shards = spatial_shards(positions, world) if sharded else None
    batches = EpochBatches(positions, 7, world, "random", 0, shards, left_out=left_out)
    for epoch in range(3):
        batches.set_epoch(epoch)
        drawn = np.concatenate([batches[i].indices.numpy() for i in range(len(batches))])
        assert sorted(drawn.tolist()) == sorted(set(range(81)) - set(left_out.tolist()))


def test_nothing_left_out_gives_the_same_batches():
    positions = raster(7)
    plain, empty = EpochBatches(positions, 5, 2, "compact", 1), EpochBatches(positions, 5, 2, "compact", 1,
                                                                             left_out=np.empty(0, dtype=np.int64))
    assert all(np.array_equal(a, b) for a, b in zip(plain.global_batches(), empty.global_batches()))


@pytest.fixture(scope="module")
def validated_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("validation")
    config = ptyacc.load_config(tiny_config(folder, optim={"iterations": 3, "batch_size": 8,
                                                           "validation_fraction": 0.2}))
    used: list[int] = []
    rec = ptyacc.reconstruct(config, on_step=lambda iteration, indices: used.extend(indices.tolist()))
    return config, rec, used


@pytest.mark.slow
def test_the_loader_never_yields_a_validation_position(validated_run):
    config, rec, used = validated_run
    left_out = validation_positions(rec.data.positions_A, 0.2, config.runtime.seed)
    assert len(left_out) == 7  # 20 % of 36
    assert not set(used) & set(left_out.tolist())
    assert sorted(used) == sorted(3 * sorted(set(range(36)) - set(left_out.tolist())))


def test_validation_error_is_the_loss_per_pattern_of_the_left_out_positions(validated_run):
    """Against NumPy: the amplitude loss of the model's predicted intensities for the left-out
    positions (plus the loss's floor, a millionth of the mean pattern's brightest pixel), summed over their
    pixels, divided by their number."""
    config, rec, _ = validated_run
    left_out = validation_positions(rec.data.positions_A, 0.2, config.runtime.seed)
    with torch.no_grad():
        predicted = rec.model(torch.as_tensor(left_out)).double().numpy()
    patterns = rec.data.patterns.double().numpy()
    floor = 1e-6 * patterns.mean(0).max()
    assert rec.model.amplitude_floor == pytest.approx(floor, rel=1e-6)
    measured = patterns[left_out]
    expected = ((np.sqrt(predicted + floor) - np.sqrt(measured)) ** 2).sum() / len(left_out)
    with h5py.File(rec.output_dir / "results.h5") as f:
        recorded = f["validation_error"][()]
    assert recorded.shape == (3,) and np.all(np.diff(recorded) < 0)
    assert recorded[-1] == pytest.approx(expected, rel=1e-4)
    run_log = (rec.output_dir / "run.log").read_text()
    assert "validation error" in run_log
    assert f"the amplitude loss's floor: {rec.model.amplitude_floor:.6g} added" in run_log


@pytest.mark.slow
def test_the_poisson_validation_error_is_the_loss_less_the_counts_own_per_pattern(tmp_path):
    """Against NumPy: with the Poisson loss, sum over the left-out patterns' pixels of
    I - M log I - (M - M log M), divided by their number: half the deviance per pattern, never
    negative (the bare loss is), and falling as the fit improves."""
    config = ptyacc.load_config(tiny_config(tmp_path, optim={"iterations": 3, "batch_size": 8, "loss": "poisson",
                                                             "validation_fraction": 0.2}))
    rec = ptyacc.reconstruct(config)
    left_out = validation_positions(rec.data.positions_A, 0.2, config.runtime.seed)
    with torch.no_grad():
        predicted = rec.model(torch.as_tensor(left_out)).double().numpy()
    measured = rec.data.patterns[left_out].double().numpy()
    own = measured - measured * np.log(np.where(measured > 0, measured, 1.0))
    bare = (predicted - measured * np.log(predicted)).sum() / len(left_out)
    expected = bare - own.sum() / len(left_out)
    with h5py.File(rec.output_dir / "results.h5") as f:
        recorded = f["validation_error"][()]
    assert bare < 0 < expected and np.all(recorded > 0) and np.all(np.diff(recorded) < 0)
    assert recorded[-1] == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["amplitude", "poisson"])
def test_two_processes_never_fit_validation_positions_and_agree_with_one(tmp_path, loss):
    """Both ranks' steps leave the validation positions out (replicated and sharded data), and the
    validation error of 2 processes is the 1-process one (Poisson: each process's deviance terms summed)."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tmp_path, optim={"iterations": 2, "batch_size": 8, "loss": loss,
                                                                "validation_fraction": 0.15})))
    config = ptyacc.load_config(path)
    left_out = set(validation_positions(load_data(config).positions_A, 0.15, config.runtime.seed).tolist())
    one = ptyacc.reconstruct(config, write=False)
    errors = {}
    for shard in ("false", "true"):
        out = tmp_path / f"p2{shard}"
        launch([str(WORKER), str(path), str(out / "records"), "--set", f"output.dir={out / 'results'}",
                "--set", f"runtime.shard_data={shard}"], 2)
        records = ranks(out / "records")
        for epoch in records[0]["indices"]:
            drawn = sorted(i for record in records for step in record["indices"][epoch] for i in step)
            assert drawn == sorted(set(range(36)) - left_out)  # each fitted position once, no validation one
        with h5py.File(out / "results" / "results.h5") as f:
            errors[shard] = f["validation_error"][()]
    np.testing.assert_allclose(errors["false"], one.results.validation_error, rtol=1e-5)
    assert np.all(np.isfinite(errors["true"]))


@pytest.mark.slow
def test_a_resumed_run_marks_the_iterations_before_it_unknown(tmp_path):
    raw = tiny_config(tmp_path, optim={"iterations": 2, "batch_size": 8, "validation_fraction": 0.2},
                      output={"dir": str(tmp_path / "out"), "checkpoint_every": 1})
    first = ptyacc.reconstruct(ptyacc.load_config(raw))
    with h5py.File(first.output_dir / "results.h5") as f:
        before = f["validation_error"][()]
    raw["optim"]["iterations"] = 3
    ptyacc.reconstruct(ptyacc.load_config(raw), resume=True)
    with h5py.File(first.output_dir / "results.h5") as f:
        after = f["validation_error"][()]
    assert after.shape == (3,) and np.isnan(after[:2]).all() and after[2] < before[1]
