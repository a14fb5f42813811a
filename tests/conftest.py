"""Shared fixtures: small configs and data files made on the fly."""

import importlib.util
import os
import sys
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


def pytest_collection_modifyitems(config, items):
    if test_device() == "cpu":
        return
    for item in items:
        reason = next((why for prefix, why in CPU_ONLY.items() if item.nodeid.startswith(prefix)), None)
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"CPU only: {reason}"))


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
