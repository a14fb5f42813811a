"""Shared fixtures: small configs and data files made on the fly; the two test lanes (the ``slow`` and
``processes`` marks, the per-test timeouts, each run's durations)."""

import importlib.util
import inspect
import multiprocessing.util
import os
import resource
import subprocess
import sys
import time
import types
from pathlib import Path

import h5py
import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]

# The suite on a chosen device: `PTYACC_TEST_DEVICE=cuda python -m pytest` (or `--device cuda`) runs
# every test that takes a device (tiny_config's runs; runtime.device: auto) there, and the launched
# workers, which inherit the variable, too. Unset (or cpu), the GPUs are hidden: the suite is the
# CPU's wherever it runs, and no test moves to a GPU through `auto` unasked.
TEST_DEVICE_VARIABLE = "PTYACC_TEST_DEVICE"
# what cannot run on a GPU, and why (nodeid prefix -> reason)
CPU_ONLY = {
    "tests/test_hold.py::test_auto_chooses_by_the_free_memory_and_says_why":
        "its expected lines name the cpu device and the free memory it is given",
}


def pytest_addoption(parser):
    parser.addoption("--device", default=None, help="run the tests that take a device on this one (cpu, cuda, mps; "
                     f"default ${TEST_DEVICE_VARIABLE}, else cpu)")


def pytest_configure(config):
    # matplotlib builds its font list on its first import on a machine (fc-list, two processes): before the counting,
    # so that the first test to draw a figure on a fresh machine is not failed for processes it did not start
    import matplotlib.font_manager  # noqa: F401

    LAUNCHES.install()
    device = config.getoption("--device") or os.environ.get(TEST_DEVICE_VARIABLE) or "cpu"
    os.environ[TEST_DEVICE_VARIABLE] = device  # the launched workers read it too
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch looks for GPUs (test modules are imported after this)
        return
    # CUDA's index_add_ (the object gradient) and cuBLAS sum in any order unless asked: the tests that compare two
    # runs bit for bit then hold on the GPU too (ptyacc's own runs on a GPU agree within docs/how-to/multi-gpu.md's tolerance)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks
def pytest_collection_modifyitems(config, items):
    mark_lanes(config, items)
    if test_device() == "cpu":
        return
    for item in items:
        reason = next((why for prefix, why in CPU_ONLY.items() if item.nodeid.startswith(prefix)), None)
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"CPU only: {reason}"))


# --- the two lanes (docs/how-to/run-the-tests.md): `python -m pytest -m "not slow"` for everyday work,
# `python -m pytest` (what CI runs) for all. A test that starts processes is marked `processes` when its code, a
# function or class of the tests that it calls, or a fixture it takes names subprocess or multiprocessing; one
# that launches inside ptyacc or a library (selftest, the scaling measurements, pdoc, mlflow) carries the mark by
# hand. Every `processes` test is `slow`, and one that starts a process unmarked fails at its teardown, so none
# slips into the fast lane.
LAUNCH_MODULES = ("subprocess", "multiprocessing", "torch.multiprocessing")
SLOW_TIMEOUT_S = 900  # a slow test's limit, a few times the longest one's on a busy machine; the rest: pyproject's `timeout`
NOTICE_S = 10.0  # a test outside the slow lane that took longer is named at the end of the run
TESTS = Path(__file__).resolve().parent


def _code_objects(code: types.CodeType):
    yield code
    for constant in code.co_consts:  # nested functions, lambdas, comprehensions
        if isinstance(constant, types.CodeType):
            yield from _code_objects(constant)


def _is_launcher(value) -> bool:
    if isinstance(value, types.ModuleType):
        return value.__name__ in LAUNCH_MODULES
    return callable(value) and getattr(value, "__module__", None) in LAUNCH_MODULES


def reaches_a_launch(function, roots: tuple[Path, ...] = (TESTS,), seen: set | None = None) -> bool:
    """Whether ``function``, defined in a file under ``roots`` (the tests), names a launcher (subprocess,
    multiprocessing), by itself or through the functions and classes under ``roots`` that it names: read
    from the names in its code, looked up in its module. ptyacc's and the libraries' code is not followed."""
    seen = set() if seen is None else seen
    function = inspect.unwrap(function)
    code = getattr(function, "__code__", None)
    if code is None or code in seen or not any(root in Path(code.co_filename).parents for root in roots):
        return False
    seen.add(code)
    for name in {name for nested in _code_objects(code) for name in nested.co_names}:
        value = function.__globals__.get(name)
        if _is_launcher(value):
            return True
        members = vars(value).values() if inspect.isclass(value) else (value,)
        if any(callable(member) and reaches_a_launch(member, roots, seen) for member in members):
            return True
    return False


