"""The forward chain run with autograd, for prediction and simulation: ``detected_intensities``
(the model's predicted patterns, the simulator's, the saved mean pattern) and the exit waves and
far-field intensities it is made of. The training loss runs the same stages chunk by chunk with
their hand-written adjoints (``ptycho_loss``, fused.py); these are its plain counterpart."""

import torch

from ptyacc.physics.chain import (
    Detect,
    Detector,
    Multislice,
    ProbeShift,
    detector_response,
    extract_patches,
    summed_intensity,
)


def far_field_intensities(waves: torch.Tensor, transform: bool = True) -> torch.Tensor:
    """|fft2(wave, norm='ortho')|^2 summed over the mode axes: (B, ..., K, K) -> (B, K, K); without ``transform``
    |wave|^2 (fields already at the detector)."""
    return summed_intensity(torch.fft.fft2(waves, norm="ortho") if transform else waves)


def exit_waves(probes: torch.Tensor, transmissions: torch.Tensor, propagator: torch.Tensor | None,
               exit_ramps: torch.Tensor | None = None) -> torch.Tensor:
    """``Multislice(propagator, exit_ramps).forward(probes, transmissions)``: see ``Multislice`` for the shapes."""
    return Multislice(propagator, exit_ramps).forward(probes, transmissions)


def multislice_intensities(probes: torch.Tensor, transmissions: torch.Tensor,
                           propagator: torch.Tensor | None) -> torch.Tensor:
    """Far-field intensities (B, K, K), unshifted layout, summed over all mode pairs
    (see ``Multislice`` for the shapes): 2 S - 1 FFTs per (pattern, probe mode, object mode)."""
    return far_field_intensities(exit_waves(probes, transmissions, propagator))


def detected_intensities(probe: torch.Tensor, obj: torch.Tensor, top_left: torch.Tensor, ramps: torch.Tensor | None,
                         propagator: torch.Tensor | None, detector: Detector, weights: torch.Tensor | None = None,
                         background: torch.Tensor | None = None, exit_ramps: torch.Tensor | None = None
                         ) -> torch.Tensor:
    """Intensities (B, K, K), unshifted layout, summed over all mode pairs, of probe modes (P, K, K) (or
    (B, P, K, K), a probe per position) at windows of the object (O, S, Ny, Nx) with corners ``top_left`` (B, 2),
    each probe shifted by its sub-pixel rest (Fourier multipliers ``ramps`` (B, K, K), or None), each exit wave
    times its position's ``exit_ramps`` (B, K, K) (the descan, ``Multislice``) when given, detected by
    ``detector`` (near field: the image shifted back by the same rest; its blur), times the ``weights`` (B,) plus
    the ``background`` (K, K), both optional. Autograd."""
    probes = ProbeShift(ramps).forward(probe)
    waves = Multislice(propagator, exit_ramps).forward(probes, extract_patches(obj, top_left, probe.shape[-1]))
    detect = Detect(detector, ramps)
    return detector_response(detect.intensity(detect.forward(waves)), weights, background)
