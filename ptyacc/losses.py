"""Data-fidelity terms. Each returns the SUM over the local patterns divided by the global
batch size, so that per-process losses add up to the global-batch mean."""

import torch

EPS = 1e-8


def amplitude_loss(predicted: torch.Tensor, measured: torch.Tensor, global_batch: int) -> torch.Tensor:
    """Gaussian likelihood on amplitudes: sum over pixels of (sqrt(I_pred) - sqrt(I_meas))^2,
    summed over the local patterns (B, K, K) and divided by ``global_batch``."""
    diff = torch.sqrt(predicted + EPS) - torch.sqrt(measured)
    return diff.square().sum() / global_batch


def poisson_loss(predicted: torch.Tensor, measured: torch.Tensor, global_batch: int) -> torch.Tensor:
    """Poisson negative log-likelihood without the data-only term: sum over pixels of
    I_pred - I_meas log(I_pred), summed over the local patterns and divided by ``global_batch``."""
    return (predicted - measured * torch.log(predicted + EPS)).sum() / global_batch


LOSSES = {"amplitude": amplitude_loss, "poisson": poisson_loss}
