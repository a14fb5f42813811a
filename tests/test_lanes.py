"""The two test lanes (tests/conftest.py): a test that starts processes is found from its code and marked
`processes` and `slow`, one that hides its launch fails unless marked by hand, the fast lane
(`-m "not slow"`) leaves them out, slow tests get the long timeout, and each run's durations are written."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import conftest
import pytest

ROOT = Path(__file__).resolve().parents[1]

# code of the kinds the finder follows, written as a module of the tests
SAMPLE = '''
import subprocess
from subprocess import run as run_process

import numpy as np


def starts():
    subprocess.run(["true"])


def by_an_imported_name():
    run_process(["true"])


def through_a_helper():
    return starts()


class Launcher:
    def go(self):
        return starts()


def through_a_class():
    return Launcher().go()


def in_a_lambda():
    return lambda: starts()


def pure():
    return np.sum([1, 2])


def recursive(n):
    return recursive(n - 1) if n else pure()


def fixture_that_launches():
    yield from ([through_a_helper()])
'''


def sample_module(folder: Path):
    path = folder / "sample_launches.py"
    path.write_text(SAMPLE)
    spec = importlib.util.spec_from_file_location("sample_launches", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_launch_is_found_through_helpers_classes_and_lambdas(tmp_path):
    sample = sample_module(tmp_path)
    for name in ("starts", "by_an_imported_name", "through_a_helper", "through_a_class", "in_a_lambda",
                 "fixture_that_launches"):
        assert conftest.reaches_a_launch(getattr(sample, name), (tmp_path,)), name
    for name in ("pure", "recursive"):
        assert not conftest.reaches_a_launch(getattr(sample, name), (tmp_path,)), name


def test_code_outside_the_tests_is_not_followed(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    sample = sample_module(tmp_path)
    assert not conftest.reaches_a_launch(sample.starts, (tmp_path / "elsewhere",))
    assert not conftest.reaches_a_launch(sample.through_a_helper)  # the default: the files under tests/


def test_this_runs_tests_keep_the_lane_rules(request):
    """Over the tests of this run: `processes` implies `slow`, every slow test has a timeout of its own
    at least SLOW_TIMEOUT_S, and the rest have pyproject's (pytest-timeout is in the test extra)."""
    assert float(request.config.getini("timeout")) > 0
    for item in request.session.items:
        if item.get_closest_marker("processes") is not None:
            assert item.get_closest_marker("slow") is not None, item.nodeid
        if item.get_closest_marker("slow") is not None:
            timeout = item.get_closest_marker("timeout")
            assert timeout is not None and timeout.args[0] >= conftest.SLOW_TIMEOUT_S, item.nodeid


@pytest.mark.processes
def test_each_kind_of_launch_is_counted(tmp_path):
    before = len(conftest.LAUNCHES.commands)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert conftest.LAUNCHES.commands[before:] == [f"{sys.executable} -c pass"]
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert conftest.LAUNCHES.commands[before + 1:] == ["os.fork()"]
    import multiprocessing

    process = multiprocessing.get_context("spawn").Process(target=print)
    process.start()
    process.join()
    assert process.exitcode == 0 and "spawn_main" in conftest.LAUNCHES.commands[-1]


# a test file for a pytest of its own: a launch the finder sees, one it cannot see (marked and not), a hang
LANE_TESTS = '''
import subprocess
import sys
import time

import pytest


def launch():
    return subprocess.run([sys.executable, "-c", "pass"]).returncode


def test_seen():
    assert launch() == 0


def test_hidden():
    assert __import__("subprocess").run([sys.executable, "-c", "pass"]).returncode == 0


@pytest.mark.processes
def test_hidden_marked():
    assert __import__("subprocess").run([sys.executable, "-c", "pass"]).returncode == 0


def test_hangs():
    time.sleep(600)


def test_pure():
    assert sum([1, 2]) == 3
'''


def inner_pytest(folder: Path, *options: str) -> subprocess.CompletedProcess:
    """pytest on ``folder`` with the project's settings and tests/conftest.py as a plugin."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(folder),
                           "-p", "conftest", "-o", f"cache_dir={folder / 'cache'}", *options, str(folder)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=folder)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one", "xdist"])
def test_an_unmarked_launch_fails_a_hang_times_out_and_the_fast_lane_leaves_the_launches_out(tmp_path, workers):
    """The same in one pytest process and with pytest-xdist's workers (the README's command runs the suite so)."""
    (tmp_path / "test_sample.py").write_text(LANE_TESTS)
    fast = inner_pytest(tmp_path, "-q", "--collect-only", "-m", "not slow")
    assert [line for line in fast.stdout.splitlines() if "::" in line] == [
        "test_sample.py::test_hidden", "test_sample.py::test_hangs", "test_sample.py::test_pure"], fast.stdout

    whole = inner_pytest(tmp_path, "-q", "-o", "timeout=10", *workers)
    assert "test_sample.py::test_hidden started 1 process(es)" in whole.stdout, whole.stdout
    assert "give it @pytest.mark.processes" in whole.stdout and "Timeout (>10.0s) from pytest-timeout" in whole.stdout
    rows = (tmp_path / "cache" / "d" / "ptyacc" / "durations.tsv").read_text().splitlines()
    assert rows[0].startswith("# ") and rows[1] == "seconds\tcpu_seconds\tlane\toutcome\ttest"
    table = {test: (lane, outcome) for _, _, lane, outcome, test in (row.split("\t") for row in rows[2:])}
    assert table == {"test_sample.py::test_seen": ("slow", "passed"), "test_sample.py::test_hidden": ("fast", "failed"),
                     "test_sample.py::test_hidden_marked": ("slow", "passed"),
                     "test_sample.py::test_hangs": ("fast", "failed"), "test_sample.py::test_pure": ("fast", "passed")}
    seconds = [float(row.split("\t")[0]) for row in rows[2:]]
    assert seconds == sorted(seconds, reverse=True)
    cpu = {row.split("\t")[4]: float(row.split("\t")[1]) for row in rows[2:]}
    assert all(value >= 0 for value in cpu.values()), cpu  # NaN where a worker's CPU seconds were lost
