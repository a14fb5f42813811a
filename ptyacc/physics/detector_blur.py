"""The detector's point spread (charge sharing, a scintillator's glow): the predicted
intensities, summed over the modes and before the detector's response (gain, background),
convolved with a Gaussian of variance ``v`` px^2 on the pixel grid (``model.detector_blur_px``
is its standard deviation sqrt(v)).

The Gaussian of the pixel grid is the discrete one (Lindeberg's): the kernel
exp(-2 v) I_m(v) I_n(v) (I the modified Bessel functions) at an offset of (m, n) pixels, whose
transfer function, f in cycles per pixel, is

    H(f) = exp(v (cos 2 pi f_y + cos 2 pi f_x - 2)),

which equals the continuous Gaussian's exp(-2 pi^2 v |f|^2) at low frequencies and keeps both
its variance v per axis and its sum 1. It is chosen over sampling the continuous transfer
function because its kernel is positive for every v: the continuous one's, sampled on the pixel
grid, dips below zero by up to 2.5 % of its peak (sigma 0.3-0.6 px), which turns dark pixels
beside a bright disk edge negative and the amplitude and Poisson losses NaN. And its derivative
in v is the blurred intensity's five-point Laplacian over two, so that the gradient in v needs no
transform, and is not zero at v = 0: a blur refined from none starts to move.

The convolution is periodic (multiplication of the rfft2 spectrum), so in the unshifted layout
of far-field patterns it is exact (it commutes with the fftshift); on near-field images it wraps
around their edges, where it mixes at most a few sigma of pixels. A symmetric kernel makes it
self-adjoint: the adjoint that the hand-written gradient needs is the blur itself. A positive
kernel keeps intensities positive, but the FFTs' float32 round-off leaves dark pixels at about
-1e-7 of the brightest, below the amplitude loss's floor (1e-8), hence NaN: ``forward`` clamps
the blurred intensities at 0 (where, as autograd's clamp, it passes no gradient).
"""

from __future__ import annotations

import math

import torch


def blur_transfer(k: int, variance_px2: torch.Tensor) -> torch.Tensor:
    """(K, K // 2 + 1) real: H(f) of a variance ``variance_px2`` () px^2 on the rfft2 grid of K x K
    pixels, in the variance's dtype and device (differentiable in it)."""
    angle = 2 * math.pi * torch.fft.fftfreq(k, dtype=variance_px2.dtype, device=variance_px2.device)
    cos_y, cos_x = torch.cos(angle), torch.cos(angle[: k // 2 + 1])
    return torch.exp(variance_px2 * (cos_y[:, None] + cos_x[None, :] - 2.0))


def half_laplacian(image: torch.Tensor) -> torch.Tensor:
    """Half the periodic five-point Laplacian of images (..., K, K): d blur / d variance at the blurred image."""
    rolled = (image.roll(1, -1) + image.roll(-1, -1) + image.roll(1, -2) + image.roll(-1, -2))
    return 0.5 * rolled - 2.0 * image


class DetectorBlur:
    """The point spread of variance ``variance_px2`` () px^2 applied to intensities (B, K, K): ``forward``
    (differentiable by autograd in both), ``adjoint`` (the blur itself) and ``variance_vjp``."""

    def __init__(self, variance_px2: torch.Tensor) -> None:
        self.variance_px2 = variance_px2
        self._transfers: dict[tuple[int, torch.dtype], torch.Tensor] = {}

    def transfer(self, k: int, dtype: torch.dtype) -> torch.Tensor:
        """H on the rfft2 grid of K x K pixels, in ``dtype``, made once per size and dtype."""
        key = (k, dtype)
        if key not in self._transfers:
            self._transfers[key] = blur_transfer(k, self.variance_px2.to(dtype))
        return self._transfers[key]

    def forward(self, intensity: torch.Tensor) -> torch.Tensor:
        """Intensities (B, K, K) real convolved with the point spread (periodically), the round-off
        below 0 clamped (module docstring); same shape and dtype."""
        return self.convolve(intensity).clamp_min(0.0)

    __call__ = forward

    def convolve(self, image: torch.Tensor) -> torch.Tensor:
        """Images (B, K, K) real convolved with the point spread, periodically."""
        spectrum = torch.fft.rfft2(image) * self.transfer(image.shape[-1], image.dtype)
        return torch.fft.irfft2(spectrum, s=image.shape[-2:])

    def adjoint(self, grad: torch.Tensor, blurred: torch.Tensor) -> torch.Tensor:
        """The gradient (B, K, K) with respect to the intensities before the blur, from the one
        after it and the ``blurred`` intensities: the convolution (its own adjoint) of the gradient,
        0 where the clamp acted."""
        return self.convolve(grad * (blurred > 0))

    def variance_vjp(self, grad: torch.Tensor, blurred: torch.Tensor) -> torch.Tensor:
        """() the gradient with respect to the variance from the gradient (B, K, K) with respect
        to the ``blurred`` intensities (B, K, K): sum of grad x d blurred / d variance, the latter
        ``half_laplacian(blurred)`` (d H / d v = (cos 2 pi f_y + cos 2 pi f_x - 2) H), 0 where the
        clamp acted."""
        return (grad * (blurred > 0) * half_laplacian(blurred)).sum()