def launches_processes(item: pytest.Item) -> bool:
    """Whether a collected test starts processes as far as its code and its fixtures' code show."""
    if not isinstance(item, pytest.Function):
        return False
    fixtures = [definitions[-1].func for definitions in item._fixtureinfo.name2fixturedefs.values()]
    roots, seen = (TESTS, item.path.parent), set()
    return any(reaches_a_launch(function, roots, seen) for function in [item.function, *fixtures])


def mark_lanes(config, items) -> None:
    """`processes` on the tests that launch, `slow` on every `processes` test, and SLOW_TIMEOUT_S on
    every slow test that sets no timeout of its own (unless --timeout is given)."""
    timeouts = config.pluginmanager.hasplugin("timeout") and config.getoption("timeout", None) is None
    for item in items:
        if item.get_closest_marker("processes") is None and launches_processes(item):
            item.add_marker(pytest.mark.processes)
        if item.get_closest_marker("processes") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if timeouts and item.get_closest_marker("slow") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


class Launches:
    """The processes this interpreter starts, as their commands: subprocess.Popen, multiprocessing's
    spawn and forkserver (spawnv_passfds) and os.fork, each wrapped once for the session."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.installed = False

    def install(self) -> None:
        if self.installed:  # a second session in this interpreter (pytester) counts with the first's wrappers
            return
        self.installed = True
        execute_child, spawn, fork = subprocess.Popen._execute_child, multiprocessing.util.spawnv_passfds, os.fork

        def counted_execute_child(popen, args, *rest, **keywords):
            self.commands.append(args if isinstance(args, (str, bytes)) else " ".join(map(str, args)))
            return execute_child(popen, args, *rest, **keywords)

        def counted_spawn(path, args, passfds):
            self.commands.append(" ".join(map(str, args)))
            return spawn(path, args, passfds)

        def counted_fork():
            self.commands.append("os.fork()")
            return fork()

        subprocess.Popen._execute_child = counted_execute_child
        multiprocessing.util.spawnv_passfds = counted_spawn
        os.fork = counted_fork


LAUNCHES = Launches()
LAUNCHES_BEFORE = pytest.StashKey[int]()


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have been waited for (launched workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[LAUNCHES_BEFORE] = len(LAUNCHES.commands)
    item.stash[CPU_BEFORE] = cpu_seconds()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """The test's lane and CPU seconds ride on its reports (``user_properties``), so that the run that writes the
    durations has them where the tests ran elsewhere (``pytest -n``: pytest-xdist's workers)."""
    report = yield
    if call.when == "setup":
        report.user_properties.append(("lane", "slow" if item.get_closest_marker("slow") is not None else "fast"))
    elif call.when == "teardown":
        report.user_properties.append(("cpu_seconds", cpu_seconds() - item.stash.get(CPU_BEFORE, cpu_seconds())))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    started = LAUNCHES.commands[item.stash.get(LAUNCHES_BEFORE, len(LAUNCHES.commands)):]
    if started and item.get_closest_marker("processes") is None:
        pytest.fail(f"{item.nodeid} started {len(started)} process(es) ({started[0][:160]}) but is not marked: "
                    "give it @pytest.mark.processes (it then runs in the slow lane; docs/how-to/run-the-tests.md)",
                    pytrace=False)
    return result


def pytest_runtest_logreport(report):
    """Each test's seconds, setup and call and teardown together, its outcome, lane and CPU seconds."""
    durations = RECORD.setdefault("tests", {})
    seconds, outcome = durations.get(report.nodeid, (0.0, "passed"))
    failed = report.outcome != "passed" and outcome == "passed"
    durations[report.nodeid] = (seconds + report.duration, report.outcome if failed else outcome)
    said = dict(report.user_properties)
    if said.get("lane") == "slow":
        RECORD.setdefault("slow", set()).add(report.nodeid)
    if "cpu_seconds" in said:
        RECORD.setdefault("cpu", {})[report.nodeid] = said["cpu_seconds"]


RECORD: dict = {}  # this run's durations (nodeid -> (seconds, outcome)), the slow tests and their CPU seconds
CPU_BEFORE = pytest.StashKey[float]()


def pytest_sessionstart(session):
    RECORD["started"] = time.time()


def pytest_sessionfinish(session):
    """Writes this run's durations, longest first, to .pytest_cache/d/ptyacc/durations.tsv: wall seconds and
    CPU seconds (which a busy machine stretches much less: each test runs on one thread). Under ``pytest -n``
    the controller writes it, from every worker's reports; the workers do not."""
    cache = getattr(session.config, "cache", None)
    if cache is None or not RECORD.get("tests") or hasattr(session.config, "workerinput"):
        return
    slow = RECORD.get("slow", set())
    rows = sorted(RECORD["tests"].items(), key=lambda row: -row[1][0])
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    head = (f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {len(rows)} tests in "
            f"{time.time() - RECORD.get('started', time.time()):.0f} s, load {load}: {' '.join(sys.argv[1:])}\n"
            "seconds\tcpu_seconds\tlane\toutcome\ttest\n")
    cpu = RECORD.get("cpu", {})
    lines = [f"{seconds:.2f}\t{cpu.get(nodeid, float('nan')):.2f}\t{'slow' if nodeid in slow else 'fast'}\t{outcome}\t"
             f"{nodeid}\n" for nodeid, (seconds, outcome) in rows]
    (cache.mkdir("ptyacc") / "durations.tsv").write_text(head + "".join(lines))


def pytest_terminal_summary(terminalreporter):
    """Names the tests outside the slow lane that took over NOTICE_S: candidates for @pytest.mark.slow."""
    slow = RECORD.get("slow", set())
    long = [(seconds, nodeid) for nodeid, (seconds, _) in RECORD.get("tests", {}).items()
            if nodeid not in slow and seconds > NOTICE_S]
    if long:
        terminalreporter.section(f"fast-lane tests over {NOTICE_S:.0f} s (mark them slow if they are, "
                                 "docs/how-to/run-the-tests.md)")
        for seconds, nodeid in sorted(long, reverse=True):
            terminalreporter.write_line(f"{seconds:7.1f} s  {nodeid}")


def test_device() -> str:
    """The device the tests that take one run on: cpu unless PTYACC_TEST_DEVICE (or --device) says."""
    return os.environ.get(TEST_DEVICE_VARIABLE) or "cpu"


test_device.__test__ = False  # a helper, not a test


def device_runtime() -> dict:
    """runtime keys for a run on the chosen device: nothing on the CPU; on a GPU the device, and gloo
    (NCCL refuses two processes on one GPU: a launched test shares it)."""
    device = test_device()
    return {} if device == "cpu" else {"device": device, "backend": "gloo"}


def launch_environment() -> dict:
    """The environment of a launched multi-process test: CPU processes (ACCELERATE_USE_CPU) unless a
    GPU is the chosen device."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    if test_device() == "cpu":
        env["ACCELERATE_USE_CPU"] = "1"
    return env


@pytest.fixture(scope="session")
def grid_simulator():
    """benchmarks/grid/simulate.py, the benchmark grid's NumPy simulator (independent of ptyacc), as a module."""
    spec = importlib.util.spec_from_file_location("grid_simulate", ROOT / "benchmarks" / "grid" / "simulate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def descan_case(simulator, tmp_path) -> tuple:
    """A 16 x 16 case of the independent simulator (``grid_simulator``) whose disk wanders by a plane
    (descan up to about 0.7 px), written to tmp_path/descan.h5: (its path, the true phase, its pixel in Å,
    the true positions (N, 2) Å)."""
    setting = simulator.Setting(detector_px=48, scan_shape=(16, 16), scan_step_A=0.4, dose=3e4, defocus_A=80.0,
                                edge_mrad=50.0, seed=5, descan_offset_px=(0.3, -0.2),
                                descan_px_per_A=((0.08, 0.04), (-0.04, 0.1)))
    path = tmp_path / "descan.h5"
    simulator.write(str(path), setting)
    with h5py.File(path) as f:
        return path, f["ground_truth/phase"][()].astype(float), float(f.attrs["dx_A"]), f["positions_A"][()]


def tiny_config(tmp_path, **sections) -> dict:
    """A config dict for a quick simulated run (16 x 16 px patterns, 6 x 6 scan)."""
    base = {
        "data": {"simulate": {"scan_shape": [6, 6], "detector_px": 16, "atoms": 6}},
        "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 20.0, "scan_step_A": 0.6,
                       "dx_A": 0.3},
        "optim": {"iterations": 2, "batch_size": 8},
        "output": {"dir": str(tmp_path / "out")},
        "runtime": {"progress": False, "seed": 3, **device_runtime()},
    }
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    return base


@pytest.fixture
def pattern_file(tmp_path):
    """An HDF5 file in ptyacc's layout: 4D patterns (3, 4, 8, 8), positions, attributes."""
    path = tmp_path / "patterns.h5"
    rng = np.random.default_rng(0)
    patterns = rng.poisson(5.0, size=(3, 4, 8, 8)).astype(np.float32)
    positions = np.stack(np.meshgrid(np.arange(3) * 0.5, np.arange(4) * 0.5, indexing="ij"), -1).reshape(-1, 2)
    with h5py.File(path, "w") as f:
        f["patterns"] = patterns
        f["positions_A"] = positions
        f.attrs.update(energy_eV=80e3, semiangle_mrad=20.0, defocus_A=10.0, dk_invA=0.25, scan_step_A=0.5)
    return path, patterns, positions
