"""Far-field detection: intensities of exit waves, and data-fidelity losses with a hand-written
gradient (one FFT and a few elementwise passes back, instead of autograd's chain of small ops).

Losses are SUMS over the given patterns; the caller divides by the global batch size.
- amplitude: sum over pixels of (sqrt(I) - sqrt(M))^2 (Gaussian noise on amplitudes)
- poisson:   sum over pixels of I - M log(I) (Poisson negative log-likelihood, data term dropped)
with I the predicted intensity summed over modes and M the measured one.
"""

from dataclasses import dataclass

import torch

EPS = 1e-8
LOSS_KINDS = ("amplitude", "poisson")


def far_field_intensities(waves: torch.Tensor, transform: bool = True) -> torch.Tensor:
    """|fft2(wave, norm='ortho')|^2 summed over the mode axes: (B, ..., K, K) -> (B, K, K);
    with ``transform`` False, |wave|^2 summed over the modes (for fields already at the detector)."""
    return summed_intensity(torch.fft.fft2(waves, norm="ortho") if transform else waves)


def summed_intensity(far: torch.Tensor) -> torch.Tensor:
    """|far|^2 summed over the mode axes between batch and pixels: (B, ..., K, K) -> (B, K, K).
    re^2 + im^2 gives a contiguous result several times faster on CPU than abs()**2, squaring
    view_as_real, or reducing a strided real view; a single mode skips the reduction."""
    power = far.real.square() + far.imag.square()
    power = power.reshape(far.shape[0], -1, *far.shape[-2:])
    return power[:, 0] if power.shape[1] == 1 else power.sum(1)


def far_field_loss(waves: torch.Tensor, measured: torch.Tensor, kind: str = "amplitude",
                   detector: "Detector | None" = None, weights: torch.Tensor | None = None,
                   background: torch.Tensor | None = None, ramps: torch.Tensor | None = None) -> torch.Tensor:
    """Loss (scalar) of exit waves (B, ..., K, K) complex against measured intensities (B, K, K),
    both unshifted, differentiated by autograd: the plain reference for ``ptycho_loss``.
    Model intensity: weights (B,) * sum over modes |detector field|^2 + background (K, K);
    ramps (B, K, K): the probes' sub-pixel shifts, undone at a near-field detector (``Detector``)."""
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss must be one of {LOSS_KINDS}, got {kind!r}")
    detector = detector or Detector()
    intensity = summed_intensity(detector.field(waves, ramps))
    if weights is not None:
        intensity = intensity * weights[:, None, None]
    if background is not None:
        intensity = intensity + background
    per_pixel = loss_from_intensities(intensity, measured, kind, reduce=False)
    return (per_pixel if detector.mask is None else per_pixel * detector.mask).sum()


def loss_from_intensities(predicted: torch.Tensor, measured: torch.Tensor, kind: str,
                          reduce: bool = True) -> torch.Tensor:
    """The loss from intensities (B, K, K), with autograd's own gradient (summed unless not ``reduce``)."""
    if kind == "amplitude":
        per_pixel = (torch.sqrt(predicted + EPS) - torch.sqrt(measured)).square()
    else:
        per_pixel = predicted + EPS - measured * torch.log(predicted + EPS)
    return per_pixel.sum() if reduce else per_pixel


@dataclass
class Detector:
    """How exit waves become measured intensities, beyond the far-field FFT.

    propagator: (K, K) complex, unshifted: near-field detection, the detector field is
        ifft2(fft2(wave) * propagator) instead of fft2(wave) (both orthonormal).
    mask:       (K, K) float, unshifted: 1 for pixels that count in the loss, 0 for bad ones.

    A near-field image stays with the beam while the sample moves. The model puts each probe
    window on the object's pixel grid and shifts the probe by the sub-pixel rest s (Fourier
    multipliers ``ramps`` (B, K, K) from ``shift_ramp``), so the image of that window must be
    shifted back by -s to land on the detector's pixels; otherwise the beam's own fringes jitter
    by up to half a pixel from pattern to pattern. ``field`` and ``adjoint`` take those ramps and
    fold the shift back into the propagator (``transfer``), at no extra FFT. In the far field such
    a shift is a phase ramp that leaves the intensity unchanged, so there the ramps are ignored.
    """

    propagator: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    def transfer(self, ramps: torch.Tensor | None = None, ndim: int = 3) -> torch.Tensor:
        """Near-field Fourier multiplier for waves (B, ..., K, K) with ``ndim`` dimensions: the
        propagator (K, K), times conj(ramps) as (B, 1, ..., K, K) when ``ramps`` are given."""
        if ramps is None:
            return self.propagator
        ramps = ramps.reshape(ramps.shape[0], *([1] * (ndim - 3)), *ramps.shape[-2:])
        return ramps.conj() * self.propagator

    def field(self, waves: torch.Tensor, ramps: torch.Tensor | None = None) -> torch.Tensor:
        far = torch.fft.fft2(waves, norm="ortho")
        if self.propagator is None:
            return far
        return torch.fft.ifft2(far * self.transfer(ramps, waves.dim()), norm="ortho")

    def adjoint(self, grad_field: torch.Tensor, ramps: torch.Tensor | None = None) -> torch.Tensor:
        """The gradient with respect to the waves from the one with respect to ``field(waves, ramps)``:
        the adjoint map, F* for the far field, F* T^* F for the near field (F orthonormal, T = ``transfer``)."""
        if self.propagator is not None:
            grad_field = torch.fft.fft2(grad_field, norm="ortho") * self.transfer(ramps, grad_field.dim()).conj()
        return torch.fft.ifft2(grad_field, norm="ortho")


def intensity_loss_terms(coherent: torch.Tensor, measured: torch.Tensor, kind: str,
                         weights: torch.Tensor | None = None, background: torch.Tensor | None = None,
                         mask: torch.Tensor | None = None):
    """Loss of the coherent intensities ``coherent`` = sum_modes |far|^2 (B, K, K) of detector
    fields ``far`` against ``measured`` (B, K, K), with the model intensity
    I = weights * coherent + background (weights (B,), background (K, K), both optional) over
    the pixels where ``mask`` is 1. All elementwise, so ``torch.compile`` can fuse it.

    Returns (loss, factor, grad_weights, grad_background): d loss / d far = factor * far for
    every mode, factor (B, K, K) real; the other two are None when not asked for."""
    intensity = coherent if weights is None else coherent * weights[:, None, None]
    if background is not None:
        intensity = intensity + background
    intensity = intensity + EPS
    if kind == "amplitude":
        amplitude = torch.sqrt(intensity)
        root_measured = torch.sqrt(measured)
        per_pixel = (amplitude - root_measured).square()
        d_intensity = 1.0 - root_measured / amplitude  # d loss / d I
    else:
        log_intensity = torch.log(intensity)
        per_pixel = intensity - measured * log_intensity
        d_intensity = 1.0 - measured / intensity
    if mask is not None:
        per_pixel = per_pixel * mask
        d_intensity = d_intensity * mask
    grad_weights = (d_intensity * coherent).sum(dim=(-2, -1)) if weights is not None else None
    grad_background = d_intensity.sum(0) if background is not None else None
    # the complex gradient of a real function of |far|^2 is 2 dL/d|far|^2 * far
    factor = 2.0 * d_intensity if weights is None else 2.0 * d_intensity * weights[:, None, None]
    return per_pixel.sum(), factor, grad_weights, grad_background
