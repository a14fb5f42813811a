"""One change of focus for every probe mode, refined in the run (``optim.start.probe_focus``).

A probe started at a defocus some per cent off is refined pixel by pixel, and a change of focus, which moves
every pixel of its spectrum together by a phase that grows with q^2, is one of the directions such steps
take slowest: over a run of ordinary length the probe keeps most of the error it started with (on one of the
calibration matrix's fresh files its focus moved from 0.92 to 0.96 of the truth in 30 iterations, and there the
object was a few hundredths less like the truth than in the run told the defocus). Here the
modes (P, K, K) are propagated by ``change_A`` Å before every step, a Fresnel propagation (exact at any
change: ``probe_variation.refocused``), and the change is one number stepped by Adam (``optim.lr.probe_focus``
Å per step). After every iteration the change is put into the probe modes themselves and starts again
from zero (``fold``), so the probe's own steps and this one act on the same modes; ``total_A`` keeps the
sum, which results.h5 keeps as the attribute ``probe_focus_change_A`` and run.log turns into the
``experiment.defocus_A`` that starts a run there (``reconstruction.engine``); for X-rays into the
``experiment.focus_to_sample_m`` (the change moves the sample's place past the focus by minus as much: a probe of
defocus f is the focused one advanced by -f), from the attribute ``probe_focus_to_sample_start_m``.

The step (``optim.lr.probe_focus: auto``): 1 Å for electrons, where a defocus of 100-200 Å is read 5-15 % off; for
X-rays, whose probe's depth of focus is a hundred thousand times longer (the sample millimetres from a zone plate's
focus, read up to 20 % off by the far field's side trials), FOCUS_STEP_SHARE of ``focus_unit``, the change of focus
that alters the initial probe by its own norm.

One scan only: the probes of several scans (``scans.py``) are not refocused.

The two-fold astigmatism (C12a, C12b) is refined the same way (``optim.start.probe_astigmatism``,
``ProbeAstigmatism``): two numbers that multiply every mode's spectrum by exp(-i pi lambda (C12a (kx^2 - ky^2)
+ 2 C12b kx ky)) (``physics.probe.aberration_phase``'s C12 terms), folded after every iteration. A probe's pixels
pick a C12 up as slowly as a focus: on the calibration matrix's wide draw the parallax, which measures it, cannot
read it at steps coarser than the bright-field images' detail, and runs told it came 0.02-0.05 nearer the truth.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from ptyacc.errors import ConfigError
from ptyacc.optim.groups import ParameterGroup
from ptyacc.physics.propagation import spatial_frequencies
from ptyacc.quantities.probe_variation import focus_unit, refocused
from ptyacc.quantities.registry import BuildContext, Quantity, register


class ProbeFocus(Quantity):
    """A change of focus shared by every probe mode (module docstring).

    Parameter: change_A () float32, Å since the last ``fold``. Buffer: total_A () float64, Å folded so far.
    ``step_A``: Adam's step (``optim.lr.probe_focus``, auto resolved); ``focus_to_sample_m``: the X-ray far field's
    sample's place past the focus the run started at, NaN where not known (a probe from a file, or advanced by the
    scan's overlap), None for electrons and the near field."""

    name = "probe_focus"

    def __init__(self, dx_A: float, wavelength_A: float, step_A: float = 1.0,
                 focus_to_sample_m: float | None = None) -> None:
        super().__init__()
        self.change_A = nn.Parameter(torch.zeros(()))
        self.register_buffer("total_A", torch.zeros((), dtype=torch.float64))
        self.dx_A, self.wavelength_A, self.step_A = float(dx_A), float(wavelength_A), float(step_A)
        self.focus_to_sample_m = focus_to_sample_m

    def probes(self, probe: torch.Tensor, indices: torch.Tensor, probe_scale: torch.Tensor) -> torch.Tensor:
        """The probe modes (P, K, K) complex, each propagated by ``change_A`` Å."""
        return refocused(probe, self.change_A[None], self.dx_A, self.wavelength_A)[0]

    @torch.no_grad()
    def fold(self, modes: torch.Tensor) -> None:
        """Put the change into ``modes`` (P, K, K, 2), the model's probe parameter, and start it again from zero."""
        fold_change(modes, self.change_A, self.total_A,
                    lambda waves, change: refocused(waves, change[None], self.dx_A, self.wavelength_A)[0])

    def groups(self, config, model, priors) -> list[ParameterGroup]:
        return [ParameterGroup("probe_focus", [self.change_A], self.step_A,
                               config.optim.start.probe_focus, after_iteration=lambda: self.fold(model.probe))]

    def attributes(self, model) -> dict[str, float]:
        """results.h5's attribute ``probe_focus_change_A``: the change of focus the run made (Å, added to the
        defocus it started at), folded or not; for X-rays ``probe_focus_to_sample_start_m``, the sample's place past
        the focus it started at (NaN: not known)."""
        start = {} if self.focus_to_sample_m is None else {"probe_focus_to_sample_start_m": self.focus_to_sample_m}
        return {"probe_focus_change_A": float(self.total_A) + float(self.change_A.detach()), **start}


