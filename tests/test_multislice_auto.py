"""optim.regularize's auto values: tv_phase and lateral_blur_px (asked for; their defaults are 0)
and tv_phase_smoothing (auto by default), resolved from the slice count at its boundary (1 slice
off, 2 and more on), numbers kept as given, said on the terminal and in run.log, recorded in
results.h5, and reaching the run exactly as the numbers they stand for; on counted data with several
slices tv_phase_smoothing's auto from the electrons per object pixel (``dose_smoothing``). And every
other auto a run resolves before its model is built (``reconstruction/autos.py``): the varying probe's
smoothing and the runtime's device, backend, threads and data.hold, named in results.h5 and run.log."""

import h5py
import numpy as np
import pytest
import torch
import yaml
from conftest import test_device, tiny_config

import ptyacc
from ptyacc.errors import ConfigError
from ptyacc.optim.autos import (
    MULTISLICE,
    SMOOTHING_ELECTRONS,
    auto_notes,
    auto_values,
    dose_smoothing,
    electrons_per_pixel,
    resolved,
)
from ptyacc.physics.footprint import median_neighbour_distance
from ptyacc.reconstruction.autos import variation_smoothing

KEYS = ("tv_phase", "lateral_blur_px", "tv_phase_smoothing")


AUTO = tuple(f"optim.regularize.{key}=auto" for key in KEYS)


def regularize_values(config) -> dict:
    """``auto_values`` of ``optim.regularize`` (``optim.object_optimizer``'s is tests/test_descent.py's)."""
    return {key: value for key, value in auto_values(config).items() if key.startswith("optim.regularize.")}


def machine_autos() -> dict:
    """The runtime's keys that a ``tiny_config`` run resolves from auto: the threads and where the patterns live,
    and on the CPU the device and the backend ("none": one process; on a GPU tiny_config names both)."""
    return {"data.hold": "device", "runtime.threads": torch.get_num_threads(),
            **({"runtime.device": "cpu", "runtime.backend": "none"} if test_device() == "cpu" else {})}


# the aperture edge a tiny_config run decides from auto: its 16 px patterns show no even bright-field disk
TINY_EDGE = {"model.probe_aperture_edge": "soft"}
TINY_FLOOR = {"model.background": False}  # its dark field falls away from the disk: no offset fitted


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
    """auto equals its numbers given explicitly bit for bit: all three keys auto (on these patterns, which
    are not counts, tv_phase_smoothing auto is 0), and the default, which equals all three at 0; the
    smoothing at 0.001 differs from both; the terminal and run.log say what auto chose; results.h5 keeps
    the config as given (auto) and the resolved values (attribute auto_values). The object and the probe
    take the preconditioned step (auto, with the amplitude loss too)."""
    rec = ptyacc.reconstruct(multislice(tmp_path, *AUTO), overwrite=True)
    said = ("ptyacc: optim.regularize: tv_phase 1, lateral_blur_px 0.3 (auto: 3 slices",
            "ptyacc: optim.regularize: tv_phase_smoothing 0 (auto: 3 slices, patterns not counts; give a number")
    err, log = capsys.readouterr().err, (tmp_path / "out" / "run.log").read_text()
    assert all(line in err and line.removeprefix("ptyacc: ") in log for line in said)
    with h5py.File(tmp_path / "out" / "results.h5") as f:
        assert yaml.safe_load(f.attrs["auto_values"]) == {"optim.regularize.tv_phase": 1.0,
                                                          "optim.regularize.lateral_blur_px": 0.3,
                                                          "optim.regularize.tv_phase_smoothing": 0.0,
                                                          "optim.object_optimizer": "preconditioned",
                                                          "optim.probe_optimizer": "preconditioned",
                                                          "optim.preconditioned_step": 0.4,
                                                          "optim.preconditioner_batch_floor": 0.25,
                                                          "optim.regularize.depth_blur_slices": 0.0,
                                                          "optim.adam_beta2": 0.999,
                                                          "optim.lr_final_fraction": 0.1,
                                                          "optim.loss": "amplitude", **TINY_EDGE, **TINY_FLOOR,
                                                          **machine_autos()}
        assert yaml.safe_load(f.attrs["config"])["optim"]["regularize"]["tv_phase"] == "auto"
    numbers = ("optim.regularize.tv_phase={}", "optim.regularize.lateral_blur_px={}",
               "optim.regularize.tv_phase_smoothing={}")
    explicit = ptyacc.reconstruct(multislice(tmp_path, *(k.format(v) for k, v in zip(numbers, (1, 0.3, 0)))),
                                  write=False)
    smoothing = ptyacc.reconstruct(multislice(tmp_path, *(k.format(v) for k, v in zip(numbers, (0, 0, 0.001)))),
                                   write=False)
    off = ptyacc.reconstruct(multislice(tmp_path, *(k.format(0) for k in numbers)), write=False)
    default = ptyacc.reconstruct(multislice(tmp_path), write=False)
    said = capsys.readouterr().err
    assert said.count("ptyacc: optim.regularize: tv_phase_smoothing 0 (auto: 3 slices, patterns not counts") == 1
    np.testing.assert_array_equal(rec.results.object, explicit.results.object)
    np.testing.assert_array_equal(default.results.object, off.results.object)
    assert not np.array_equal(default.results.object, smoothing.results.object)
    assert not np.array_equal(rec.results.object, default.results.object)


