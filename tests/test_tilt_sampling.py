"""``data.transform.upsample: auto``: the object's pixel where a tilt acts in a multislice model
(``ptyacc.config.resolved_upsample``), how the load takes it, and what a run records of it. The whole runs on
abTEM's tilted SrTiO3 (tests/data/abtem/) are in ``test_tilt_sampling_runs.py``."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from abtem_cases import case_config

import ptyacc
from ptyacc.config import resolved_upsample
from ptyacc.data import load_data
from ptyacc.errors import ConfigError
from ptyacc.optim.autos import auto_values, resolved_final_fraction
from ptyacc.reconstruction.engine import Reconstructor

TILT_MRAD = [2.0, -1.5]


def upsample_of(slices: int = 10, tilt=(0.0, 0.0), start_tilt: int | None = None, tilt_model: str = "global",
                **transform) -> tuple[int, str]:
    config = {"data": {"path": "x.h5", "transform": transform}, "experiment": {"tilt_mrad": list(tilt)},
              "model": {"slices": slices, "slice_thickness_A": 3.9, "tilt": tilt_model},
              "optim": {"start": {"tilt": start_tilt}}}
    if slices == 1:
        config["model"].pop("tilt")
    return resolved_upsample(ptyacc.load_config(config))


@pytest.mark.parametrize("settings, expected", [
    ({"tilt": TILT_MRAD}, 2),                          # a tilt given
    ({"tilt": (0.0, 0.1)}, 2),                         # however small: it is what the user says the beam does
    ({"start_tilt": 3}, 2),                            # refined from zero
    ({"tilt_model": "per_position"}, 2),               # a tilt per position (refined or not)
    ({}, 1),                                           # no tilt: the detector's grid, as before the auto
    ({"slices": 1}, 1),                                # one slice: a tilt has no effect
    ({"tilt": TILT_MRAD, "pad": 96}, 1),               # the pad the user gave decides the pixel
    ({"tilt": TILT_MRAD, "upsample": 3}, 3),           # a number is a number
    ({"tilt": TILT_MRAD, "upsample": 1}, 1),
])
def test_the_rule(settings, expected):
    upsample, why = upsample_of(**settings)
    assert upsample == expected
    assert ("upsample" in settings) == (why == "")


def test_the_rule_says_why():
    assert upsample_of(tilt=TILT_MRAD)[1] == ("a tilt ([2.0, -1.5] mrad) on 10 slices: waves scattered beyond the "
                                              "detector need room in the window")
    assert upsample_of(start_tilt=1)[1].startswith("a tilt (refined) on 10 slices")
    assert upsample_of(tilt=TILT_MRAD, pad=96)[1] == "a tilt, but pad given"
    assert upsample_of()[1] == "no tilt in a multislice model"


def test_near_field_and_simulated_datasets_keep_their_pixel():
    near = ptyacc.load_config({"data": {"path": "x.h5"}, "model": {"slices": 3, "slice_thickness_A": 1e4},
                               "experiment": {"radiation": "xray", "geometry": "near_field", "tilt_mrad": TILT_MRAD,
                                              "energy_eV": 8000, "detector_distance_m": 1.0,
                                              "focus_to_sample_m": 0.01, "detector_pixel_m": 1e-6}})
    assert resolved_upsample(near) == (1, "a tilt, but near field")
    simulated = ptyacc.load_config({"model": {"slices": 3, "slice_thickness_A": 4.0},
                                    "experiment": {"tilt_mrad": TILT_MRAD}})
    assert resolved_upsample(simulated) == (1, "a tilt, but a data.simulate dataset")


@pytest.mark.parametrize("value", [0, -2, "twice"])
def test_other_values_are_refused(value):
    with pytest.raises(ConfigError, match="data.transform.upsample"):
        ptyacc.load_config({"data": {"path": "x.h5", "transform": {"upsample": value}}})


@pytest.mark.parametrize("tilt, upsample", [(TILT_MRAD, 2), ([0.0, 0.0], 1)])
def test_the_load_takes_what_auto_resolved(tilt, upsample):
    """auto loads exactly what the number it resolved to loads: the same patterns, mask and pixel."""
    auto = load_data(ptyacc.load_config(case_config("conventions", experiment={"positions": {"key": "positions_A"},
                                                                               "tilt_mrad": tilt})))
    number = load_data(ptyacc.load_config(case_config(
        "conventions", data={"transform": {"upsample": upsample}},
        experiment={"positions": {"key": "positions_A"}, "tilt_mrad": tilt})))
    assert auto.detector_px == 64 * upsample
    np.testing.assert_array_equal(auto.patterns.numpy(), number.patterns.numpy())
    assert (auto.mask is None) == (number.mask is None)
    if auto.mask is not None:
        np.testing.assert_array_equal(auto.mask.numpy(), number.mask.numpy())
    assert auto.dx_A == number.dx_A


@pytest.mark.parametrize("tilt, upsample", [(TILT_MRAD, 2), ([0.0, 0.0], 1)])
def test_a_run_names_what_auto_chose(tilt, upsample, tmp_path):
    """results.h5's auto_values and run.log's "auto:" line name the upsample; the terminal's line is said
    where it is not 1."""
    config = ptyacc.load_config(case_config("conventions", experiment={"positions": {"key": "positions_A"},
                                                                       "tilt_mrad": tilt},
                                            output={"dir": str(tmp_path), "figures": False}))
    run = Reconstructor(config, write=True)
    run.build()
    run.closing.close()
    assert yaml.safe_load(run.texts["auto_values"])["data.transform.upsample"] == upsample
    log = (tmp_path / "run.log").read_text()
    auto_line = next(line for line in log.splitlines() if " auto: data.hold" in line)
    assert f"data.transform.upsample {upsample}" in auto_line
    said = [line for line in log.splitlines() if "data.transform.upsample: 2 (auto: a tilt" in line]
    assert len(said) == (upsample == 2)
    assert run.data.detector_px == 64 * upsample


@pytest.mark.parametrize("start_tilt, blur", [(1, 4.0), (None, 1.0)])
def test_a_refined_tilt_holds_the_slices_more_alike(start_tilt, blur):
    """On a strongly scattering crystal depth_blur_slices' auto is 4 where the tilt is refined (free slices shear
    to absorb a tilt), else 1; the tilt given in both."""
    config = ptyacc.load_config(case_config("conventions", experiment={"positions": {"key": "positions_A"},
                                                                       "tilt_mrad": TILT_MRAD},
                                            optim={"start": {"tilt": start_tilt}}))
    run = Reconstructor(config, write=False)
    run.build()
    values = yaml.safe_load(run.texts["auto_values"])
    assert values["optim.regularize.depth_blur_slices"] == blur
    assert run.config.optim.regularize.depth_blur_slices == blur


def final_fraction_of(start_tilt: int | None = None, given: float | None = None) -> float:
    config = {"data": {"path": "x.h5"}, "model": {"slices": 10, "slice_thickness_A": 3.9},
              "optim": {"start": {"tilt": start_tilt}}}
    if given is not None:
        config["optim"]["lr_final_fraction"] = given
    return resolved_final_fraction(ptyacc.load_config(config))


@pytest.mark.parametrize("settings, expected", [
    ({"start_tilt": 3}, 1.0),                  # the tilt refined: rates that keep their size
    ({}, 0.1),                                 # no tilt refined: the cosine to 0.1, as before the auto
    ({"start_tilt": 3, "given": 0.3}, 0.3),    # a number is a number
    ({"given": 1.0}, 1.0),
])
def test_the_rates_rule_where_the_tilt_is_refined(settings, expected):
    assert final_fraction_of(**settings) == expected


@pytest.mark.parametrize("start_tilt, expected", [(1, 1.0), (None, 0.1)])
def test_a_run_takes_the_rates_auto_chose(start_tilt, expected):
    """Every group's schedule ends at the fraction auto chose, and results.h5's ``auto_values`` names it."""
    config = ptyacc.load_config(case_config("conventions", experiment={"positions": {"key": "positions_A"}},
                                            optim={"iterations": 3, "start": {"tilt": start_tilt}}))
    run = Reconstructor(config, write=False)
    run.build()
    assert {group.schedule.final_fraction for group in run.groups} == {expected}
    assert auto_values(config)["optim.lr_final_fraction"] == expected
