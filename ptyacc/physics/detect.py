"""Stage 4 of the forward chain: exit waves to the field at the detector (far or near field),
intensities summed over the modes, and the detector's response (gain per pattern, background)."""

from dataclasses import dataclass

import torch


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
    by up to half a pixel from pattern to pattern. ``Detect`` folds that shift back into the
    propagator, at no extra FFT. In the far field such a shift is a phase ramp that leaves the
    intensity unchanged, so there the ramps are ignored.
    """

    propagator: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    def field(self, waves: torch.Tensor, ramps: torch.Tensor | None = None) -> torch.Tensor:
        """``Detect(self, ramps).forward(waves)``."""
        return Detect(self, ramps).forward(waves)

    def adjoint(self, grad_field: torch.Tensor, ramps: torch.Tensor | None = None) -> torch.Tensor:
        """``Detect(self, ramps).adjoint(grad_field)``."""
        return Detect(self, ramps).adjoint(grad_field)


class Detect:
    """The detector field of a batch's exit waves (B, ..., K, K), modes between batch and
    pixels: fft2 (orthonormal) in the far field; F* T F in the near field, with F the
    orthonormal fft2 and the transfer function T = propagator * conj(ramps) (B, K, K), which
    also shifts each image back by its probe's sub-pixel shift (``Detector``). Orthonormal, so
    ``adjoint`` is the inverse. ``mask`` is the detector's, for the data fidelity."""

    def __init__(self, detector: Detector, ramps: torch.Tensor | None = None) -> None:
        self.mask = detector.mask
        self.ramps = ramps if detector.propagator is not None else None
        if detector.propagator is None:
            self.transfer = None
        else:
            self.transfer = detector.propagator if ramps is None else ramps.conj() * detector.propagator

    def forward(self, waves: torch.Tensor) -> torch.Tensor:
        return self.forward_with_spectrum(waves)[0]

    def forward_with_spectrum(self, waves: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The field and, in the near field, its spectrum T F waves, which ``vjp`` needs for the
        gradient with respect to the ramps (None in the far field)."""
        far = torch.fft.fft2(waves, norm="ortho")
        if self.transfer is None:
            return far, None
        spectrum = far * self._transfer(waves.dim())
        return torch.fft.ifft2(spectrum, norm="ortho"), spectrum

    def adjoint(self, grad_field: torch.Tensor) -> torch.Tensor:
        return self.vjp(grad_field)[0]

    def vjp(self, grad_field: torch.Tensor, spectrum: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the gradient with respect to the waves, ``adjoint(grad_field)``; with the near
        field's ``spectrum`` from ``forward_with_spectrum`` and ramps, the gradient (B, K, K)
        with respect to the ramps, else None). The ramps are unimodular phase factors:
        spectrum = G conj(R), so the gradient in R, conj(sum grad_spectrum conj(G)), equals
        R sum conj(grad_spectrum) spectrum."""
        if self.transfer is None:
            return torch.fft.ifft2(grad_field, norm="ortho"), None
        grad_spectrum = torch.fft.fft2(grad_field, norm="ortho")
        grad_waves = torch.fft.ifft2(grad_spectrum * self._transfer(grad_field.dim()).conj(), norm="ortho")
        if spectrum is None or self.ramps is None:
            return grad_waves, None
        per_mode = grad_spectrum.conj() * spectrum
        modes = tuple(range(1, per_mode.dim() - 2))  # the mode axes between batch and pixels
        return grad_waves, self.ramps * (per_mode.sum(modes) if modes else per_mode)

    def _transfer(self, ndim: int) -> torch.Tensor:
        """The transfer function shaped for fields with ``ndim`` dimensions: (B, 1, ..., K, K) with ramps."""
        if self.ramps is None:
            return self.transfer
        return self.transfer.reshape(self.transfer.shape[0], *([1] * (ndim - 3)), *self.transfer.shape[-2:])


def summed_intensity(far: torch.Tensor) -> torch.Tensor:
    """|far|^2 summed over the mode axes between batch and pixels: (B, ..., K, K) -> (B, K, K).
    re^2 + im^2 gives a contiguous result several times faster on CPU than abs()**2, squaring
    view_as_real, or reducing a strided real view; a single mode skips the reduction."""
    power = far.real.square() + far.imag.square()
    power = power.reshape(far.shape[0], -1, *far.shape[-2:])
    return power[:, 0] if power.shape[1] == 1 else power.sum(1)


def far_field_intensities(waves: torch.Tensor, transform: bool = True) -> torch.Tensor:
    """|fft2(wave, norm='ortho')|^2 summed over the mode axes: (B, ..., K, K) -> (B, K, K);
    with ``transform`` False, |wave|^2 summed over the modes (for fields already at the detector)."""
    return summed_intensity(torch.fft.fft2(waves, norm="ortho") if transform else waves)


def detector_response(coherent: torch.Tensor, weights: torch.Tensor | None = None,
                      background: torch.Tensor | None = None) -> torch.Tensor:
    """The model intensity (B, K, K): weights (B,) * coherent (B, K, K) + background (K, K),
    each factor optional. All elementwise, so ``torch.compile`` fuses it with the loss terms."""
    intensity = coherent if weights is None else coherent * weights[:, None, None]
    return intensity if background is None else intensity + background
