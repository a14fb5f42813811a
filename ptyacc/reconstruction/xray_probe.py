"""The initial probe of X-ray far-field data, and a probe read from a file (``model.probe_init``).

Without a file, the probe is a pupil advanced from the focus to the sample by a defocus:
- the pupil: the optics' (``experiment.optics``: a zone plate's or a KB's numerical aperture, the
  central stop) where given, else the square root of the mean pattern (the beam's cone as the
  detector sees it, a disk or an annulus);
- the axis: the centre of the beam's cone in the mean pattern (``mean_axis_px``), about which the pupil (the
  optics') is centred and the defocus advances it: a beam tilted against the detector, its cone off the middle
  pixel, would otherwise start beside its place;
- the defocus: ``experiment.focus_to_sample_m`` where given, else the one that makes the beam
  (2 |defocus| NA across) overlap ``ASSUMED_OVERLAP`` of its diameter at the scan's nearest-neighbour
  spacing, on the side of the focus ``experiment.sample_side`` says (``auto``: the side the run's trials
  chose, ``autocalibration._sample_place``). Ptychography scans are laid out for 60-80%;
  the probe's refinement corrects the rest (a zone-plate case started 25% short of or 50% beyond
  its true defocus reached NCC 0.995, 50% short 0.96), but not the sign: an upstream sample needs
  focus_to_sample_m negative or sample_side upstream (started with the wrong sign the case reached NCC 0.10).
run.log says which."""

from __future__ import annotations

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data import PtychoData
from ptyacc.data.descan import beam_axis_px
from ptyacc.data.probe_file import read_probe
from ptyacc.errors import ConfigError
from ptyacc.physics import fresnel_propagator
from ptyacc.physics.footprint import ASSUMED_OVERLAP, cone_numerical_aperture, overlap_defocus_A
from ptyacc.physics.probe import optics_pupil, pupil_probe

WIDEST = 0.75  # of the window: a wider beam needed for that overlap means the scan is too sparse for it


def probe_from_file(config: Config, data: PtychoData) -> tuple[torch.Tensor, str]:
    """(M, K, K) complex64 modes of ``model.probe_init`` at the window's pixel, and run.log's line."""
    init = config.model.probe_init
    found = read_probe(config.resolve_input(init.path), init.key)
    pixel_m = init.pixel_m or found.pixel_m
    window_m = data.dx_A * 1e-10
    modes, pixel_note = resampled(found.modes, 1.0 if pixel_m is None else pixel_m / window_m, data.detector_px)
    source = "given" if init.pixel_m else "from the file" if found.pixel_m else "taken as the window's"
    return modes, (f"model.probe_init: {found.where}, {len(found.modes)} mode(s) of {found.modes.shape[-2]} x "
                   f"{found.modes.shape[-1]} px, pixel {source}{'' if pixel_m is None else f' ({pixel_m:.4g} m)'}"
                   f"{pixel_note}; its power scaled to the data")


def resampled(modes: np.ndarray, pixel_ratio: float, k: int) -> tuple[torch.Tensor, str]:
    """``modes`` (M, Ky, Kx) of pixel ``pixel_ratio`` x the window's, resampled to the window's pixel by
    Fourier interpolation (the centred spectrum cropped or zero-padded to round(K' pixel_ratio) px,
    exact for a band-limited probe within both grids' Nyquist frequency), then cropped or
    zero-padded in real space about the centre to ``k`` x ``k``. The resampled pixel is off by at
    most half a pixel over the probe's width: the note says by how much when it is not exact."""
    field = torch.from_numpy(modes)
    note = ""
    if abs(pixel_ratio - 1) > 1e-9:
        sizes = [max(1, round(n * pixel_ratio)) for n in field.shape[-2:]]
        spectrum = torch.fft.fftshift(torch.fft.fft2(torch.fft.ifftshift(field, dim=(-2, -1))), dim=(-2, -1))
        spectrum = _centred(spectrum, sizes)
        field = torch.fft.fftshift(torch.fft.ifft2(torch.fft.ifftshift(spectrum, dim=(-2, -1))), dim=(-2, -1))
        error = max(abs(n * pixel_ratio / s - 1) for n, s in zip(modes.shape[-2:], sizes, strict=True))
        note = f", resampled by Fourier interpolation to {sizes[0]} x {sizes[1]} px (pixel within {error:.2g})"
    return _centred(field, [k, k]).to(torch.complex64), note


