"""``optim.batch_size: auto`` (ptyacc/reconstruction/batch_auto.py): one step per iteration where the descan
shifted the patterns, about 8 otherwise; on the independent simulator's descan the whole scan in one step
recovers the phase far better than small batches."""

import h5py
import pytest
import yaml
from conftest import descan_case

import ptyacc
from ptyacc.reconstruction.batch_auto import resolved_batch, steps_batch
from ptyacc.results.quality import best_shift_ncc


def test_the_rule_known_answers():
    assert resolved_batch(1024, 48, moved=True).size == 1024  # the whole scan
    assert resolved_batch(65536, 64, moved=True).size == 4096  # 2^24 pattern pixels
    assert resolved_batch(100, 1024, moved=True).size == 16
    assert [resolved_batch(n, 64, moved=False).size for n in (10, 576, 1024, 65536)] == [4, 72, 128, 256]
    assert [steps_batch(n) for n in (10, 576, 1024, 65536)] == [4, 72, 128, 256]
    assert "descan" in resolved_batch(1024, 48, moved=True).why
    assert resolved_batch(576, 64, moved=False).said() == ("optim.batch_size: 72 of 576 positions (auto: about 8 steps "
                                                           "per iteration)")


def run(path, out, batch):
    config = {"data": {"path": str(path), "transform": {"descan": "auto", "descan_model": "shift"}},
              "experiment": {"positions": {"key": "positions_A"}},
              "optim": {"iterations": 30, "batch_size": batch},
              "output": {"dir": str(out), "figures": False}, "runtime": {"progress": False, "threads": 1}}
    rec = ptyacc.reconstruct(ptyacc.load_config(config))
    with h5py.File(out / "results.h5") as f:
        chosen = yaml.safe_load(f.attrs["auto_values"]).get("optim.batch_size")
    log = (out / "run.log").read_text()
    return rec, chosen, log


@pytest.mark.slow
def test_a_descan_taken_out_of_the_patterns_takes_the_whole_scan_in_one_step(grid_simulator, tmp_path):
    path, truth, dx, positions = descan_case(grid_simulator, tmp_path)
    found = {}
    for batch in ("auto", 32):  # 32: what auto chooses for 256 positions whose patterns stay as read
        rec, chosen, log = run(path, tmp_path / str(batch), batch)
        found[batch], _ = best_shift_ncc(rec.results.phase, rec.results.origin_A, dx, positions, truth,
                                         levels=((0.5, 4), (0.1, 4)))
        if batch == "auto":
            assert chosen == 256 and "optim.batch_size: 256 of 256 positions (auto: one step per iteration" in log
    assert found["auto"] > 0.9 and found["auto"] > found[32] + 0.05, found


def test_auto_values_name_the_batch_and_the_iterations_the_run_took(tmp_path):
    """One record of what auto became (``ResolvedAutos``): results.h5's auto_values, run.log's "auto:" line and
    the config the run took (``Reconstruction.config``) agree on the batch and on ``optim.iterations: auto``."""
    from conftest import tiny_config

    from ptyacc.config.steps import AUTO_ITERATIONS

    raw = tiny_config(tmp_path, optim={"iterations": "auto", "batch_size": "auto", "stop": {"gain": 0.5}},
                      output={"dir": str(tmp_path / "out"), "figures": False})
    rec = ptyacc.reconstruct(ptyacc.load_config(raw))
    with h5py.File(tmp_path / "out" / "results.h5") as f:
        values = yaml.safe_load(f.attrs["auto_values"])
    assert values["optim.batch_size"] == rec.config.optim.batch_size == steps_batch(36) == 4
    assert values["optim.iterations"] == rec.config.optim.iterations == AUTO_ITERATIONS > len(rec.loss)
    assert "optim.stop.gain" not in values and rec.config.optim.stop.gain == 0.5  # given, not auto
    said = [line for line in (tmp_path / "out" / "run.log").read_text().splitlines() if line.split(" ")[1:2] == ["auto:"]]
    assert len(said) == 1 and "optim.batch_size 4," in said[0] and f"optim.iterations {AUTO_ITERATIONS}" in said[0]
