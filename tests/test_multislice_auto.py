"""optim.regularize's auto values: tv_phase and lateral_blur_px (asked for; their defaults are 0)
and tv_phase_smoothing (auto by default), resolved from the slice count at its boundary (1 slice
off, 2 and more on), numbers kept as given, said on the terminal and in run.log, recorded in
results.h5, and reaching the run exactly as the numbers they stand for."""

import h5py
import numpy as np
import pytest
import yaml
from conftest import tiny_config

import ptyacc
from ptyacc.errors import ConfigError
from ptyacc.reconstruction.multislice_auto import MULTISLICE, auto_notes, auto_values, resolved

KEYS = ("tv_phase", "lateral_blur_px", "tv_phase_smoothing")


AUTO = tuple(f"optim.regularize.{key}=auto" for key in KEYS)


def regularize_values(config) -> dict:
    """``auto_values`` of ``optim.regularize`` (``optim.object_optimizer``'s is tests/test_descent.py's)."""
    return {key: value for key, value in auto_values(config).items() if key.startswith("optim.regularize.")}


def config(slices: int, *overrides: str):
    return ptyacc.load_config(None, [f"model.slices={slices}", *AUTO, *overrides])


def test_the_defaults_and_auto_off_on_one_slice_and_on_from_two():
    assert MULTISLICE == {"tv_phase": 1.0, "lateral_blur_px": 0.3, "tv_phase_smoothing": 0.001}
    default = ptyacc.load_config(None, ["model.slices=4"])
    assert [getattr(default.optim.regularize, key) for key in KEYS] == [0.0, 0.0, "auto"]
    assert [resolved(default, key) for key in KEYS] == [0.0, 0.0, 0.001]
    assert regularize_values(default) == {"optim.regularize.tv_phase_smoothing": 0.001}
    assert auto_notes(default) == ["optim.regularize: tv_phase_smoothing 0.001 (auto: 4 slices; give numbers, "
                                   "0 = off, to choose)"]
    assert [resolved(config(1), key) for key in KEYS] == [0.0, 0.0, 0.0] and auto_notes(config(1)) == []
    assert regularize_values(config(1)) == {f"optim.regularize.{key}": 0.0 for key in KEYS}
    for slices in (2, 11):
        assert [resolved(config(slices), key) for key in KEYS] == [1.0, 0.3, 0.001]
        assert regularize_values(config(slices)) == {"optim.regularize.tv_phase": 1.0,
                                               "optim.regularize.lateral_blur_px": 0.3,
                                               "optim.regularize.tv_phase_smoothing": 0.001}
        (note,) = auto_notes(config(slices))
        assert note.startswith("optim.regularize: tv_phase 1, lateral_blur_px 0.3, tv_phase_smoothing 0.001 "
                               f"(auto: {slices} slices")


@pytest.mark.parametrize("slices", [1, 4])
def test_a_number_given_is_kept_whatever_the_slice_count(slices):
    for value in (0.0, 3.0):
        given = config(slices, *(f"optim.regularize.{key}={value}" for key in KEYS))
        assert [resolved(given, key) for key in KEYS] == [value, value, value]
        assert regularize_values(given) == {} and auto_notes(given) == []
    one_auto = config(slices, "optim.regularize.tv_phase=0", "optim.regularize.tv_phase_smoothing=0")
    assert regularize_values(one_auto) == {"optim.regularize.lateral_blur_px": 0.3 if slices > 1 else 0.0}
    assert auto_notes(one_auto) == ([f"optim.regularize: lateral_blur_px 0.3 (auto: {slices} slices; give numbers, "
                                     "0 = off, to choose)"] if slices > 1 else [])


@pytest.mark.parametrize("key", KEYS)
def test_auto_keys_accept_auto_or_a_non_negative_number_only(key):
    for bad in ("-1", "often"):
        with pytest.raises(ConfigError, match=rf"optim.regularize.{key}"):
            ptyacc.load_config(None, [f"optim.regularize.{key}={bad}"])


def multislice(tmp_path, *overrides):
    base = tiny_config(tmp_path, model={"slices": 3, "slice_thickness_A": 2.0}, optim={"iterations": 2},
                       output={"dir": str(tmp_path / "out"), "figures": False})
    return ptyacc.load_config(base, list(overrides))


def test_auto_reaches_a_multislice_run_as_its_numbers_and_is_said_and_recorded(tmp_path, capsys):
    """auto equals its numbers given explicitly bit for bit: all three keys auto, and the default
    (tv_phase_smoothing auto alone); both differ from all three at 0; the terminal and run.log say
    what auto chose; results.h5 keeps the config as given (auto) and the resolved values (attribute
    auto_values)."""
    rec = ptyacc.reconstruct(multislice(tmp_path, *AUTO), overwrite=True)
    said = "ptyacc: optim.regularize: tv_phase 1, lateral_blur_px 0.3, tv_phase_smoothing 0.001 (auto: 3 slices"
    assert said in capsys.readouterr().err
    assert said.removeprefix("ptyacc: ") in (tmp_path / "out" / "run.log").read_text()
    with h5py.File(tmp_path / "out" / "results.h5") as f:
        assert yaml.safe_load(f.attrs["auto_values"]) == {"optim.regularize.tv_phase": 1.0,
                                                          "optim.regularize.lateral_blur_px": 0.3,
                                                          "optim.regularize.tv_phase_smoothing": 0.001,
                                                          "optim.object_optimizer": "adam",
                                                          "optim.probe_optimizer": "adam",
                                                          "optim.loss": "amplitude"}
        assert yaml.safe_load(f.attrs["config"])["optim"]["regularize"]["tv_phase"] == "auto"
    numbers = ("optim.regularize.tv_phase={}", "optim.regularize.lateral_blur_px={}",
               "optim.regularize.tv_phase_smoothing={}")
    explicit = ptyacc.reconstruct(multislice(tmp_path, *(k.format(v) for k, v in zip(numbers, (1, 0.3, 0.001)))),
                                  write=False)
    smoothing = ptyacc.reconstruct(multislice(tmp_path, *(k.format(v) for k, v in zip(numbers, (0, 0, 0.001)))),
                                   write=False)
    off = ptyacc.reconstruct(multislice(tmp_path, *(k.format(0) for k in numbers)), write=False)
    default = ptyacc.reconstruct(multislice(tmp_path), write=False)
    said = capsys.readouterr().err
    assert said.count("ptyacc: optim.regularize: tv_phase_smoothing 0.001 (auto: 3 slices") == 1  # the default run
    np.testing.assert_array_equal(rec.results.object, explicit.results.object)
    np.testing.assert_array_equal(default.results.object, smoothing.results.object)
    assert not np.array_equal(default.results.object, off.results.object)
    assert not np.array_equal(rec.results.object, default.results.object)
