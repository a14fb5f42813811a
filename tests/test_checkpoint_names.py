"""Checkpoints keep each optimizer under its group's name, and the object, the probe, the fitted
background and intensity weights, and the detector blur, under their quantity's (``ptyacc/quantities/
object.py``, ``probe.py``, ``detector_fit.py``, ``detector_blur.py``); a checkpoint written before
(optimizers in order, those tensors at the model's top level: 'object', 'probe', 'probe_scale', ...)
still resumes to the same bits."""

import shutil

import numpy as np
import pytest
import torch
from conftest import tiny_config

import ptyacc
from ptyacc.errors import ConfigError
from ptyacc.reconstruction.checkpoint import latest_checkpoint, save_checkpoint


def fitted_config(tmp_path, **start):
    config = tiny_config(tmp_path, model={"background": True, "intensity_weights": True},
                         optim={"iterations": 6, "start": {"probe": 1, "detector": 1, **start}},
                         output={"dir": str(tmp_path / "out"), "checkpoint_every": 3, "figures": False})
    return ptyacc.load_config(config)


LEGACY_ORDER = ["object", "probe", "positions", "scan_affine", "tilt", "slice_thickness", "detector_blur", "detector"]
OLD_NAMES = {"quantities.detector_blur.variance_px2": "detector_blur_variance",
             "quantities.positions.offsets_px": "position_offsets", "quantities.positions.scan_affine": "scan_affine",
             "quantities.object.transmission": "object", "quantities.probe.modes": "probe",
             "quantities.probe.scale": "probe_scale"}


def in_old_format(state: dict) -> dict:
    """``state`` as a checkpoint of the earlier layout: no optimizer names, the object, the probe and its
    scale, the fitted tensors and the background's scale, and the blur's variance, at the model's top level."""
    model = {}
    for name, tensor in state["model"].items():
        model[OLD_NAMES.get(name, name.removeprefix("quantities.fitted."))] = tensor
    old = {key: value for key, value in state.items() if key != "optimizer_names"}
    names = state["optimizer_names"]  # listed as the earlier layout built its groups
    order = sorted(range(len(names)), key=lambda i: LEGACY_ORDER.index(names[i]))
    return {**old, "model": model, "optimizers": [state["optimizers"][i] for i in order]}


@pytest.mark.parametrize("old_format", [False, True])
def test_resume_from_the_third_iteration_equals_the_whole_run(tmp_path, old_format):
    config = fitted_config(tmp_path)
    whole = ptyacc.reconstruct(config)
    out = tmp_path / "out"
    folder = out / "checkpoints"
    path, state = latest_checkpoint(out)
    assert path.name == "ckpt_000006.pt"
    assert state["optimizer_names"] == ["object", "probe", "detector"]
    assert {"quantities.fitted.background", "quantities.fitted.intensity_weights", "quantities.object.transmission",
            "quantities.probe.modes", "quantities.probe.scale"} <= set(state["model"])
    assert not {"object", "probe", "probe_scale"} & set(state["model"])
    path.unlink()
    _, third = latest_checkpoint(out)
    shutil.rmtree(folder)
    save_checkpoint(out, in_old_format(third) if old_format else third, keep=2)
    resumed = ptyacc.reconstruct(config, resume=True)
    assert resumed.results.attrs["iterations_done"] == 6
    np.testing.assert_array_equal(resumed.results.object, whole.results.object)
    for name in ("background", "intensity_weights"):
        found, expected = resumed.results.quantities["fitted"][name], whole.results.quantities["fitted"][name]
        assert np.ptp(expected) > 0  # refined, not the start
        np.testing.assert_array_equal(found, expected)


def test_resume_with_another_refined_quantity_names_it(tmp_path):
    ptyacc.reconstruct(fitted_config(tmp_path))
    with pytest.raises(ConfigError, match="the refined quantities differ: this config also refines positions"):
        ptyacc.reconstruct(fitted_config(tmp_path, positions=2), resume=True)


