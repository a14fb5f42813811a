"""The Poisson deviance of a model against measured counts, in sums that processes and chunks add:
for evaluating a final model (and a tracker's deviance from the loss), not for training. The
negative log-likelihood per pixel, I - M log I, is ``chain.poisson_nll``'s without its cap (the training loss's
tangent below (M - 1) / 32, which would read a dark model's deviance low), written out here (one module entered
once by the run's finish, not chain.py again for every term)."""

import torch

TINY = 1e-30  # floor of the intensities whose logarithm the deviance takes


def deviance_sums(predicted: torch.Tensor, measured: torch.Tensor, mask: torch.Tensor | None = None
                  ) -> torch.Tensor:
    """(sum of the Poisson deviance terms, number of pixel values >= 1) (2,) float64 over the
    pixels of predicted intensities (B, K, K) and measured counts (B, K, K) where ``mask``
    (K, K) is 1. The deviance term of a pixel is poisson_nll(m, I) - poisson_nll(I, I), m the
    model, I >= 0 the counts (the loaders clip or refuse negative values), both floored at TINY
    inside the logarithm, which makes 0 log 0 = 0; summed and divided by half the count it is
    ~1 for a model at the noise level."""
    measured = measured.double()
    terms = _nll(predicted.double().clamp_min(TINY), measured) - _nll(measured.clamp_min(TINY), measured)
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
    terms, counted = _nll(measured.clamp_min(TINY), measured), measured >= 1
    if mask is not None:
        terms, counted = terms * mask, counted * mask
    return torch.stack([terms.sum(), counted.sum().double()])


def _nll(intensity: torch.Tensor, measured: torch.Tensor) -> torch.Tensor:
    """``chain.poisson_nll`` without its cap: I - M log I per pixel."""
    return intensity - measured * torch.log(intensity)