def _centred(field: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """``field`` (..., ny, nx) cropped or zero-padded to ``sizes``, pixel (ny // 2, nx // 2) kept at the centre."""
    out = torch.zeros(*field.shape[:-2], *sizes, dtype=field.dtype)
    spans = []
    for n, m in zip(field.shape[-2:], sizes, strict=True):
        shift = m // 2 - n // 2  # where source pixel 0 lands
        lo, hi = max(0, -shift), min(n, m - shift)
        spans.append((slice(lo, hi), slice(lo + shift, hi + shift)))
    (sy, ty), (sx, tx) = spans
    out[..., ty, tx] = field[..., sy, sx]
    return out


def far_field_probe(config: Config, data: PtychoData, mean_pattern: torch.Tensor, said: list[str]) -> torch.Tensor:
    """(K, K) the initial probe of X-ray far-field data (the module docstring), what it chose in ``said``."""
    k, optics = data.detector_px, config.experiment.optics
    if data.mask is not None:  # a hot pixel left out of the loss stays out of the cone
        mean_pattern = mean_pattern * data.mask
    axis_px = mean_axis_px(mean_pattern, data.mask)
    axis_said = f"({axis_px[0]:+.2f}, {axis_px[1]:+.2f}) px (y, x) from the zero frequency"
    if optics is not None:
        na = optics.numerical_aperture(data.wavelength_A * 1e-10)
        pupil = optics_pupil(k, data.dk_invA, data.wavelength_A, na, optics.central_stop_fraction, axis_px)
        pupil_said = (f"the optics' pupil (numerical aperture {na:.4g}, central stop {optics.central_stop_fraction:g}) "
                      f"about the beam's cone's centre in the mean pattern, {axis_said}, and the defocus about it")
    else:
        pupil = torch.sqrt(mean_pattern.clamp(min=0).to(torch.float64))
        na = cone_numerical_aperture(mean_pattern, data.dk_invA, data.wavelength_A, axis_px)
        pupil_said = (f"the mean pattern's amplitude (its bright cone about {na:.3g} in numerical aperture, its centre "
                      f"{axis_said}: the defocus about it)")
    said += cone_cut_warning(axis_px, na / (data.wavelength_A * data.dk_invA) + max(map(abs, axis_px)), k)
    given = config.experiment.focus_to_sample_m
    if given is not None:
        defocus_A, defocus_said = given * 1e10, "experiment.focus_to_sample_m"
    else:
        distance_A, diameter_A, spacing_A = overlap_defocus_A(data.positions_A, na)
        side = config.experiment.sample_side
        defocus_A = distance_A * (-1.0 if side == "upstream" else 1.0)
        defocus_said = (f"so that the beam, {diameter_A * 1e-4:.3g} µm across, overlaps {ASSUMED_OVERLAP:.0%} at the "
                        f"nearest-neighbour spacing {spacing_A * 1e-4:.3g} µm; the sample "
                        f"{'upstream' if side == 'upstream' else 'downstream'} of the focus "
                        f"(experiment.sample_side: {side}); experiment.focus_to_sample_m sets it")
        if diameter_A > WIDEST * k * data.dx_A:
            said.append(f"warning: scan overlap: at the nearest-neighbour spacing {spacing_A / data.dx_A:.3g} px a beam "
                        f"that overlaps {ASSUMED_OVERLAP:.0%} is {diameter_A / data.dx_A:.3g} px across, more than "
                        f"{WIDEST:.0%} of the {k} px window: the probes barely overlap, or the pixel size is wrong; "
                        "check the scan step and the detector geometry, or give experiment.optics")
    said.append(f"initial probe (X-ray far field): {pupil_said}, advanced by a defocus of {defocus_A * 1e-4:.4g} µm "
                f"({defocus_said})")
    return pupil_probe(pupil, fresnel_propagator(k, data.dx_A, data.wavelength_A, defocus_A, torch.complex128,
                                                 axis_px))


def cone_cut_warning(axis_px: tuple[float, float], reach_px: float, k: int) -> list[str]:
    """The warning where the beam's cone, centred ``axis_px`` (y, x) frequency pixels from the detector's middle pixel,
    reaches ``reach_px`` from it, to the edge of the ``k``-pixel window or past it: the model's frequencies lie about
    the middle pixel, so the side the cone leans to loses the probe's own frequencies, and the sample's scattering
    with them, which the other side keeps; none for a cone a pixel or less off the middle (its cut is even)."""
    if max(abs(axis_px[0]), abs(axis_px[1])) <= 1.0 or reach_px < k / 2 - 1:
        return []
    return [f"warning: the beam's cone lies ({axis_px[0]:+.1f}, {axis_px[1]:+.1f}) px (y, x) off the detector's "
            f"middle pixel and reaches {reach_px:.3g} px from it, to the {k} px window's edge on that side, where the "
            "probe's frequencies are lost: crop the patterns about the cone's centre (data.transform.crop and "
            "crop_offset)"]


def mean_axis_px(mean_pattern: torch.Tensor, mask: torch.Tensor | None) -> tuple[float, float]:
    """The beam's axis (``descan.beam_axis_px``) in the mean pattern (K, K, model layout; ``mask`` 1 where a pixel
    counts, or None). A cone off the detector's centre is a beam tilted against it; advanced about the zero frequency
    instead, the initial probe sits lambda z q to the side (1.1 px for a cone 2.4 px off at 2.5 mm, 8 keV), where the
    probe's hold (``model.recenter.hold_probe``) keeps it, and the object comes out as far from the positions' frame."""
    return beam_axis_px(mean_pattern.detach().to(torch.float64).cpu().numpy(),
                        None if mask is None else mask.detach().cpu().numpy() > 0)


def check_modes(modes: torch.Tensor, wanted: int) -> None:
    """A probe file's modes must be one (split into ``model.probe_modes``) or as many as asked for."""
    if len(modes) not in (1, wanted):
        raise ConfigError(f"model.probe_init: the file holds {len(modes)} probe modes, model.probe_modes is {wanted}: "
                          "set probe_modes to match, or give one mode to split")
