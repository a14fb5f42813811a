"""Pure tensor functions of the forward model: no I/O, no logging, no config objects.

Conventions (shared by every function here):
- Arrays are (..., y, x): y along rows, x along columns.
- Fourier-space arrays use the unshifted FFT layout (zero frequency at [0, 0]); spatial
  frequencies come from ``torch.fft.fftfreq``. Measured patterns, which are stored with zero
  frequency at the centre, are ``ifftshift``-ed once when loaded, so no fftshift runs per step.
- Real-space probes are centred: the probe centre sits at pixel (K/2, K/2).
- A wave e(r) gives the far-field intensity |fft2(e, norm="ortho")|^2 (numpy's sign convention:
  exp(-2 pi i k.r) in the forward transform).
- Aberration phase chi(k) in Krivanek notation; the probe is A(k) exp(-i chi(k)); defocus = -C10,
  positive defocus = underfocus, i.e. the probe's focus lies below the entrance surface.
- The object transmits t(r) = amplitude(r) exp(+i phase(r)).
- A beam tilted against the crystal ([y, x] mrad, beam's direction relative to the zone axis)
  enters through the propagator between slices, ``tilted_propagator`` (tilt.py, which states
  the convention).

The forward chain is four stages, each an object with its forward and its adjoint (or vjp),
and the data fidelity at its end (the detector's response, the losses and their gradients), all
in chain.py: ``ProbeShift`` -> ``Patches`` -> ``Multislice`` -> ``Detect`` -> fidelity.
``detected_intensities`` (prediction.py) runs their forwards for prediction and simulation;
``ptycho_loss`` (fused.py) runs forwards and adjoints chunk by chunk for the training loss and
its gradient, and ``far_field_loss`` (fused.py) is its autograd reference.
"""

from ptyacc.physics.aperture import aperture, measured_edge
from ptyacc.physics.chain import (
    LOSS_KINDS,
    Detect,
    Detector,
    Multislice,
    Patches,
    ProbeShift,
    detector_response,
    extract_patches,
    intensity_loss_terms,
    loss_from_intensities,
    poisson_nll,
    summed_intensity,
    transmission,
)
from ptyacc.physics.deviance import deviance_sums
from ptyacc.physics.fused import far_field_loss, ptycho_loss
from ptyacc.physics.prediction import detected_intensities, exit_waves, far_field_intensities, multislice_intensities
from ptyacc.physics.probe import aberration_phase, mixed_state_probe, stem_probe
from ptyacc.physics.propagation import fourier_shift, fresnel_propagator, shift_ramp, shift_ramps_1d, spatial_frequencies
from ptyacc.physics.tilt import tilted_propagator
from ptyacc.physics.wavelength import electron_wavelength_A, wavelength_A, xray_wavelength_A

__all__ = [
    "LOSS_KINDS", "Detect", "Detector", "Multislice", "Patches", "ProbeShift", "aberration_phase", "aperture",
    "detected_intensities", "detector_response", "deviance_sums", "electron_wavelength_A", "exit_waves",
    "extract_patches", "far_field_intensities", "far_field_loss", "fourier_shift", "fresnel_propagator",
    "intensity_loss_terms", "loss_from_intensities", "measured_edge", "mixed_state_probe", "multislice_intensities",
    "poisson_nll", "ptycho_loss", "shift_ramp", "shift_ramps_1d", "spatial_frequencies", "stem_probe", "summed_intensity",
    "tilted_propagator", "transmission", "wavelength_A", "xray_wavelength_A",
]
