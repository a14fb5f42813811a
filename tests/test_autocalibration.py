"""The calibration step's own machinery (``ptyacc/data/autocalibration.py``): the file read once for the
autos (``ReadOnce``) gives what reading it each time gives, bit for bit, and the record of what the autos
found gives results.h5's /detector names and dtypes."""

import dataclasses

import h5py
import numpy as np

from ptyacc.config import TransformConfig
from ptyacc.data.autocalibration import BY_SEARCH, BY_TRIALS, AutoCalibration, MeasuredDescan, MeasuredOrientation, ReadOnce
from ptyacc.data.descan import Descan
from ptyacc.data.orientation import middle_block
from ptyacc.data.prepare import Preparation, pattern_preparation
from ptyacc.data.readers import open_patterns


def test_read_once_gives_each_read_bit_for_bit_and_reads_each_pattern_once(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    stored = rng.poisson(40.0, size=(100, 10, 12)).astype(np.uint16)
    with h5py.File(tmp_path / "scan.h5", "w") as f:
        f["patterns"] = stored
        f["background"] = rng.uniform(0, 3, (10, 12)).astype(np.float32)
    background = np.asarray(h5py.File(tmp_path / "scan.h5")["background"][()])
    prep = Preparation.from_config(TransformConfig(crop=8, bin=2, flip_y=True, upsample=1), (10, 12), True, "scan.h5")
    prepare = pattern_preparation(prep, "scan.h5", background=background)
    rows, _ = middle_block((10, 10))
    asks = [(rows, None), (rows[:7], lambda chunk: chunk - background), (rows, prepare), (rows[3::5], prepare),
            (np.array([0, 50, 99]), prepare), (np.array([0, 99]), None)]
    with open_patterns(tmp_path / "scan.h5", "patterns") as source:
        direct = [source.read(r, p).patterns for r, p in asks]
        read_rows = []
        original = type(source).read

        def counted(self, rows=None, prepare=None):
            read_rows.extend([] if rows is None else list(rows))
            return original(self, rows, prepare)

        monkeypatch.setattr(type(source), "read", counted)
        once = ReadOnce(source)
        again = [once.read(r, p).patterns for r, p in asks]
    for a, b in zip(direct, again, strict=True):
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape and np.array_equal(a, b)
    assert sorted(read_rows) == sorted(set(rows.tolist()) | {0, 50, 99})  # each pattern read once


def test_the_record_gives_the_detector_arrays_in_their_dtypes():
    descan = Descan(plane=np.zeros((2, 3)), origin_A=np.zeros(2), centre_px=2.0, residual_px=0.1, patterns=5,
                    fill=np.ones((4, 4)) / 16, noise_px=0.05)
    found = AutoCalibration(flags=(True, False, False), scan_rotation_deg=9.5, aberrations={"C10": -100.0},
                            nominal_aberrations={"C10": -96.0},
                            orientation=MeasuredOrientation((True, False, False), 9.5, -0.3, 101.0, BY_SEARCH),
                            flip_about_zero=(True, False),
                            descan=MeasuredDescan(descan, np.full((5, 2), 0.5), in_model=True))
    arrays = found.detector_arrays()
    assert list(arrays) == ["scan_rotation_deg", "orientation_flags", "orientation_skew", "overlap_defocus_A",
                            "flip_about_zero", "descan_px", "descan_plane", "descan_per_position", "descan_rms_px",
                            "descan_in_model"]
    assert arrays["orientation_flags"].dtype == bool and arrays["flip_about_zero"].dtype == bool
    assert arrays["scan_rotation_deg"].dtype == np.float64 and float(arrays["scan_rotation_deg"]) == 9.5
    assert arrays["descan_in_model"].dtype == bool and bool(arrays["descan_in_model"])
    assert float(arrays["overlap_defocus_A"]) == 101.0
    # a defocus the trials chose is kept as theirs, not as the search's
    tried = dataclasses.replace(found, orientation=MeasuredOrientation((True, False, False), 9.5, -0.3, 104.0,
                                                                       BY_TRIALS, by_trials=True)).detector_arrays()
    assert "overlap_defocus_A" not in tried and float(tried["trials_defocus_A"]) == 104.0
