"""`ptyacc bench`'s memory figures: the minimum it compares against, and the peak counter."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from click.testing import CliRunner
from conftest import tiny_config

from ptyacc.commands.cli import cli
from ptyacc.speed import bench


def test_bench_memory_minimum_counts_patterns_state_and_one_batch():
    """patterns + 3 x parameters (value, Adam's two moments) + one batch of complex waves."""
    model = torch.nn.Module()
    model.object = torch.nn.Parameter(torch.zeros(1, 3, 40, 40, 2))
    model.probe = torch.nn.Parameter(torch.zeros(2, 16, 16, 2))
    data = SimpleNamespace(patterns=torch.zeros(36, 16, 16), detector_px=16)
    expected = 36 * 16 * 16 * 4 + 3 * 4 * (3 * 40 * 40 * 2 + 2 * 16 * 16 * 2) + 8 * 2 * 1 * 3 * 16 * 16 * 8
    assert bench._minimum_bytes(model, data, batch_size=8) == expected


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_bench_peak_memory_counter_sees_an_allocation_after_reset():
    """The reset peak counter rises by at least the size of a tensor written after the reset,
    and a new reset brings it back down once the tensor is freed."""
    bench._release_free_memory()
    before = bench._rss_bytes()
    assert bench._reset_peak_rss()
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, written, so resident
    assert bench._status_bytes("VmHWM") - before >= 60 * 2**20
    del block
    bench._release_free_memory()
    assert bench._reset_peak_rss()
    assert bench._status_bytes("VmHWM") - before < 32 * 2**20


def test_bench_json_memory_fields_are_consistent(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config(tmp_path)))
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, ["bench", str(config), "-k", "2", "--warmup", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["memory_ratio"] == report["peak_memory_bytes"] / report["minimum_memory_bytes"]
    assert report["peak_memory_bytes"] > 0
    assert "minimum" in result.stdout and "ratio" in result.stdout


def test_bench_with_trackers_times_the_hooks_and_leaves_no_folder(tmp_path, monkeypatch):
    """With output.trackers the run writes into a temporary folder (removed after); the
    iteration with its hooks is timed from one iteration's first step to the next one's."""
    pytest.importorskip("tensorboard")
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config(tmp_path, output={"trackers": ["tensorboard"], "image_every": 1})))
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, ["bench", str(config), "-k", "3", "--warmup", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["trackers"] == ["tensorboard"] and "trackers: tensorboard" in result.stdout
    # two spans (iterations 2-3 and 3-4), each at least as long as its iteration
    assert report["s_per_iteration_with_hooks"] >= min(report["s_per_iteration_all"][:2])
    assert list((tmp_path / "scratch").iterdir()) == [] and not (tmp_path / "out").exists()


def test_bench_reports_the_batch_the_run_took(tmp_path):
    """``optim.batch_size: auto`` with positions left out for validation: the batch of the fitted positions
    (``batch_auto.steps_batch``, 108 // 8), which the run took, not that of all 144."""
    from ptyacc.config import load_config
    from ptyacc.reconstruction.batch_auto import steps_batch

    raw = tiny_config(tmp_path, optim={"iterations": 2, "batch_size": "auto", "validation_fraction": 0.25})
    raw["data"]["simulate"]["scan_shape"] = [12, 12]
    report = bench.run_bench(load_config(raw), iterations=2, warmup=1)
    assert report["batch_size"] == steps_batch(108) == 13 != steps_batch(144)