@register
def probe_focus(config, model, context: BuildContext) -> ProbeFocus | None:
    """The refined change of focus, where ``optim.start.probe_focus`` is set."""
    if config.optim.start.probe_focus is None:
        return None
    if context.scans:
        raise ConfigError("optim.start.probe_focus: one scan only; the probes of several scans (scans:) are not "
                          "refocused: set it to null")
    dx_A, wavelength_A = context.geometry.dx_A, context.data.wavelength_A
    experiment = config.experiment
    step_A = config.optim.lr.probe_focus
    if step_A == "auto":
        step_A, how = focus_step_A(experiment.radiation, model, dx_A, wavelength_A)
        context.said.append(f"optim.lr.probe_focus: {step_A:.4g} A per step (auto: {how})")
    place = experiment.focus_to_sample_m  # given, or found by experiment.sample_side: auto's trials
    far_field = experiment.radiation == "xray" and experiment.geometry == "far_field"
    start_m = (None if not far_field else  # near field: the place sets the holograms' magnification, not the probe
               float(place) if isinstance(place, int | float) and config.model.probe_init is None else math.nan)
    return ProbeFocus(dx_A, wavelength_A, step_A, start_m)


ELECTRON_FOCUS_STEP_A = 1.0  # optim.lr.probe_focus: auto for electrons, Å per step: on ten calibration matrix files
# (defoci of 100-200 Å read 5-15 % off) it moved every one towards the truth within 20-30 iterations
FOCUS_STEP_SHARE = 0.03  # optim.lr.probe_focus: auto for X-rays, of focus_unit (the initial probe's; the share 1 Å is
# of an 80 kV, 25 mrad electron probe's 36 Å): on four simulated far-field files whose side's trials found the sample
# 10-20 % off, 0.011 and 0.029 of it (6e4 and 1.6e5 Å at 5.6e6) brought init's deviance from 1.3-3 times told's to
# within 9 % of it (0.029 a little nearer on three), and left told's runs as they were


def focus_step_A(radiation: str, model, dx_A: float, wavelength_A: float) -> tuple[float, str]:
    """``optim.lr.probe_focus: auto``: Adam's step (Å) of the change of focus for ``model``'s first probe mode, and how
    it was chosen (module docstring)."""
    if radiation != "xray":
        return ELECTRON_FOCUS_STEP_A, "electrons"
    unit = focus_unit(model.complex_probe()[0].detach(), dx_A, wavelength_A)
    return FOCUS_STEP_SHARE * unit, (f"{FOCUS_STEP_SHARE:g} of {unit:.4g} A ({unit * 1e-7:.3g} mm), the change of "
                                     "focus that alters the initial probe by its own norm")


def fold_change(modes: torch.Tensor, change: torch.Tensor, total: torch.Tensor, moved) -> None:
    """Put ``change`` (a parameter) into ``modes`` (P, K, K, 2), the model's probe parameter, by ``moved(waves,
    change)`` in float64, add it to ``total`` and start it again from zero; nothing where it is zero."""
    if not bool(change.any()):
        return
    waves = moved(torch.view_as_complex(modes.double().contiguous()), change.detach().double())
    modes.copy_(torch.view_as_real(waves).to(modes.dtype))
    total.add_(change.detach().double())
    change.detach().zero_()


