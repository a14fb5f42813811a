"""Data fidelity: how well intensities fit measured ones, for training and for evaluation.

Losses are SUMS over the given patterns; the caller divides by the global batch size.
- amplitude: sum over pixels of (sqrt(I) - sqrt(M))^2 (Gaussian noise on amplitudes)
- poisson:   sum over pixels of I - M log(I) (Poisson negative log-likelihood, data term dropped)
with I the model intensity (``detector_response`` of the intensity summed over modes) plus EPS,
and M the measured one, over the pixels of the detector's mask. Each formula is written once
(``_amplitude``, ``poisson_nll``) and serves the hand-written gradient of the chunked loss
(``intensity_loss_terms``), the autograd reference (``loss_from_intensities``,
``far_field_loss``) and the Poisson deviance of the final model (``deviance_sums``).
"""

import torch

from ptyacc.physics.chain import Detect, Detector, detector_response, summed_intensity

EPS = 1e-8
LOSS_KINDS = ("amplitude", "poisson")
TINY = 1e-30  # floor of the intensities whose logarithm the deviance takes


def poisson_nll(intensity: torch.Tensor, measured: torch.Tensor) -> torch.Tensor:
    """Poisson negative log-likelihood per pixel without the term of the data alone: I - M log I."""
    return intensity - measured * torch.log(intensity)


def _amplitude(intensity: torch.Tensor, measured: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sqrt(I) - sqrt(M))^2 per pixel and its derivative in I."""
    amplitude = torch.sqrt(intensity)
    root_measured = torch.sqrt(measured)
    return (amplitude - root_measured).square(), 1.0 - root_measured / amplitude


def _poisson(intensity: torch.Tensor, measured: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``poisson_nll`` per pixel and its derivative in I."""
    return poisson_nll(intensity, measured), 1.0 - measured / intensity


def _check_kind(kind: str) -> None:
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss must be one of {LOSS_KINDS}, got {kind!r}")


def intensity_loss_terms(coherent: torch.Tensor, measured: torch.Tensor, kind: str,
                         weights: torch.Tensor | None = None, background: torch.Tensor | None = None,
                         mask: torch.Tensor | None = None):
    """Loss of the coherent intensities ``coherent`` = sum_modes |far|^2 (B, K, K) of detector
    fields ``far`` against ``measured`` (B, K, K), with the model intensity
    I = weights * coherent + background (weights (B,), background (K, K), both optional) over
    the pixels where ``mask`` is 1. All elementwise, so ``torch.compile`` can fuse it.

    Returns (loss, factor, grad_weights, grad_background): d loss / d far = factor * far for
    every mode, factor (B, K, K) real; the other two are None when not asked for."""
    intensity = detector_response(coherent, weights, background) + EPS
    per_pixel, d_intensity = (_amplitude if kind == "amplitude" else _poisson)(intensity, measured)
    if mask is not None:
        per_pixel = per_pixel * mask
        d_intensity = d_intensity * mask
    grad_weights = (d_intensity * coherent).sum(dim=(-2, -1)) if weights is not None else None
    grad_background = d_intensity.sum(0) if background is not None else None
    # the complex gradient of a real function of |far|^2 is 2 dL/d|far|^2 * far
    factor = 2.0 * d_intensity if weights is None else 2.0 * d_intensity * weights[:, None, None]
    return per_pixel.sum(), factor, grad_weights, grad_background


def loss_from_intensities(predicted: torch.Tensor, measured: torch.Tensor, kind: str,
                          reduce: bool = True) -> torch.Tensor:
    """The loss from intensities (B, K, K), with autograd's own gradient (summed unless not ``reduce``)."""
    intensity = predicted + EPS
    per_pixel = _amplitude(intensity, measured)[0] if kind == "amplitude" else poisson_nll(intensity, measured)
    return per_pixel.sum() if reduce else per_pixel


def far_field_loss(waves: torch.Tensor, measured: torch.Tensor, kind: str = "amplitude",
                   detector: Detector | None = None, weights: torch.Tensor | None = None,
                   background: torch.Tensor | None = None, ramps: torch.Tensor | None = None) -> torch.Tensor:
    """Loss (scalar) of exit waves (B, ..., K, K) complex against measured intensities (B, K, K),
    both unshifted, differentiated by autograd: the plain reference for ``ptycho_loss``.
    Model intensity: weights (B,) * sum over modes |detector field|^2 + background (K, K);
    ramps (B, K, K): the probes' sub-pixel shifts, undone at a near-field detector (``Detect``)."""
    _check_kind(kind)
    detect = Detect(detector or Detector(), ramps)
    intensity = detector_response(summed_intensity(detect.forward(waves)), weights, background)
    per_pixel = loss_from_intensities(intensity, measured, kind, reduce=False)
    return (per_pixel if detect.mask is None else per_pixel * detect.mask).sum()


def deviance_sums(predicted: torch.Tensor, measured: torch.Tensor, mask: torch.Tensor | None = None
                  ) -> torch.Tensor:
    """(sum of the Poisson deviance terms, number of pixel values >= 1) (2,) float64 over the
    pixels of predicted intensities (B, K, K) and measured counts (B, K, K) where ``mask``
    (K, K) is 1. The deviance term of a pixel is poisson_nll(m, I) - poisson_nll(I, I), m the
    model, I >= 0 the counts (the loaders clip or refuse negative values), both floored at TINY
    inside the logarithm, which makes 0 log 0 = 0; summed and divided by half the count it is
    ~1 for a model at the noise level."""
    measured = measured.double()
    terms = poisson_nll(predicted.double().clamp_min(TINY), measured) - poisson_nll(measured.clamp_min(TINY), measured)
    counted = measured >= 1
    if mask is not None:
        terms, counted = terms * mask, counted * mask
    return torch.stack([terms.sum(), counted.sum().double()])
