"""The calibration step's own machinery (``ptyacc/data/autocalibration.py``): the file read once for the
autos (``ReadOnce``) gives what reading it each time gives, bit for bit, and the record of what the autos
found gives results.h5's /detector names and dtypes, the run's config its numbers in the autos' place and the
auto values that name them, which cannot disagree."""

import dataclasses
import itertools

import h5py
import numpy as np
import pytest
import torch

from ptyacc import load_config
from ptyacc.config import TransformConfig
from ptyacc.data import PtychoData
from ptyacc.data.autocalibration import (
    BY_SEARCH,
    BY_TRIALS,
    CALIBRATION_AUTOS,
    MEASURED_ONLY,
    AutoCalibration,
    MeasuredDefocus,
    MeasuredDescan,
    MeasuredOrientation,
    ReadOnce,
    ScansCalibration,
    asked_autos,
)
from ptyacc.data.descan import Descan
from ptyacc.data.detector import BadPixels
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
    # the coherence of the prepared patterns gave the defocus (the parallax could not) and the run's trials moved it:
    # both kept, beside the defocus used
    focused = dataclasses.replace(found, orientation=None, defocus=MeasuredDefocus(110.0, np.nan, searched_A=100.0,
                                                                                  tried=True)).detector_arrays()
    assert list(focused)[-3:] == ["parallax_defocus_A", "overlap_defocus_A", "trials_defocus_A"]
    assert float(focused["overlap_defocus_A"]) == 100.0 and float(focused["trials_defocus_A"]) == 110.0
    assert focused["parallax_defocus_A"][0] == 110.0 and np.isnan(focused["parallax_defocus_A"][1])
    kept = dataclasses.replace(found, orientation=None, defocus=MeasuredDefocus(100.0, np.nan, searched_A=100.0))
    assert "trials_defocus_A" not in kept.detector_arrays()


def _record(asked: frozenset[str]) -> AutoCalibration:
    """A record of every calibration auto found: a turned scan, a transpose with a flip about the zero frequency,
    a defocus with the C12 the parallax set (C12b as nominal), 3 bad pixels, a descan the model takes."""
    descan = Descan(plane=np.zeros((2, 3)), origin_A=np.zeros(2), centre_px=2.0, residual_px=0.1, patterns=5,
                    fill=np.ones((4, 4)) / 16, noise_px=0.05)
    bad = BadPixels((4, 4), np.array([[0, 0], [1, 1]]), np.array([[2, 2], [3, 3]]))
    return AutoCalibration(flags=(True, False, True), scan_rotation_deg=-12.5,
                           aberrations={"C10": np.float64(-118.0), "C12a": np.float64(7.0), "C12b": 2.0, "C30": 1e4},
                           nominal_aberrations={"C10": -96.0, "C12b": 2.0, "C30": 1e4},
                           bad_pixels=bad if "data.bad_pixels" in asked else None,
                           orientation=MeasuredOrientation((True, False, True), -12.5, 0.4), flip_about_zero=(False, True),
                           descan=MeasuredDescan(descan, np.array([[0.5, -0.75], [0.0, 0.25]]), in_model=True)
                           if "data.transform.descan" in asked else None,
                           defocus=MeasuredDefocus(118.0, 1.5), asked=asked, descan_model="ramp",
                           sample_place=("upstream", -2.5e-3) if "experiment.sample_side" in asked else None,
                           near_field_focus_m=3.7e-3 if "experiment.focus_to_sample_m" in asked else None)


def _config(asked: frozenset[str]):
    given = {"experiment.scan_rotation_deg": ("experiment", "scan_rotation_deg", 3.0),
             "experiment.defocus_A": ("experiment", "defocus_A", None),
             "data.transform.orientation": ("transform", "orientation", "manual"),
             "data.bad_pixels": ("data", "bad_pixels", "off"), "data.transform.descan": ("transform", "descan", "off"),
             "data.transform.descan_model": ("transform", "descan_model", "shift"),
             "experiment.sample_side": ("experiment", "sample_side", "downstream"),
             "experiment.focus_to_sample_m": ("experiment", "focus_to_sample_m", None)}
    data, transform = {"path": "x.h5", "transform": {}}, {}
    experiment = {"aberrations": {"C10": -96.0, "C30": 1e4}}
    for key, (section, name, otherwise) in given.items():
        {"experiment": experiment, "data": data, "transform": transform}[section][name] = \
            "auto" if key in asked else otherwise
    if "experiment.defocus_A" in asked:
        experiment["aberrations"] = {"C30": 1e4}  # the nominal defocus from the file
    if "experiment.focus_to_sample_m" in asked:  # the near field's
        experiment.update(radiation="xray", geometry="near_field")
    data["transform"] = transform
    return load_config({"data": data, "experiment": experiment})


def _at(config, key: str):
    """The config's value at a dotted key (``experiment.aberrations.C12a`` reads the aberrations' C12a)."""
    section, *names = key.split(".")
    value = getattr(config, section)
    for name in names:
        value = value[name] if isinstance(value, dict) else getattr(value, name)
    return value


