"""runtime.threads: auto takes the usable cores less the load, keeps OMP_NUM_THREADS, says why."""

import pytest
import torch
import yaml
from conftest import tiny_config

from ptyacc.commands.cli import main
from ptyacc.reconstruction import threads
from ptyacc.reconstruction.threads import auto_threads


@pytest.mark.parametrize("cores, load, processes, expected", [
    (2, 0.1, 1, 2),  # quiet: every core
    (2, 1.2, 1, 1),  # one core busy with other work
    (2, 4.8, 1, 1),  # overloaded: one thread, never none
    (16, 3.6, 1, 12),
    (16, 0.0, 4, 4),  # a node's cores shared by its processes
    (16, 10.0, 4, 2),  # 6 cores left for 4 processes
])
def test_auto_threads_from_cores_and_load(cores, load, processes, expected):
    chosen, line = auto_threads(cores, load, processes, None)
    assert chosen == expected
    assert f"runtime.threads: auto: {expected} ({cores} usable core(s), load average {load:.2f}" in line
    assert ("set runtime.threads to choose" in line) == (expected < cores // processes)


def test_omp_num_threads_is_kept():
    chosen, line = auto_threads(8, 7.0, 1, "3")
    assert chosen is None and line.endswith("(OMP_NUM_THREADS=3)")


@pytest.mark.slow
def test_a_busy_machine_is_said_at_start_up(tmp_path, capsys, monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "_chosen", None)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (4.5, 3.0, 2.0))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tmp_path, optim={"iterations": 1, "batch_size": 8})))
    try:
        assert main(["run", str(path), "--quiet"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    err = capsys.readouterr().err
    assert "ptyacc: runtime.threads: auto: 1 (2 usable core(s), load average 4.50); set runtime.threads" in err
    assert "runtime.threads: auto: 1" in (tmp_path / "out" / "run.log").read_text()
