"""Loading keeps host memory near the size of the float32 patterns: read in chunks straight into
one float32 array, never a float64 copy or a second full-size copy (measured with tracemalloc,
which sees NumPy's buffers)."""

import tracemalloc

import h5py
import numpy as np
import pytest
import torch

from ptyacc.config import load_config
from ptyacc.data import load_data
from ptyacc.data.formats import chunks

LIMIT = 1.3  # peak traced memory of load_data / float32 size of the patterns


@pytest.mark.parametrize("dtype, transform", [("uint16", {}), ("float32", {}), ("uint16", {"flip_y": True,
                                                                                          "pad": 72})])
def test_peak_memory_of_loading(tmp_path, monkeypatch, dtype, transform):
    path = tmp_path / "big.h5"
    patterns = np.random.default_rng(0).poisson(3.0, size=(8, 40, 64, 64)).astype(dtype)
    with h5py.File(path, "w") as f:
        f.create_dataset("patterns", data=patterns, chunks=(1, 8, 64, 64))
        f.attrs.update(energy_eV=80e3, semiangle_mrad=20.0, dk_invA=0.05, scan_step_A=0.5)
    del patterns
    monkeypatch.setattr(chunks, "MIN_CHUNK_BYTES", 1)  # this small file is read in 32 chunks
    # random counts, no bright-field disk: the calibration check (a separate test) has nothing to compare
    config = load_config({"data": {"path": str(path), "transform": transform},
                          "experiment": {"check_calibration": False}})
    tracemalloc.start()
    try:
        data = load_data(config)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    float32_bytes = data.patterns.numel() * 4
    assert data.patterns.dtype == torch.float32
    print(f"peak {peak / float32_bytes:.3f} x the float32 patterns")
    assert peak <= LIMIT * float32_bytes, f"peak {peak / float32_bytes:.2f} x the float32 patterns"


def test_the_measurement_sees_a_float64_copy(tmp_path):
    """The check above can fail: a float64 copy of the same patterns exceeds the limit."""
    patterns = np.ones((320, 64, 64), np.float32)
    tracemalloc.start()
    try:
        copy = patterns.astype(np.float64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert copy.nbytes == 2 * patterns.nbytes and peak > LIMIT * patterns.nbytes
