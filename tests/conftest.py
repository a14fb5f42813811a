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


@pytest.fixture(scope="session")
def grid_simulator():
    """examples/grid/simulate.py, the benchmark grid's NumPy simulator (independent of ptyacc), as a module."""
    spec = importlib.util.spec_from_file_location("grid_simulate", ROOT / "examples" / "grid" / "simulate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def tiny_config(tmp_path, **sections) -> dict:
    """A config dict for a quick simulated run (16 x 16 px patterns, 6 x 6 scan)."""
    base = {
        "data": {"simulate": {"scan_shape": [6, 6], "detector_px": 16, "atoms": 6}},
        "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 20.0, "scan_step_A": 0.6,
                       "dx_A": 0.3},
        "optim": {"iterations": 2, "batch_size": 8},
        "output": {"dir": str(tmp_path / "out")},
        "runtime": {"progress": False, "seed": 3},
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
