"""End-to-end on a thick crystal simulated in the test (tests/crystal_data.py): the refined
beam tilt and slice thickness come back from a wrong start, and the object with them."""

import numpy as np
import pytest
import torch
from crystal_data import crystal_config, phase_ncc, tilted_crystal

import ptyacc
from ptyacc.quantities.slices import TiltSmoothing

TILT_MRAD = (3.0, -2.0)
# identical slices are the crystal's prior: without it the slices may shear to absorb the tilt
BLUR = {"regularize": {"depth_blur_slices": 2.0}}


@pytest.mark.slow
def test_refined_tilt_recovers_the_tilt_and_the_untilted_quality():
    """Measured: tilt (2.88, -2.02) mrad from (0, 0); phase NCC 0.9969 against the untilted
    case's 0.9975."""
    untilted_config = crystal_config(**BLUR)
    untilted = ptyacc.reconstruct(ptyacc.load_config(untilted_config), data=tilted_crystal(untilted_config),
                                  write=False)
    config = crystal_config(**BLUR, start={"tilt": 0}, lr={"tilt": 0.5})
    rec = ptyacc.reconstruct(ptyacc.load_config(config), data=tilted_crystal(config, TILT_MRAD), write=False)
    tilt = rec.results.tilt_mrad
    assert tilt.shape == (2,)
    assert abs(tilt[0] - TILT_MRAD[0]) < 0.2 and abs(tilt[1] - TILT_MRAD[1]) < 0.2, tilt
    assert phase_ncc(rec) > phase_ncc(untilted) - 0.01, (phase_ncc(rec), phase_ncc(untilted))


@pytest.mark.slow
def test_per_position_tilts_find_a_uniform_tilt():
    """model.tilt: per_position on a uniformly tilted crystal: (N, 2) tilts, all near the truth
    (the common part is learnt from every pattern, the smoothed offsets stay small)."""
    config = crystal_config(**BLUR, start={"tilt": 0}, lr={"tilt": 0.5})
    config["model"]["tilt"] = "per_position"
    data = tilted_crystal(config, TILT_MRAD)
    tilts = ptyacc.reconstruct(ptyacc.load_config(config), data=data, write=False).results.tilt_mrad
    assert tilts.shape == (data.n_patterns, 2)
    error = np.abs(tilts - np.asarray(TILT_MRAD))
    assert np.abs(tilts.mean(0) - TILT_MRAD).max() < 0.2 and error.max() < 0.5, (tilts.mean(0), error.max())


def test_tilt_smoothing_keeps_a_smooth_field_and_averages_noise():
    """On a 10 x 10 grid: a linear field minus its mean passes (inside, away from the edges),
    noise shrinks, and the result has zero mean."""
    grid = torch.stack(torch.meshgrid(torch.arange(10.0), torch.arange(10.0), indexing="ij"), -1).reshape(-1, 2)
    ramp = 0.3 * (grid[:, :1] - 4.5).repeat(1, 2)
    noise = torch.randn(100, 2, generator=torch.Generator().manual_seed(0))
    smoothing = TiltSmoothing(grid, sigma_px=1.0)
    offsets = (ramp + noise).clone()
    smoothing(offsets)
    torch.testing.assert_close(offsets.mean(0), torch.zeros(2), rtol=0, atol=1e-6)
    inner = ((grid >= 3) & (grid <= 6)).all(1)
    assert float((offsets - ramp)[inner].std()) < 0.5 * float(noise[inner].std())
    smooth_only = ramp.clone()
    smoothing(smooth_only)
    torch.testing.assert_close(smooth_only[inner], ramp[inner], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_refined_slice_thickness_recovers_from_a_start_30_percent_off():
    """Simulated with 10 Å slices, started at 13 Å: measured 10.18 Å after 30 iterations."""
    data = tilted_crystal(crystal_config(thickness_A=10.0))
    config = crystal_config(thickness_A=13.0, **BLUR, start={"slice_thickness": 0})
    rec = ptyacc.reconstruct(ptyacc.load_config(config), data=data, write=False)
    thickness = rec.results.attrs["slice_thickness_A"]
    assert abs(thickness / 10.0 - 1) < 0.05, thickness


@pytest.mark.parametrize("settings, expected", [
    ({"experiment": {"tilt_mrad": [1.0]}}, "experiment.tilt_mrad: must be [y, x] in mrad"),
    ({"optim": {"start": {"tilt": 0}}}, "optim.start.tilt: the tilt acts between slices; set model.slices > 1"),
    ({"optim": {"start": {"slice_thickness": 0}}}, "optim.start.slice_thickness: the slice thickness acts between"),
    ({"optim": {"lr": {"tilt": -1}}}, "optim.lr.tilt: must be >= 0"),
    ({"model": {"tilt_smoothing_A": 0}}, "model.tilt_smoothing_A: must be > 0 or null"),
    ({"model": {"recenter": {"probe_mask_mrad": -2}}}, "model.recenter.probe_mask_mrad: must be > 0 or null"),
    ({"model": {"slices": 2, "recenter": {"object_z": True}}, "runtime": {"shard_object": True}},
     "model.recenter.object_z: needs the whole object on every process"),
])
def test_bad_settings_name_the_key(settings, expected):
    with pytest.raises(ptyacc.ConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        ptyacc.load_config(settings)


@pytest.mark.slow
def test_init_from_carries_the_refined_tilts_and_thickness(tmp_path):
    """A run started from a previous results.h5 (model.init_from) starts from its tilts and slice
    thickness: with nothing refined and no iteration's change, they are the saved ones."""
    config = crystal_config(scan=6, start={"tilt": 0, "slice_thickness": 0}, iterations=3)
    config["model"]["tilt"] = "per_position"
    config["output"] = {"dir": str(tmp_path / "first"), "figures": False}
    first = ptyacc.reconstruct(ptyacc.load_config(config), data=tilted_crystal(config, TILT_MRAD)).results
    config["model"]["init_from"] = str(tmp_path / "first" / "results.h5")
    config["optim"].update(iterations=1, start={"object": None, "probe": None})
    config["output"]["dir"] = str(tmp_path / "second")
    second = ptyacc.reconstruct(ptyacc.load_config(config), data=tilted_crystal(config, TILT_MRAD)).results
    np.testing.assert_allclose(second.tilt_mrad, first.tilt_mrad, rtol=0, atol=1e-5)
    assert np.abs(first.tilt_mrad).max() > 1e-3  # the first run refined them
    assert second.attrs["slice_thickness_A"] == pytest.approx(first.attrs["slice_thickness_A"], rel=1e-6)
