"""The forward chain, probe shift -> object patches -> multislice -> detection: its forward for
prediction, simulation and the saved mean pattern. The training loss ``ptycho_loss`` runs the
same stages' forward and backward in chunks."""

import torch

from ptyacc.physics.detect import Detect, Detector, detector_response, summed_intensity
from ptyacc.physics.multislice import Multislice
from ptyacc.physics.patches import extract_patches
from ptyacc.physics.shift import ProbeShift


def detected_intensities(probe: torch.Tensor, obj: torch.Tensor, top_left: torch.Tensor, ramps: torch.Tensor | None,
                         propagator: torch.Tensor | None, detector: Detector, weights: torch.Tensor | None = None,
                         background: torch.Tensor | None = None) -> torch.Tensor:
    """Intensities (B, K, K), unshifted layout, summed over all mode pairs, of probe modes
    (P, K, K) at windows of the object (O, S, Ny, Nx) with corners ``top_left`` (B, 2), each
    probe shifted by its sub-pixel rest (Fourier multipliers ``ramps`` (B, K, K), or None) and
    detected by ``detector`` (near field: the image shifted back by the same rest), times the
    optional ``weights`` (B,) plus the optional ``background`` (K, K). Differentiable by autograd."""
    probes = ProbeShift(ramps).forward(probe)
    waves = Multislice(propagator).forward(probes, extract_patches(obj, top_left, probe.shape[-1]))
    return detector_response(summed_intensity(Detect(detector, ramps).forward(waves)), weights, background)
