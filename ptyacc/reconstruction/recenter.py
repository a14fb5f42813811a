"""Constraints that keep the reconstruction in place (``model.recenter``), each run after every
iteration, identically on every process (from the same parameters, with the same operations):

- ``ProbeCentring`` (the model's gauge): the probe and the object can drift
  together (a probe moved by d in its window and an object moved by d predict the same patterns).
  The probe's centre of mass is moved back to the window centre by a Fourier shift, and every
  position by the same d against the object, so that each exit wave is the old one shifted by
  whole pixels at most (the sub-pixel part is carried by the probe shift the positions already
  have): in the far field the predicted patterns do not change. The object's placement in the
  data's frame follows (``PtychoModel.scan_shift_px``, saved in ``origin_A``).
- ``ProbeMask``: the probe's spectrum zeroed beyond an angle.
- ``ObjectDepthCentring``: a multislice object moved by whole slices toward its middle, the
  probe's focus with it.
"""

from __future__ import annotations

import torch

from ptyacc.physics import fourier_shift, fresnel_propagator, spatial_frequencies
from ptyacc.quantities.model import PtychoModel


def probe_centre_offset_px(probe: torch.Tensor) -> torch.Tensor:
    """(2,) (y, x) px: the centre of mass of the summed intensity of probe modes (P, K, K) minus the window centre (K/2, K/2)."""
    k = probe.shape[-1]
    intensity = (probe.real.square() + probe.imag.square()).sum(0).double()
    coordinates = torch.arange(k, dtype=torch.float64, device=probe.device)
    total = intensity.sum().clamp_min(1e-300)
    centre_y = (intensity.sum(1) * coordinates).sum() / total
    centre_x = (intensity.sum(0) * coordinates).sum() / total
    return torch.stack([centre_y, centre_x]) - k // 2


MIN_SHIFT_PX = 1e-3  # smaller drifts are left alone: moving them would only add rounding


class ProbeCentring:
    """The centre of mass of the probe's first ``modes`` modes (None: all) moved back to
    ``target_px`` (2,) (y, x) px from the window centre (zero: the centre;
    ``model.recenter.hold_probe``: where the initial probe's first mode has it), the positions
    with it (module docstring)."""

    def __init__(self, model: PtychoModel, target_px: torch.Tensor | None = None, modes: int | None = None,
                 hold: bool = False) -> None:
        """``hold``: the target is where the probe's first ``modes`` have their centre now."""
        self.model, self.modes = model, modes
        if hold:
            probe = torch.view_as_complex(model.probe.detach()) * model.probe_scale  # ``complex_probe``, inline
            target_px = probe_centre_offset_px(probe[:modes])
        self.target_px = torch.zeros(2, dtype=torch.float64) if target_px is None else target_px.double().cpu()

    @torch.no_grad()
    def __call__(self) -> None:
        model = self.model
        probe = torch.view_as_complex(model.probe) * model.probe_scale  # ``complex_probe``, inline
        offset = (probe_centre_offset_px(probe[:self.modes]).cpu() - self.target_px).to(torch.float32).to(probe.device)
        if float(offset.abs().max()) < MIN_SHIFT_PX:
            return
        centred = fourier_shift(probe[None], -offset[None])[0]  # centred(r) = probe(r + offset)
        model.probe.copy_(torch.view_as_real(centred / model.probe_scale))
        model.move_scan(offset)


class ProbeMask:
    """The probe modes' spectra zeroed beyond ``angle_mrad`` (|k| lambda > angle), in place."""

    def __init__(self, model: PtychoModel, dx_A: float, wavelength_A: float, angle_mrad: float) -> None:
        k = spatial_frequencies(model.window, dx_A, device=model.probe.device)
        angle = torch.sqrt(k[:, None] ** 2 + k[None, :] ** 2) * wavelength_A * 1e3
        self.model, self.keep = model, (angle <= angle_mrad).to(torch.complex64)

    @torch.no_grad()
    def __call__(self) -> None:
        probe = torch.view_as_complex(self.model.probe)
        probe.copy_(torch.fft.ifft2(torch.fft.fft2(probe) * self.keep))


class ObjectDepthCentring:
    """A multislice object (O, S, Ny, Nx) whose depth centre of mass, sum_s s w_s / sum_s w_s
    with w_s the slice's summed |phase| (mode 0), lies n >= 1 whole slices from the middle
    (S - 1) / 2 is moved by n slices toward the middle: slice s becomes slice s - n, the
    emptied slices flat (transmission 1); the probe is propagated by n slices, so that it meets
    the moved object where it met the old one (exact when the slices dropped were flat and the
    tilt, if any, is one for all positions)."""

    def __init__(self, model: PtychoModel, dx_A: float, wavelength_A: float, thickness_A: float) -> None:
        self.model = model
        self.dx_A, self.wavelength_A, self.thickness_A = dx_A, wavelength_A, thickness_A

    @torch.no_grad()
    def __call__(self) -> None:
        model = self.model
        obj = model.complex_object()  # (O, S, Ny, Nx)
        slices = obj.shape[1]
        weight = obj[0].angle().abs().double().sum((-2, -1))  # (S,)
        depth = (weight * torch.arange(slices, dtype=torch.float64, device=weight.device)).sum()
        steps = int(torch.round(depth / weight.sum().clamp_min(1e-300) - (slices - 1) / 2))
        if steps == 0 or abs(steps) >= slices:
            return
        moved = torch.ones_like(obj)
        if steps > 0:
            moved[:, :slices - steps] = obj[:, steps:]
        else:
            moved[:, -steps:] = obj[:, :slices + steps]
        obj.copy_(moved)
        # the object now begins n slices deeper (n > 0: its first n slices were dropped):
        # the probe must arrive n slices further along the beam (n < 0: back), through the
        # model's own propagator when it has one (tilt, refined thickness; the common tilt)
        if model.propagation is not None:
            one = model.propagation.common()
            kernel = (one if steps > 0 else one.conj()) ** abs(steps)
        else:
            kernel = fresnel_propagator(model.window, self.dx_A, self.wavelength_A, steps * self.thickness_A)
        probe = torch.view_as_complex(model.probe)
        probe.copy_(torch.fft.ifft2(torch.fft.fft2(probe) * kernel.to(probe.device)))


def attach_recentring(groups: list, config, model: PtychoModel, dx_A: float, wavelength_A: float) -> list[str]:
    """Run the constraints ``config.model.recenter`` asks for after every iteration, after the
    probe group's own projection (they change the probe; depth centring the object too). Returns
    lines for run.log saying what was chosen from the data (the held probe centre)."""
    recenter = config.model.recenter
    steps, said = [], []
    if recenter.probe_mask_mrad is not None:
        steps.append(ProbeMask(model, dx_A, wavelength_A, recenter.probe_mask_mrad))
    if recenter.object_z and config.model.slices > 1:
        steps.append(ObjectDepthCentring(model, dx_A, wavelength_A, config.model.slice_thickness_A))
    if recenter.probe:
        steps.append(ProbeCentring(model))
    elif recenter.hold_probe and model.moving_buffers:  # movable exactly when the hold acts (initial.holds_probe)
        steps.append(ProbeCentring(model, modes=1, hold=True))
        start = steps[-1].target_px
        said.append(f"model.recenter.hold_probe: the probe's centre of mass (first mode) held where the initial probe has it, "
                    f"({float(start[0]):+.3f}, {float(start[1]):+.3f}) px (y, x) from the window centre")
    if steps:
        next(g for g in groups if g.name == "probe").constraints.extend(steps)
    return said
