"""Data fidelity: how well intensities fit measured ones, for training and for evaluation.

Losses are SUMS over the given patterns; the caller divides by the global batch size.
- amplitude: sum over pixels of (sqrt(I) - sqrt(M))^2 (Gaussian noise on amplitudes)
- poisson:   sum over pixels of I - M log(I) (Poisson negative log-likelihood, data term dropped)
with I the model intensity (``detector_response``: the intensity summed over modes times a gain
per pattern, plus a background) plus EPS, and M the measured one, over the pixels of the
detector's mask. Each formula is written once (``detector_response``, ``_amplitude``,
``poisson_nll``) and serves the hand-written gradient of the chunked loss
(``intensity_loss_terms``, which also gives the gradients of the gain and the background), the
autograd reference (``loss_from_intensities``; ``far_field_loss`` in fused.py) and the Poisson
deviance of the final model (``deviance_sums``). No other physics module is needed here: the
chain (chain.py) and the chunked loss (fused.py) build on this one.
"""

import torch

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


def check_kind(kind: str) -> None:
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss must be one of {LOSS_KINDS}, got {kind!r}")


def detector_response(coherent: torch.Tensor, weights: torch.Tensor | None = None,
                      background: torch.Tensor | None = None) -> torch.Tensor:
    """The model intensity (B, K, K): weights (B,) * coherent (B, K, K) + background (K, K),
    each factor optional. All elementwise, so ``torch.compile`` fuses it with the loss terms."""
    intensity = coherent if weights is None else coherent * weights[:, None, None]
    return intensity if background is None else intensity + background


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


def saturated_sums(measured: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """(sum of poisson_nll(I, I), number of pixel values >= 1) (2,) float64 over the pixels of
    measured counts I (B, K, K) where ``mask`` (K, K) is 1: the Poisson loss of the counts
    predicting themselves, which the loss leaves out, and the count that turns a summed loss
    minus the first into a deviance per counted pixel (see ``deviance_sums``)."""
    measured = measured.double()
    terms, counted = poisson_nll(measured.clamp_min(TINY), measured), measured >= 1
    if mask is not None:
        terms, counted = terms * mask, counted * mask
    return torch.stack([terms.sum(), counted.sum().double()])
