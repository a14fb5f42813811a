"""Multislice forward model with incoherent probe and object modes."""

import torch


def transmission(amplitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """Complex transmission amplitude * exp(i phase) from two real tensors of any shape."""
    return torch.polar(amplitude, phase)


def multislice_intensities(probes: torch.Tensor, transmissions: torch.Tensor,
                           propagator: torch.Tensor | None) -> torch.Tensor:
    """Far-field intensities (B, K, K), unshifted layout, summed over all mode pairs.

    probes:        (B, P, K, K) complex, each probe mode already at its scan position.
    transmissions: (B, O, S, K, K) complex object patches: O object modes, S slices.
    propagator:    (K, K) complex Fresnel kernel between slices; unused when S == 1.

    The wave is transmitted by slice 0, propagated, transmitted by slice 1, ... and the last
    slice is not propagated: 2 S - 1 FFTs per (pattern, probe mode, object mode).
    """
    n_slices = transmissions.shape[2]
    wave = probes[:, :, None] * transmissions[:, None, :, 0]  # (B, P, O, K, K)
    for s in range(1, n_slices):
        wave = torch.fft.ifft2(torch.fft.fft2(wave) * propagator) * transmissions[:, None, :, s]
    far = torch.view_as_real(torch.fft.fft2(wave, norm="ortho"))
    return far.square().sum(dim=(1, 2, -1))


def extract_patches(image: torch.Tensor, top_left: torch.Tensor, size: int) -> torch.Tensor:
    """Windows (B, ..., size, size) of ``image`` (..., Ny, Nx) whose pixel [0, 0] sits at
    ``top_left`` (B, 2) integer (row, column). One gather, no Python loop over the batch."""
    ny, nx = image.shape[-2:]
    offsets = torch.arange(size, device=image.device)
    rows = top_left[:, 0:1] + offsets  # (B, size)
    cols = top_left[:, 1:2] + offsets
    flat_index = (rows[:, :, None] * nx + cols[:, None, :]).reshape(-1)  # (B * size * size,)
    lead = image.shape[:-2]
    patches = image.reshape(*lead, ny * nx).index_select(-1, flat_index)
    patches = patches.reshape(*lead, top_left.shape[0], size, size)
    return patches.movedim(-3, 0)
