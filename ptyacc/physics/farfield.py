"""Far-field detection: intensities of exit waves, and data-fidelity losses with a hand-written
gradient (one FFT and a few elementwise passes back, instead of autograd's chain of small ops).

Losses are SUMS over the given patterns; the caller divides by the global batch size.
- amplitude: sum over pixels of (sqrt(I) - sqrt(M))^2 (Gaussian noise on amplitudes)
- poisson:   sum over pixels of I - M log(I) (Poisson negative log-likelihood, data term dropped)
with I the predicted intensity summed over modes and M the measured one.
"""

import torch

EPS = 1e-8
LOSS_KINDS = ("amplitude", "poisson")


def far_field_intensities(waves: torch.Tensor) -> torch.Tensor:
    """|fft2(wave, norm='ortho')|^2 summed over the mode axes: (B, ..., K, K) -> (B, K, K)."""
    return _intensity(torch.fft.fft2(waves, norm="ortho"))


def _intensity(far: torch.Tensor) -> torch.Tensor:
    """|far|^2 summed over the mode axes between batch and pixels: (B, ..., K, K) -> (B, K, K).
    re^2 + im^2 gives a contiguous result several times faster on CPU than abs()**2, squaring
    view_as_real, or reducing a strided real view; a single mode skips the reduction."""
    power = far.real.square() + far.imag.square()
    power = power.reshape(far.shape[0], -1, *far.shape[-2:])
    return power[:, 0] if power.shape[1] == 1 else power.sum(1)


def far_field_loss(waves: torch.Tensor, measured: torch.Tensor, kind: str = "amplitude") -> torch.Tensor:
    """Loss (scalar) of exit waves (B, ..., K, K) complex against measured intensities (B, K, K),
    both in the unshifted layout. Differentiable in ``waves``."""
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss must be one of {LOSS_KINDS}, got {kind!r}")
    return _FarFieldLoss.apply(waves, measured, kind)


def loss_from_intensities(predicted: torch.Tensor, measured: torch.Tensor, kind: str) -> torch.Tensor:
    """The same loss from intensities (B, K, K), with autograd's own gradient."""
    if kind == "amplitude":
        return (torch.sqrt(predicted + EPS) - torch.sqrt(measured)).square().sum()
    return (predicted - measured * torch.log(predicted + EPS)).sum()


def loss_and_intensity_factor(far: torch.Tensor, measured: torch.Tensor, kind: str):
    """Loss of far fields (B, ..., K, K) against ``measured`` (B, K, K), and the real factor
    (B, K, K) with d loss / d far = factor * far (for every mode)."""
    intensity = _intensity(far) + EPS  # (B, K, K)
    if kind == "amplitude":
        amplitude = torch.sqrt(intensity)
        root_measured = torch.sqrt(measured)
        loss = (amplitude - root_measured).square().sum()
        # dL/dI = 1 - sqrt(M) / sqrt(I); the complex gradient is 2 dL/dI * far
        return loss, torch.addcdiv(torch.full_like(amplitude, 2.0), root_measured, amplitude, value=-2.0)
    loss = (intensity - measured * torch.log(intensity)).sum()
    return loss, torch.addcdiv(torch.full_like(intensity, 2.0), measured, intensity, value=-2.0)


class _FarFieldLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, waves: torch.Tensor, measured: torch.Tensor, kind: str) -> torch.Tensor:
        far = torch.fft.fft2(waves, norm="ortho")
        loss, factor = loss_and_intensity_factor(far, measured, kind)
        ctx.save_for_backward(far, factor)
        ctx.mode_dims = waves.dim() - 3
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        far, factor = ctx.saved_tensors
        factor = factor.reshape(factor.shape[0], *([1] * ctx.mode_dims), *factor.shape[1:])
        grad_far = far * (factor * grad_loss)
        return torch.fft.ifft2(grad_far, norm="ortho"), None, None
