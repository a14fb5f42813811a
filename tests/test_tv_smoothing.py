"""optim.regularize.tv_phase_smoothing: one explicit descent step on the phase total variation
after every iteration, against a NumPy total variation differentiated by finite differences, with
known answers (a uniform phase is left alone, a phase spike is lowered), its auto value (0.001 on
several slices, 0 on one) and its reach on a split object."""

import numpy as np
import pytest
import torch

import ptyacc
from ptyacc.errors import ConfigError
from ptyacc.optim.autos import resolved
from ptyacc.physics.regularizers import tv_phase_smoothing
from ptyacc.reconstruction.tiles import Tiling, needs_pixel_ring

EPS = 0.05


def numpy_tv(t: np.ndarray, eps: float, floor: float = 1e-3) -> float:
    """The phase total variation of a complex (..., Ny, Nx) transmission, written out in NumPy:
    unit phasors u = t / sqrt(|t|^2 + floor^2); per pixel sqrt(|u below - u|^2 + |u right - u|^2 +
    eps^2) - eps, a step past the last row or column counting as 0."""
    u = t / np.sqrt(np.abs(t) ** 2 + floor**2)
    dy, dx = np.zeros(t.shape), np.zeros(t.shape)
    dy[..., :-1, :] = np.abs(u[..., 1:, :] - u[..., :-1, :]) ** 2
    dx[..., :, :-1] = np.abs(u[..., :, 1:] - u[..., :, :-1]) ** 2
    return float((np.sqrt(dy + dx + eps**2) - eps).sum())


def test_one_step_is_the_object_less_the_step_times_the_finite_difference_gradient():
    rng = np.random.default_rng(3)
    t = (1 + 0.2 * rng.standard_normal((1, 2, 5, 6))) * np.exp(1j * rng.uniform(-1, 1, (1, 2, 5, 6)))
    obj = torch.from_numpy(np.stack([t.real, t.imag], -1))
    step, h = 0.01, 1e-6
    gradient = np.zeros(obj.shape)
    for index in np.ndindex(*obj.shape):
        shifted = [obj.numpy().copy() for _ in range(2)]
        shifted[0][index] += h
        shifted[1][index] -= h
        plus, minus = (numpy_tv(a[..., 0] + 1j * a[..., 1], EPS) for a in shifted)
        gradient[index] = (plus - minus) / (2 * h)
    smoothed = tv_phase_smoothing(obj, step, EPS).numpy()
    np.testing.assert_allclose(smoothed, obj.numpy() - step * gradient, atol=1e-8)


def test_a_uniform_phase_is_left_alone_and_a_spike_is_lowered():
    flat = torch.from_numpy(np.stack([np.full((1, 1, 8, 8), np.cos(0.7)), np.full((1, 1, 8, 8), np.sin(0.7))], -1))
    assert torch.equal(tv_phase_smoothing(flat, 0.01, EPS), flat)
    phase = np.zeros((1, 1, 8, 8))
    phase[0, 0, 4, 4] = 0.5
    spike = torch.from_numpy(np.stack([np.cos(phase), np.sin(phase)], -1))
    after = tv_phase_smoothing(spike, 0.01, EPS).numpy()
    new_phase = np.angle(after[..., 0] + 1j * after[..., 1])
    assert 0.45 < new_phase[0, 0, 4, 4] < 0.5  # lowered towards its neighbours, not past them
    assert new_phase[0, 0, 3, 4] > 0 and new_phase[0, 0, 4, 3] > 0  # the neighbours rise towards it
    before_tv = numpy_tv(np.exp(1j * phase), EPS)
    assert numpy_tv(after[..., 0] + 1j * after[..., 1], EPS) < before_tv


def test_auto_is_the_default_0_001_on_several_slices_and_off_on_one():
    assert ptyacc.load_config(None).optim.regularize.tv_phase_smoothing == "auto"
    assert resolved(ptyacc.load_config(None, ["model.slices=1"]), "tv_phase_smoothing") == 0.0
    assert resolved(ptyacc.load_config(None, ["model.slices=2"]), "tv_phase_smoothing") == 0.001
    assert resolved(ptyacc.load_config(None, ["model.slices=2", "optim.regularize.tv_phase_smoothing=0"]),
                    "tv_phase_smoothing") == 0.0
    with pytest.raises(ConfigError, match="optim.regularize.tv_phase_smoothing"):
        ptyacc.load_config(None, ["optim.regularize.tv_phase_smoothing=-0.1"])


def test_a_split_object_without_a_ring_is_refused_naming_the_smoothing():
    owned = ((0, 10, 0, 20), (10, 20, 0, 20))
    with pytest.raises(ConfigError, match=r"optim.regularize.tv_phase_smoothing: 0"):
        needs_pixel_ring(Tiling((20, 20), 4, owned, owned, ()), key="optim.regularize.tv_phase_smoothing")
