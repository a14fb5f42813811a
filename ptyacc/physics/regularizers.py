"""Priors on the object: pure tensor functions of the object's real/imaginary pairs.

- ``phase_total_variation``: a smooth (Charbonnier) isotropic total variation of the phase,
  measured by differences of unit phasors u = t / |t|: |u_b - u_a| = 2 |sin(dphi / 2)|, which
  is the phase step dphi for small steps and never sees the 2 pi jumps of a wrapped angle.
- ``tv_phase_smoothing``: one explicit descent step on that total variation.
- ``depth_blur``: a Gaussian low-pass along the slices of a multislice object, on amplitude and
  phase, with mirror boundaries (the kz low-pass of the object's even extension in depth).
- ``lateral_blur``: a Gaussian low-pass in (y, x) of every slice, on amplitude and phase, with
  mirror boundaries at the object's edges (PtyRAD's ``obj_rblur``).
- ``PhaseTV`` and ``blur_depth``: the first as a regularizer of a gradient, the second in place, for
  the object's parameter group (``ptyacc/quantities/object.py``).

The object is (object_modes, slices, Ny, Nx, 2) float, real and imaginary parts (``PtychoModel``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

# A pixel's phasor is t / sqrt(|t|^2 + floor^2): unit where |t| >> floor, shrinking smoothly to
# 0 where the transmission vanishes (a phase there means nothing, and t / |t| has no gradient).
PHASOR_AMPLITUDE_FLOOR = 1e-3


def unit_phasors(obj: torch.Tensor, floor: float = PHASOR_AMPLITUDE_FLOOR) -> torch.Tensor:
    """(..., 2) real/imaginary pairs scaled to unit length, t / sqrt(|t|^2 + floor^2) (..., 2)."""
    return obj * torch.rsqrt(obj.square().sum(-1, keepdim=True) + floor * floor)


def phase_total_variation(obj: torch.Tensor, epsilon_rad: float) -> torch.Tensor:
    """Sum over modes, slices and pixels (y, x) of sqrt(|u[y+1, x] - u[y, x]|^2 + |u[y, x+1] - u[y, x]|^2
    + eps^2) - eps, u = ``unit_phasors(obj)``; a step past the last row or column counts as 0.

    obj: (O, S, Ny, Nx, 2) float. Returns a scalar of obj's dtype; 0 for a uniform phase; the
    gradient is 0 where the phase is locally flat (smooth in the steps for eps > 0)."""
    u = unit_phasors(obj)
    step_y = (u[..., 1:, :, :] - u[..., :-1, :, :]).square().sum(-1)  # (O, S, Ny - 1, Nx)
    step_x = (u[..., :, 1:, :] - u[..., :, :-1, :]).square().sum(-1)  # (O, S, Ny, Nx - 1)
    squared = F.pad(step_y, (0, 0, 0, 1)) + F.pad(step_x, (0, 1))
    return (torch.sqrt(squared + epsilon_rad * epsilon_rad) - epsilon_rad).sum()


def phase_total_variation_gradient(obj: torch.Tensor, epsilon_rad: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(value, d value / d obj) of ``phase_total_variation`` at ``obj`` (O, S, Ny, Nx, 2), by
    autograd on a detached copy (obj's own graph, if any, is untouched)."""
    with torch.enable_grad():
        leaf = obj.detach().requires_grad_(True)
        value = phase_total_variation(leaf, epsilon_rad)
        (grad,) = torch.autograd.grad(value, leaf)
    return value.detach(), grad


def depth_blur_weights(slices: int, sigma_slices: float) -> np.ndarray:
    """(S, S) float64 weights W of a Gaussian blur (standard deviation ``sigma_slices``) along
    depth, mirrored at both ends (the signal continued as ... x1 x0 | x0 x1 ... x_{S-1} | x_{S-1} ...):
    out[s] = sum_t W[s, t] x[t]. W is symmetric and every row and column sums to 1, so the sum
    over slices of every pixel is kept; a signal constant in depth is unchanged."""
    if sigma_slices <= 0 or slices == 1:
        return np.eye(slices)
    reach = int(math.ceil(8 * sigma_slices)) + 1
    distance = np.arange(-reach, reach + 1)
    kernel = np.exp(-0.5 * (distance / sigma_slices) ** 2)
    kernel /= kernel.sum()
    weights = np.zeros((slices, slices))
    for s in range(slices):
        for d, w in zip(distance, kernel):
            weights[s, _mirrored(s + d, slices)] += w
    return weights


def _mirrored(index: int, slices: int) -> int:
    """The slice that position ``index`` of the mirrored continuation (period 2 S) holds."""
    index %= 2 * slices
    return index if index < slices else 2 * slices - 1 - index


@torch.no_grad()
def depth_blur(obj: torch.Tensor, sigma_slices: float) -> torch.Tensor:
    """The object (O, S, Ny, Nx, 2) with amplitude and phase blurred along depth (``depth_blur_weights``).

    The phase is taken relative to each pixel's circular mean over the slices, angle(sum_s t_s),
    so that a phase that wraps at +-pi is blurred as the continuous quantity it is; the blur is
    linear, so blurring the relative phase and adding the mean back blurs the phase. (A pixel
    whose slices spread more than pi either side of that mean would still wrap.)"""
    weights = depth_blur_weights(obj.shape[1], sigma_slices)
    transmission = torch.view_as_complex(obj.contiguous())  # (O, S, Ny, Nx)
    amplitude = transmission.abs()
    mean_phase = torch.angle(transmission.sum(1, keepdim=True))  # (O, 1, Ny, Nx)
    relative = torch.angle(transmission * torch.polar(torch.ones_like(mean_phase), -mean_phase))
    w = torch.as_tensor(weights, dtype=amplitude.dtype, device=amplitude.device)
    blurred_amplitude, blurred_phase = (torch.einsum("st,otyx->osyx", w, x) for x in (amplitude, relative))
    return torch.view_as_real(torch.polar(blurred_amplitude, blurred_phase + mean_phase))