@functools.lru_cache(maxsize=16)
def _astigmatism_terms(n: int, dx_A: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(kx^2 - ky^2, 2 kx ky) (n, n) float64 on the unshifted grid of pixel ``dx_A``, made once per grid and shared
    (callers must not write into them)."""
    k = spatial_frequencies(n, dx_A, device=device)
    ky, kx = k[:, None], k[None, :]
    return kx ** 2 - ky ** 2, 2.0 * kx * ky


def astigmatic(wave: torch.Tensor, c12_A: torch.Tensor, dx_A: float, wavelength_A: float) -> torch.Tensor:
    """(..., K, K) complex: the modes ``wave`` (pixel ``dx_A``) with (C12a, C12b) = ``c12_A`` (2,) Å more two-fold
    astigmatism: their spectra times exp(-i pi lambda (C12a (kx^2 - ky^2) + 2 C12b kx ky)), as ``stem_probe`` makes
    a probe's (exact at any change)."""
    cos_term, sin_term = (term.to(wave.real.dtype) for term in _astigmatism_terms(wave.shape[-1], float(dx_A),
                                                                                   wave.device))
    c12 = c12_A.to(cos_term.dtype)
    phase = -math.pi * wavelength_A * (c12[0] * cos_term + c12[1] * sin_term)
    return torch.fft.ifft2(torch.fft.fft2(wave) * torch.polar(torch.ones_like(phase), phase))


class ProbeAstigmatism(Quantity):
    """A change of two-fold astigmatism shared by every probe mode (module docstring).

    Parameter: change_A (2,) float32, (C12a, C12b) Å since the last ``fold``. Buffers: total_A (2,) float64, Å
    folded so far; start_A (2,) float64, the C12 the run's probe was made with."""

    name = "probe_astigmatism"

    def __init__(self, dx_A: float, wavelength_A: float, start_A: tuple[float, float] = (0.0, 0.0)) -> None:
        super().__init__()
        self.change_A = nn.Parameter(torch.zeros(2))
        self.register_buffer("total_A", torch.zeros(2, dtype=torch.float64))
        self.register_buffer("start_A", torch.tensor(start_A, dtype=torch.float64))
        self.dx_A, self.wavelength_A = float(dx_A), float(wavelength_A)

    def probes(self, probe: torch.Tensor, indices: torch.Tensor, probe_scale: torch.Tensor) -> torch.Tensor:
        """The probe modes (P, K, K) complex, each with ``change_A`` more astigmatism."""
        return astigmatic(probe, self.change_A, self.dx_A, self.wavelength_A)

    @torch.no_grad()
    def fold(self, modes: torch.Tensor) -> None:
        """Put the change into ``modes`` (P, K, K, 2), the model's probe parameter, and start it again from zero."""
        fold_change(modes, self.change_A, self.total_A,
                    lambda waves, change: astigmatic(waves, change, self.dx_A, self.wavelength_A))

    def groups(self, config, model, priors) -> list[ParameterGroup]:
        return [ParameterGroup("probe_astigmatism", [self.change_A], config.optim.lr.probe_astigmatism,
                               config.optim.start.probe_astigmatism, after_iteration=lambda: self.fold(model.probe))]

    def attributes(self, model) -> dict[str, float]:
        """results.h5's attributes ``probe_c12a_change_A``, ``probe_c12b_change_A`` (the change the run made, folded
        or not) and ``probe_c12a_start_A``, ``probe_c12b_start_A`` (the C12 it started at)."""
        change = self.total_A + self.change_A.detach().double()
        return {"probe_c12a_change_A": float(change[0]), "probe_c12b_change_A": float(change[1]),
                "probe_c12a_start_A": float(self.start_A[0]), "probe_c12b_start_A": float(self.start_A[1])}


@register
def probe_astigmatism(config, model, context: BuildContext) -> ProbeAstigmatism | None:
    """The refined change of two-fold astigmatism, where ``optim.start.probe_astigmatism`` is set."""
    if config.optim.start.probe_astigmatism is None:
        return None
    if context.scans:
        raise ConfigError("optim.start.probe_astigmatism: one scan only; the probes of several scans (scans:) are not "
                          "refined: set it to null")
    aberrations = getattr(context.data, "aberrations", None) or {}
    return ProbeAstigmatism(context.geometry.dx_A, context.data.wavelength_A,
                            (float(aberrations.get("C12a", 0.0)), float(aberrations.get("C12b", 0.0))))
