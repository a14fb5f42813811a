"""Multislice forward model with incoherent probe and object modes."""

import torch

from ptyacc.physics.farfield import Detector, far_field_intensities


def transmission(amplitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """Complex transmission amplitude * exp(i phase) from two real tensors of any shape."""
    return torch.polar(amplitude, phase)


def exit_waves(probes: torch.Tensor, transmissions: torch.Tensor, propagator: torch.Tensor | None) -> torch.Tensor:
    """Exit waves (B, P, O, K, K) complex of every probe mode through every object mode.

    probes:        (B, P, K, K) complex, each probe mode already at its scan position
                   (or (1, P, K, K), shared by the whole batch).
    transmissions: (B, O, S, K, K) complex object patches: O object modes, S slices.
    propagator:    (K, K) complex Fresnel kernel between slices; unused when S == 1.

    The wave is transmitted by slice 0, propagated, transmitted by slice 1, ... and the last
    slice is not propagated: 2 (S - 1) FFTs here, plus one to the detector.
    """
    n_slices = transmissions.shape[2]
    wave = probes[:, :, None] * transmissions[:, None, :, 0]  # (B, P, O, K, K)
    for s in range(1, n_slices):
        wave = torch.fft.ifft2(torch.fft.fft2(wave) * propagator) * transmissions[:, None, :, s]
    return wave


def multislice_intensities(probes: torch.Tensor, transmissions: torch.Tensor,
                           propagator: torch.Tensor | None) -> torch.Tensor:
    """Far-field intensities (B, K, K), unshifted layout, summed over all mode pairs
    (see ``exit_waves`` for the shapes): 2 S - 1 FFTs per (pattern, probe mode, object mode)."""
    return far_field_intensities(exit_waves(probes, transmissions, propagator))


def detected_intensities(probe: torch.Tensor, obj: torch.Tensor, top_left: torch.Tensor, ramps: torch.Tensor | None,
                         propagator: torch.Tensor | None, detector: Detector) -> torch.Tensor:
    """Intensities (B, K, K), unshifted layout, summed over all mode pairs, of probe modes
    (P, K, K) at windows of the object (O, S, Ny, Nx) with corners ``top_left`` (B, 2), each
    probe shifted by its sub-pixel rest (Fourier multipliers ``ramps`` (B, K, K), or None) and
    detected by ``detector`` (near field: the image shifted back by the same rest). The model's
    prediction and the simulator's truth; the fused loss computes the same thing chunk by chunk."""
    probes = torch.fft.ifft2(torch.fft.fft2(probe) * ramps[:, None]) if ramps is not None else probe[None]
    waves = exit_waves(probes, extract_patches(obj, top_left, probe.shape[-1]), propagator)
    return far_field_intensities(detector.field(waves, ramps), transform=False)


def extract_patches(image: torch.Tensor, top_left: torch.Tensor, size: int) -> torch.Tensor:
    """Windows (B, ..., size, size) of ``image`` (..., Ny, Nx) whose pixel [0, 0] sits at
    ``top_left`` (B, 2) integer (row, column), inside the image. No Python loop over the batch:
    the forward indexes a strided view of all windows (rows of ``size`` contiguous pixels, so
    it is several times faster than a flat gather); the backward scatter-adds the gradient."""
    return _ExtractPatches.apply(image, top_left, size)


class _ExtractPatches(torch.autograd.Function):
    @staticmethod
    def forward(ctx, image: torch.Tensor, top_left: torch.Tensor, size: int) -> torch.Tensor:
        windows = image.unfold(-2, size, 1).unfold(-2, size, 1)  # (..., Ny-size+1, Nx-size+1, size, size)
        patches = windows[..., top_left[:, 0], top_left[:, 1], :, :]  # (..., B, size, size)
        ctx.save_for_backward(top_left)
        ctx.image_shape = image.shape
        ctx.size = size
        return patches.movedim(-3, 0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (top_left,) = ctx.saved_tensors
        size = ctx.size
        *lead, ny, nx = ctx.image_shape
        offsets = torch.arange(size, device=grad.device)
        rows = top_left[:, 0:1] + offsets  # (B, size)
        cols = top_left[:, 1:2] + offsets
        flat_index = (rows[:, :, None] * nx + cols[:, None, :]).reshape(-1)
        grad_image = torch.zeros(*lead, ny * nx, dtype=grad.dtype, device=grad.device)
        grad_image.index_add_(-1, flat_index, grad.movedim(0, -3).reshape(*lead, -1))
        return grad_image.reshape(ctx.image_shape), None, None