def test_optimizers_are_matched_by_name_not_by_place(tmp_path):
    """A checkpoint whose groups are listed in another order gives each optimizer its own state."""
    config = fitted_config(tmp_path)
    whole = ptyacc.reconstruct(config)
    out = tmp_path / "out"
    (out / "checkpoints" / "ckpt_000006.pt").unlink()
    _, third = latest_checkpoint(out)
    shutil.rmtree(out / "checkpoints")
    order = [2, 0, 1]
    shuffled = dict(third, optimizers=[third["optimizers"][i] for i in order],
                    optimizer_names=[third["optimizer_names"][i] for i in order])
    save_checkpoint(out, shuffled, keep=2)
    resumed = ptyacc.reconstruct(config, resume=True)
    np.testing.assert_array_equal(resumed.results.object, whole.results.object)
    assert torch.equal(torch.as_tensor(resumed.results.quantities["fitted"]["background"]),
                       torch.as_tensor(whole.results.quantities["fitted"]["background"]))


def test_an_optimizer_state_of_another_shape_is_refused_not_a_crash(tmp_path):
    """Mislabelled optimizers (the detector fit's Adam moments under the blur's name and back) would fail
    inside the fused Adam step; the resume names the group and the shapes instead."""
    config = fitted_config(tmp_path, detector_blur=1)
    ptyacc.reconstruct(config)
    out = tmp_path / "out"
    _, last = latest_checkpoint(out)
    shutil.rmtree(out / "checkpoints")
    names = last["optimizer_names"]
    i, j = names.index("detector"), names.index("detector_blur")
    swapped = list(last["optimizers"])
    swapped[i], swapped[j] = swapped[j], swapped[i]
    save_checkpoint(out, dict(last, optimizers=swapped), keep=2)
    with pytest.raises(ConfigError, match="group's saved exp_avg has shape"):
        ptyacc.reconstruct(config, resume=True)


def test_an_old_checkpoint_of_a_refined_blur_and_positions_resumes_to_the_same_bits(tmp_path):
    """The blur's variance, the position offsets and the scan affine saved as the model's own, and the
    optimizers listed in the earlier order without names
    ('detector_blur_variance', 'position_offsets', 'scan_affine': before ``quantities/detector_blur.py``
    and ``positions.py``) resume under their quantities' names."""
    config = ptyacc.load_config(tiny_config(tmp_path, model={"detector_blur_px": 0.4, "background": True},
                                            optim={"iterations": 6, "start": {"detector_blur": 1, "positions": 1,
                                                                              "scan_affine": 1, "detector": 1}},
                                            output={"dir": str(tmp_path / "out"), "checkpoint_every": 3,
                                                    "figures": False}))
    whole = ptyacc.reconstruct(config)
    out = tmp_path / "out"
    (out / "checkpoints" / "ckpt_000006.pt").unlink()
    _, third = latest_checkpoint(out)
    assert set(OLD_NAMES) <= set(third["model"])
    assert third["optimizer_names"] != sorted(third["optimizer_names"], key=LEGACY_ORDER.index)  # today's order differs:
    # without names, each optimizer is paired by the earlier order (checkpoint._legacy_rank)
    shutil.rmtree(out / "checkpoints")
    save_checkpoint(out, in_old_format(third), keep=2)
    resumed = ptyacc.reconstruct(config, resume=True)
    np.testing.assert_array_equal(resumed.results.object, whole.results.object)
    assert resumed.results.attrs["detector_blur_px"] == whole.results.attrs["detector_blur_px"] != 0.4
    np.testing.assert_array_equal(resumed.results.positions_A, whole.results.positions_A)
    affine = whole.results.quantities["fitted"]["scan_affine"]
    assert np.abs(affine).max() > 0 and np.array_equal(resumed.results.quantities["fitted"]["scan_affine"], affine)


def test_an_old_checkpoint_of_fixed_positions_resumes(tmp_path):
    """Fixed positions kept zero offsets in the model's state ('position_offsets'); they are no
    quantity now, and such a checkpoint resumes without them."""
    config = fitted_config(tmp_path)
    whole = ptyacc.reconstruct(config)
    out = tmp_path / "out"
    (out / "checkpoints" / "ckpt_000006.pt").unlink()
    _, third = latest_checkpoint(out)
    assert not any("position" in name for name in third["model"] if name != "positions_px")
    old = dict(third, model={**third["model"], "position_offsets": torch.zeros_like(third["model"]["positions_px"])})
    shutil.rmtree(out / "checkpoints")
    save_checkpoint(out, old, keep=2)
    np.testing.assert_array_equal(ptyacc.reconstruct(config, resume=True).results.object, whole.results.object)