@torch.no_grad()
def tv_phase_smoothing(obj: torch.Tensor, step: float, epsilon_rad: float) -> torch.Tensor:
    """``obj`` (O, S, Ny, Nx, 2) less ``step`` times the gradient of ``phase_total_variation`` with
    respect to its real and imaginary parts: one explicit descent step, a deterministic function of
    each pixel and its neighbours (up to one pixel away, diagonals included)."""
    _, grad = phase_total_variation_gradient(obj, epsilon_rad)
    return obj - step * grad


def gaussian_taps(sigma_px: float) -> np.ndarray:
    """(2 R + 1,) float64 taps of a Gaussian of standard deviation ``sigma_px`` sampled at the
    integer offsets -R..R, R = ceil(4 sigma) (at least 1), scaled to sum to 1."""
    reach = max(1, int(math.ceil(4 * sigma_px)))
    distance = np.arange(-reach, reach + 1)
    taps = np.exp(-0.5 * (distance / sigma_px) ** 2)
    return taps / taps.sum()


def lateral_blur_reach_px(sigma_px: float) -> int:
    """How far (px) ``lateral_blur`` reaches: a pixel's result depends on pixels up to this far in y
    and x (0 for sigma 0: no blur)."""
    return len(gaussian_taps(sigma_px)) // 2 if sigma_px > 0 else 0


def _mirror_padded(x: torch.Tensor, dim: int, reach: int) -> torch.Tensor:
    """``x`` continued by ``reach`` mirrored samples at both ends of ``dim`` (... x1 x0 | x0 x1 ...)."""
    n = x.shape[dim]
    return torch.cat([x.narrow(dim, 0, reach).flip(dim), x, x.narrow(dim, n - reach, reach).flip(dim)], dim)


def _blur_axis(x: torch.Tensor, taps: np.ndarray, dim: int, phase: bool = False) -> torch.Tensor:
    """``x`` convolved along ``dim`` with the symmetric ``taps``, mirrored at both ends: every
    column of the operator sums to 1, so the sum along ``dim`` is kept. Shifted slices rather than
    a convolution kernel, so a pixel's result does not depend on where it sits in ``x``.
    ``phase``: ``x`` is a phase (rad), blurred relative to each pixel's own phase: the neighbours'
    differences, wrapped to [-pi, pi), are blurred and added back, so a phase that jumps by 2 pi
    between neighbours is blurred as the continuous quantity it is; where no difference wraps this
    is the plain blur (the taps sum to 1)."""
    reach, n = len(taps) // 2, x.shape[dim]
    padded = _mirror_padded(x, dim, reach)
    out = torch.zeros_like(x)
    for k, w in enumerate(taps):
        term = padded.narrow(dim, k, n)
        out += float(w) * (torch.remainder(term - x + math.pi, 2 * math.pi) - math.pi if phase else term)
    return x + out if phase else out


@torch.no_grad()
def lateral_blur(obj: torch.Tensor, sigma_px: float) -> torch.Tensor:
    """The object (O, S, Ny, Nx, 2) with the amplitude and the phase of every slice blurred in y and
    x by a Gaussian of standard deviation ``sigma_px`` (``gaussian_taps``, separable), mirrored at
    the object's edges (``_blur_axis``: the sum of the amplitude and of the phase over each slice is
    kept; a constant object is unchanged). Amplitude and phase rather than the complex
    transmission: blurring t would turn every phase step into a loss of amplitude (|mean of phasors|
    < 1), darkening a phase object at every iteration. Needs Ny, Nx >= ``lateral_blur_reach_px``."""
    taps = gaussian_taps(sigma_px)
    transmission = torch.view_as_complex(obj.contiguous())  # (O, S, Ny, Nx)
    amplitude, phase = transmission.abs(), torch.angle(transmission)
    for dim in (2, 3):
        amplitude = _blur_axis(amplitude, taps, dim)
        phase = _blur_axis(phase, taps, dim, phase=True)
    return torch.view_as_real(torch.polar(amplitude, phase))


@dataclass
class PhaseTV:
    """``weight`` x phase total variation (``phase_total_variation``) of the object, as a
    regularizer: adds its gradient to a gradient in place."""

    weight: float
    epsilon_rad: float

    def __call__(self, values: torch.Tensor, grad: torch.Tensor) -> None:
        _, penalty_grad = phase_total_variation_gradient(values, self.epsilon_rad)
        grad.add_(penalty_grad, alpha=self.weight)


@torch.no_grad()
def blur_depth(obj: torch.Tensor, sigma_slices: float) -> None:
    """Object (O, S, Ny, Nx, 2) blurred along depth in place (``depth_blur``)."""
    obj.copy_(depth_blur(obj, sigma_slices))
