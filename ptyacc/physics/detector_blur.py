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
beside a bright disk edge negative and the amplitude and Poisson losses NaN. The blur is
refined in v, not sigma: its derivative in v, the blurred intensity's five-point Laplacian over
two, is not zero at v = 0, so a blur refined from none starts to move.

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


class DetectorBlur:
    """The point spread of variance ``variance_px2`` () px^2 applied to intensities (B, K, K): ``forward``
    (differentiable by autograd in both) and, for the hand-written gradient, ``forward_with_spectrum``
    and ``vjp``."""

    def __init__(self, variance_px2: torch.Tensor) -> None:
        self.variance_px2 = variance_px2
        self._transfers: dict[tuple[int, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def transfer(self, k: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(H, dH/dv x the rfft2 grid's weights / K^2), both (K, K // 2 + 1) in ``dtype``, made
        once per size and dtype: the columns 1 .. K/2 - 1 stand for two of the full spectrum."""
        key = (k, dtype)
        if key not in self._transfers:
            transfer = blur_transfer(k, self.variance_px2.to(dtype))
            angle = 2 * math.pi * torch.fft.fftfreq(k, dtype=dtype, device=transfer.device)
            slope = torch.cos(angle)[:, None] + torch.cos(angle[: k // 2 + 1])[None, :] - 2.0  # d log H / d v
            columns = torch.full((k // 2 + 1,), 2.0, dtype=dtype, device=transfer.device)
            columns[0] = 1.0
            if k % 2 == 0:
                columns[-1] = 1.0
            self._transfers[key] = transfer, transfer * slope * columns / (k * k)
        return self._transfers[key]

    def forward(self, intensity: torch.Tensor) -> torch.Tensor:
        """Intensities (B, K, K) real convolved with the point spread (periodically), the round-off
        below 0 clamped (module docstring); same shape and dtype."""
        return self.forward_with_spectrum(intensity)[0]

    __call__ = forward

    def forward_with_spectrum(self, intensity: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(``forward(intensity)``, the rfft2 spectrum (B, K, K // 2 + 1) of the intensity, which ``vjp`` needs)."""
        spectrum = torch.fft.rfft2(intensity)
        transfer = self.transfer(intensity.shape[-1], intensity.dtype)[0]
        return torch.fft.irfft2(spectrum * transfer, s=intensity.shape[-2:]).clamp_min(0.0), spectrum

    def convolve(self, image: torch.Tensor) -> torch.Tensor:
        """Images (B, K, K) real convolved with the point spread, periodically (no clamp)."""
        spectrum = torch.fft.rfft2(image) * self.transfer(image.shape[-1], image.dtype)[0]
        return torch.fft.irfft2(spectrum, s=image.shape[-2:])

    def vjp(self, grad: torch.Tensor, blurred: torch.Tensor, spectrum: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """From the gradient (B, K, K) with respect to the ``blurred`` intensities: (the gradient
        with respect to the intensities before the blur, the convolution, its own adjoint, of the
        gradient where the clamp did not act; given the intensities' ``spectrum`` from
        ``forward_with_spectrum``, the gradient () with respect to the variance, else None).
        The latter is sum_x g(x) irfft2(U dH/dv)(x), g the gradient where the clamp did not act and
        U the spectrum, summed over frequencies instead (Parseval): no further transform."""
        k = grad.shape[-1]
        transfer, slope = self.transfer(k, grad.dtype)
        grad_spectrum = torch.fft.rfft2(grad * (blurred > 0))
        grad_intensity = torch.fft.irfft2(grad_spectrum * transfer, s=grad.shape[-2:])
        if spectrum is None:
            return grad_intensity, None
        product = grad_spectrum.real * spectrum.real + grad_spectrum.imag * spectrum.imag  # Re(conj(G) U)
        return grad_intensity, (product * slope).sum()
