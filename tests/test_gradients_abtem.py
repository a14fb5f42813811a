"""The gradient of every refinable quantity, as the training loss computes it (the hand-written
backward of ``ptycho_loss`` and autograd upstream of it), against central finite differences of
the same loss, on data ptyacc did not simulate: the tilted abTEM crystal of
tests/data/abtem/ (tests/abtem_cases.py), at its true object, with the tilt, the slice thickness,
the positions, the scan's affine distortion, the probe and the object all refined."""

import numpy as np
import pytest
import torch
from abtem_cases import case_config, periodic_sample, truth

import ptyacc
from ptyacc.reconstruction.engine import Reconstructor

REFINED = {"tilt": 1, "slice_thickness": 1, "positions": 1, "scan_affine": 1}


@pytest.fixture(scope="module")
def model_and_data():
    config = ptyacc.load_config(case_config(
        "conventions", data={"transform": {"upsample": 1}},  # the truth's grid (auto would take 2 for the tilt)
        experiment={"tilt_mrad": [1.5, -1.0]}, model={"slice_thickness_A": 3.7},
        optim={"iterations": 1, "start": REFINED, "loss": "amplitude", "object_optimizer": "adam",
               "probe_optimizer": "adam"}))
    run = Reconstructor(config, write=False)
    run.build()
    model, geometry, known = run.model, run.geometry, truth("conventions")
    offset_px = (np.asarray(geometry.origin_A) + known["positions_A"].mean(0) - run.data.positions_A.mean(0)) / geometry.dx_A
    phase = torch.from_numpy(periodic_sample(known["cell_phase"].astype(np.float64), offset_px, geometry.shape))
    with torch.no_grad():
        model.object.copy_(torch.view_as_real(torch.polar(torch.ones_like(phase), phase)[None].to(torch.complex64)))
        model.position_offsets.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(1))
        model.scan_affine.copy_(torch.tensor([[0.01, -0.02], [0.015, 0.005]]))
    indices = torch.arange(8)
    return model, indices, run.data.patterns[indices]


def loss_of(model, indices, measured) -> torch.Tensor:
    return model(indices, measured, loss="amplitude")


PARAMETERS = {  # name: (the tensor, the finite-difference step along a unit direction)
    "tilt": (lambda m: m.propagation.tilt_mrad, 0.02),
    "slice_thickness": (lambda m: m.propagation.slice_thickness_A, 0.01),
    "positions": (lambda m: m.position_offsets, 0.02),
    "scan_affine": (lambda m: m.scan_affine, 1e-3),
    "probe": (lambda m: m.probe, 2e-3),
    "object": (lambda m: m.object, 2e-3),
}


@pytest.mark.parametrize("name", list(PARAMETERS))
def test_gradient_against_finite_differences(model_and_data, name):
    model, indices, measured = model_and_data
    get, step = PARAMETERS[name]
    tensor = get(model)
    assert isinstance(tensor, torch.nn.Parameter), f"{name} is not refined"
    model.zero_grad(set_to_none=True)
    loss_of(model, indices, measured).backward()
    grad = tensor.grad.detach().double().clone()
    generator = torch.Generator().manual_seed(7)
    for _ in range(2):
        direction = torch.randn(tensor.shape, generator=generator, dtype=torch.float64)
        if name in ("probe", "object"):  # where the gradient lives, so that the change stands above rounding
            direction = direction * grad.abs() / grad.abs().max()
        direction /= direction.norm()
        original = tensor.detach().clone()
        values = []
        with torch.no_grad():
            for sign in (1.0, -1.0):
                tensor.copy_(original + sign * step * direction.to(tensor.dtype))
                values.append(float(loss_of(model, indices, measured).double()))
            tensor.copy_(original)
        numeric = (values[0] - values[1]) / (2 * step)
        analytic = float((grad * direction).sum())
        assert analytic == pytest.approx(numeric, rel=5e-3), name