def test_dose_smoothing_falls_with_the_square_root_of_the_electrons_per_pixel_within_its_bounds():
    """0.001 at SMOOTHING_ELECTRONS, 1 / sqrt(2) of it at twice as many, sqrt(2) times it at half; the factor
    kept within [0.5, 2], also for no electrons at all."""
    assert dose_smoothing(SMOOTHING_ELECTRONS) == pytest.approx(0.001, rel=1e-12)
    assert dose_smoothing(2 * SMOOTHING_ELECTRONS) == pytest.approx(0.001 / 2**0.5, rel=1e-12)
    assert dose_smoothing(SMOOTHING_ELECTRONS / 2) == pytest.approx(0.001 * 2**0.5, rel=1e-12)
    assert dose_smoothing(100 * SMOOTHING_ELECTRONS) == pytest.approx(0.0005, rel=1e-12)
    assert dose_smoothing(SMOOTHING_ELECTRONS / 100) == dose_smoothing(0.0) == pytest.approx(0.002, rel=1e-12)


def test_electrons_per_pixel_is_the_counts_times_the_pixels_share_of_a_raster_cell():
    """A 5 x 7 raster 0.5 Å apart with 0.25 Å pixels: (0.25 / 0.5)^2 of each pattern's counts reach a
    pixel; on a scan twice as dense, four times as many."""
    grid = np.stack(np.meshgrid(np.arange(5) * 0.5, np.arange(7) * 0.5, indexing="ij"), -1).reshape(-1, 2)
    assert electrons_per_pixel(1000.0, 0.25, grid) == pytest.approx(250.0, rel=1e-9)
    assert electrons_per_pixel(1000.0, 0.25, grid / 2) == pytest.approx(1000.0, rel=1e-9)
    # a large scan is measured on 256 of its positions: a jittered 60 x 60 raster, against all 3,600
    rng = np.random.default_rng(1)
    large = np.stack(np.meshgrid(np.arange(60) * 0.5, np.arange(60) * 0.5, indexing="ij"), -1).reshape(-1, 2)
    large = large + rng.normal(0.0, 0.03, large.shape)
    every = median_neighbour_distance(large)
    assert electrons_per_pixel(1000.0, 0.25, large) == pytest.approx(1000.0 * 0.0625 / every**2, rel=0.03)
    assert median_neighbour_distance(large, at_most=256) != every  # a sample, not all of them


def test_counted_multislice_data_take_the_smoothing_of_their_dose_recorded_and_said(tmp_path, capsys):
    """Counted data on 3 slices: tv_phase_smoothing auto is dose_smoothing of the run's mean counts per
    pattern times (dx / scan step)^2, computed here from the simulated patterns and the config's step; the
    terminal says it, results.h5 records it, and the number given gives the same object bit for bit. A
    quarter of the dose takes twice the step (within the bounds)."""
    def counted(dose: float, out: str, *overrides: str):
        base = tiny_config(tmp_path, data={"simulate": {"scan_shape": [6, 6], "detector_px": 16, "atoms": 6,
                                                        "dose": dose}},
                           model={"slices": 3}, output={"dir": str(tmp_path / out), "figures": False})
        return ptyacc.load_config(base, list(overrides))

    rec = ptyacc.reconstruct(counted(2e4, "bright"))
    mean_counts = float(np.asarray(rec.data.patterns, dtype=np.float64).sum()) / rec.data.n_patterns
    expected = dose_smoothing(mean_counts * (0.3 / 0.6) ** 2)  # dx 0.3 Å, scan step 0.6 Å (tiny_config)
    with h5py.File(tmp_path / "bright" / "results.h5") as f:
        chosen = yaml.safe_load(f.attrs["auto_values"])
        assert chosen["optim.loss"] == "poisson"
        assert chosen["optim.regularize.tv_phase_smoothing"] == pytest.approx(expected, rel=1e-6)
        assert yaml.safe_load(f.attrs["config"])["optim"]["regularize"]["tv_phase_smoothing"] == "auto"
    assert expected != pytest.approx(0.001, rel=0.05)  # not the number for data that are not counts
    said = capsys.readouterr().err
    assert f"ptyacc: optim.regularize: tv_phase_smoothing {expected:.2g} (auto: 3 slices, " in said
    assert "electrons per object pixel; give a number, 0 = off, to choose)" in said
    number = chosen["optim.regularize.tv_phase_smoothing"]
    given = ptyacc.reconstruct(counted(2e4, "given", f"optim.regularize.tv_phase_smoothing={number!r}"), write=False)
    np.testing.assert_array_equal(given.results.object, rec.results.object)
    ptyacc.reconstruct(counted(5e3, "dim"))
    with h5py.File(tmp_path / "dim" / "results.h5") as f:
        dim_smoothing = yaml.safe_load(f.attrs["auto_values"])["optim.regularize.tv_phase_smoothing"]
    assert dim_smoothing == pytest.approx(2 * expected, rel=0.05) and dim_smoothing < 0.002


