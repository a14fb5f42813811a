"""The propagator between multislice slices for a beam tilted against the crystal.

Convention (DESIGN.md, "Tilt"; a public contract): the tilt ``[y, x]`` in mrad is the beam's
direction relative to the crystal's zone axis. A beam tilted by +t along y travels toward
increasing y: the model works in the beam's frame, where the probe's carrier wave is factored
out, so the direct beam stays at the pattern centre, and from slice to slice the wave walks by
dz tan(t) across the object. The zone axis then appears at ky = -t / lambda in the pattern.

In the beam's frame the paraxial propagator of a wave with carrier q = tan(t) / lambda is
exp(-i pi lambda dz |q + k|^2) with the carrier's own phase dropped: the Fresnel term
exp(-i pi lambda dz |k|^2) times the shift exp(-2 pi i dz tan(t) . k), which moves the wave by
dz tan(t) (``shift_ramp``'s sign).
"""

import math

import torch

MRAD = 1e-3  # radians per mrad


def tilted_propagator(ky_invA: torch.Tensor, kx_invA: torch.Tensor, wavelength_A: float, thickness_A: torch.Tensor,
                      tilt_mrad: torch.Tensor) -> torch.Tensor:
    """Propagator (K, K), or (B, K, K) for tilts (B, 2), complex64, unshifted layout, over one
    slice of ``thickness_A`` (a 0-d tensor, Å) for a beam tilted by ``tilt_mrad`` (2,) or (B, 2)
    [y, x] mrad (module docstring); ``ky_invA``, ``kx_invA`` (K,) the spatial frequencies
    (``spatial_frequencies``, 1/Å). Differentiable in the thickness and the tilt; computed in
    float64 (the Fresnel phase reaches tens of radians at the window's edge)."""
    ky, kx = ky_invA.double(), kx_invA.double()
    dz = thickness_A.double()
    fresnel = -math.pi * wavelength_A * dz * (ky[:, None] ** 2 + kx[None, :] ** 2)  # (K, K)
    slope = torch.tan(tilt_mrad.double() * MRAD)  # (..., 2)
    walk = slope[..., 0, None, None] * ky[:, None] + slope[..., 1, None, None] * kx[None, :]  # (..., K, K)
    phase = fresnel - 2.0 * math.pi * dz * walk
    return torch.polar(torch.ones_like(phase), phase).to(torch.complex64)

