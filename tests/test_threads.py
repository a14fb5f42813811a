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


@pytest.mark.parametrize("load, busy, expected", [
    (0.58, 0.05, 2),  # the load average still holds the last run's minute; the cores are idle now
    (0.3, 1.6, 2),  # a moment's burst: the minute's average says the cores are mostly free
    (1.9, 1.7, 1),  # both busy
])
def test_auto_threads_take_the_lesser_of_the_load_average_and_the_cores_busy_now(load, busy, expected):
    chosen, line = auto_threads(2, load, 1, None, busy)
    assert chosen == expected
    assert f"runtime.threads: auto: {expected} (2 usable core(s), load average {load:.2f}, {busy:.2f} busy now)" in line


def test_the_cores_busy_now_from_the_systems_clock_ticks(tmp_path, monkeypatch):
    """/proc/stat's first line: user nice system idle iowait irq softirq steal (guest ...): busy ticks are all
    but idle and iowait; over a window, busy ticks / all ticks of every core is the busy share of the cores."""
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 2 3 100 5 0 1 4 7 0\ncpu0 5 1 1 50 2 0 0 2 3 0\n")
    assert threads.cpu_times(str(stat)) == (20, 125)
    assert threads.cpu_times(str(tmp_path / "none")) is None
    ticks = iter([(1000, 4000), (1150, 4200)])  # 150 of 200 ticks busy over the window
    monkeypatch.setattr(threads, "cpu_times", lambda stat: next(ticks))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    assert threads.busy_cores(0.0) == pytest.approx(3.0)


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
    monkeypatch.setattr(threads, "busy_cores", lambda: None)  # a system that does not say
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