ONE_OR_OTHER = ({"experiment.focus_to_sample_m", "experiment.defocus_A"},  # near field, electrons
                {"experiment.focus_to_sample_m", "experiment.sample_side"})  # near field, far field


@pytest.mark.parametrize("asked", [frozenset(c) for n in range(len(CALIBRATION_AUTOS) + 1)
                                   for c in itertools.combinations(CALIBRATION_AUTOS, n)
                                   if not any(pair <= set(c) for pair in ONE_OR_OTHER)],
                         ids=lambda asked: "+".join(sorted(asked)) or "none")  # the same in every process (pytest -n)
def test_the_config_takes_the_values_the_record_names_and_no_others(asked):
    """Every combination of calibration autos asked: the run's config (``in_config``) holds at each key that
    ``auto_values`` names the value it names (the two measured only keep their auto), the nominal C10 gone where
    the defocus was found, and every key it does not name as given: the config and the record cannot disagree."""
    config = _config(asked)
    assert asked_autos(config) == asked
    found = _record(asked)
    values, run = found.auto_values(), found.in_config(config)
    for key, value in values.items():
        assert _at(run, key) == ("auto" if key in MEASURED_ONLY else value), key
    named = {key.rsplit(".", 1)[0] if key.startswith("experiment.aberrations.") else key for key in values}
    named |= {"data.transform.orientation"} if "data.transform.transpose" in values else set()  # manual with them
    untouched = {"experiment.scan_rotation_deg", "experiment.defocus_A", "data.transform.orientation",
                 "data.transform.transpose", "data.transform.flip_y", "data.transform.flip_x",
                 "data.transform.flip_about_zero", "data.transform.descan_model", "experiment.aberrations",
                 "experiment.sample_side", "experiment.focus_to_sample_m"} - named
    assert {key: _at(run, key) for key in untouched} == {key: _at(config, key) for key in untouched}
    if "experiment.defocus_A" in asked:
        assert values["experiment.defocus_A"] == 118.0 and values["experiment.aberrations.C12a"] == 7.0
        assert "experiment.aberrations.C12b" not in values  # as nominal
        assert run.experiment.aberrations == {"C30": 1e4, "C12a": 7.0}
        assert type(run.experiment.aberrations["C12a"]) is type(run.experiment.defocus_A) is float  # YAML writes them
    if "data.transform.orientation" in asked:
        assert run.data.transform.orientation == "manual" and values["data.transform.flip_about_zero"] == [False, True]
    if {"data.transform.descan", "data.transform.descan_model"} <= asked:
        assert values["data.transform.descan_model"] == run.data.transform.descan_model == "ramp"
    if "experiment.sample_side" in asked:
        assert values["experiment.sample_side"] == run.experiment.sample_side == "upstream"
        assert values["experiment.focus_to_sample_m"] == run.experiment.focus_to_sample_m == -2.5e-3
    if "experiment.focus_to_sample_m" in asked:
        assert values["experiment.focus_to_sample_m"] == run.experiment.focus_to_sample_m == 3.7e-3
    if not asked - set(MEASURED_ONLY):
        assert run is config


def test_the_dataset_reads_its_autos_and_detector_arrays_from_the_record():
    """``PtychoData.autos`` and ``detector`` are read-only views of ``autocalibration``, not fields of their own:
    no load can set one apart from the record, and a dataset given another record reads the other."""
    every = frozenset(CALIBRATION_AUTOS)
    found = _record(every)
    data = PtychoData(patterns=torch.zeros(2, 4, 4), positions_A=np.zeros((2, 2)), dx_A=0.5, wavelength_A=0.02,
                      semiangle_mrad=20.0, aberrations={}, autocalibration=found)
    assert not {"autos", "detector"} & {f.name for f in dataclasses.fields(PtychoData)}
    assert dict(data.autos) == found.auto_values() and set(data.detector) == set(found.detector_arrays())
    with pytest.raises(TypeError):
        data.autos["experiment.defocus_A"] = 100.0
    fewer = dataclasses.replace(data, autocalibration=_record(frozenset({"experiment.scan_rotation_deg"})))
    assert dict(fewer.autos) == {"experiment.scan_rotation_deg": -12.5} and "bad_pixels" not in fewer.detector
    none = dataclasses.replace(data, autocalibration=None)
    assert dict(none.autos) == {} and dict(none.detector) == {}


def test_several_scans_name_each_scans_autos_and_keep_scan_0s_arrays():
    first, second = _record(frozenset({"experiment.scan_rotation_deg"})), _record(frozenset({"data.bad_pixels"}))
    scans = ScansCalibration((first, None, second))
    assert scans.auto_values() == {"scans[0].experiment.scan_rotation_deg": -12.5, "scans[2].data.bad_pixels": 4}
    assert set(scans.detector_arrays()) == set(first.detector_arrays()) and scans.descan is None
    config = _config(frozenset({"experiment.scan_rotation_deg"}))
    assert scans.in_config(config) is config  # each scan's config took its own