def test_every_auto_a_run_resolves_is_named_and_the_varying_probe_takes_its_smoothing_as_a_number(tmp_path):
    """results.h5's auto_values and run.log's "auto:" line name exactly the keys this run resolved: with
    model.probe_variation on, its smoothing (twice the median distance between neighbouring positions, in Å,
    here from NumPy's pairwise distances; with free eigen-probes at least 3 Å, not here) and its kind (one
    eigen-probe: a change of focus per position), with two probe modes the
    second's power, the object's and the
    probe's, and the runtime's device, backend
    (none: one process), threads and data.hold where auto, and the initial probe's aperture edge. A run given
    those numbers instead of auto is the same bit for bit and names none of them."""
    base = tiny_config(tmp_path, model={"probe_variation": 1, "probe_modes": 2}, optim={"iterations": 2},
                       output={"dir": str(tmp_path / "out"), "figures": False})
    rec = ptyacc.reconstruct(ptyacc.load_config(base, []), overwrite=True)
    positions = rec.results.positions_A
    pairs = np.linalg.norm(positions[:, None] - positions[None], axis=-1) + np.diag(np.full(len(positions), np.inf))
    with h5py.File(tmp_path / "out" / "results.h5") as f:
        chosen = yaml.safe_load(f.attrs["auto_values"])
    smoothing_A = chosen.pop("model.probe_variation_smoothing_A")
    assert chosen.pop("model.probe_variation_eigen") == "defocus"  # one eigen-probe: a change of focus per position
    assert smoothing_A == pytest.approx(2 * np.median(pairs.min(1)), rel=1e-6)
    assert smoothing_A < 3.0  # the floor of free eigen-probes (below) would show
    free = ptyacc.load_config(base, ["model.probe_variation_eigen=free"])
    assert variation_smoothing(free, np.asarray(positions / rec.results.dx_A), rec.results.dx_A) == {
        "model.probe_variation_smoothing_A": 3.0}
    assert chosen == {"optim.loss": "amplitude", "optim.object_optimizer": "preconditioned",
                      "optim.probe_optimizer": "preconditioned", "optim.preconditioned_step": 0.4,
                      "optim.preconditioner_batch_floor": 0.0, "optim.regularize.tv_phase_smoothing": 0.0,
                      "optim.adam_beta2": 0.95, "optim.lr_final_fraction": 0.1, "model.probe_mode_power": 0.02,
                      **TINY_EDGE, **TINY_FLOOR, **machine_autos()}
    lines = [line.split(" ", 1)[1] for line in (tmp_path / "out" / "run.log").read_text().splitlines()]
    said = [line.removeprefix("auto: ") for line in lines if line.startswith("auto: ")]
    named = [item.split()[0] for item in said[0].split(", ")]
    assert len(said) == 1
    assert named == sorted([*chosen, "model.probe_variation_smoothing_A", "model.probe_variation_eigen"])
    given = {key: value for key, value in {**chosen, "model.probe_variation_smoothing_A": smoothing_A,
                                            "model.probe_variation_eigen": "defocus"}.items()
             if key != "runtime.backend"}  # a single process's "none" is no value of the key
    numbers = ptyacc.reconstruct(ptyacc.load_config(base, [f"output.dir={tmp_path / 'numbers'}",
                                                           *(f"{key}={value}" for key, value in given.items())]))
    np.testing.assert_array_equal(numbers.results.object, rec.results.object)
    np.testing.assert_array_equal(numbers.results.quantities["probe_variation"]["weights"],
                                  rec.results.quantities["probe_variation"]["weights"])
    with h5py.File(tmp_path / "numbers" / "results.h5") as f:
        left = {key: value for key, value in machine_autos().items() if key == "runtime.backend"}
        assert yaml.safe_load(f.attrs["auto_values"]) == left
