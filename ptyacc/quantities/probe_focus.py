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
``experiment.defocus_A`` that starts a run there (``reconstruction.engine``).

One scan only: the probes of several scans (``scans.py``) are not refocused.
"""

from __future__ import annotations

import torch
from torch import nn

from ptyacc.errors import ConfigError
from ptyacc.optim.groups import ParameterGroup
from ptyacc.quantities.probe_variation import refocused
from ptyacc.quantities.registry import BuildContext, Quantity, register


class ProbeFocus(Quantity):
    """A change of focus shared by every probe mode (module docstring).

    Parameter: change_A () float32, Å since the last ``fold``. Buffer: total_A () float64, Å folded so far."""

    name = "probe_focus"

    def __init__(self, dx_A: float, wavelength_A: float) -> None:
        super().__init__()
        self.change_A = nn.Parameter(torch.zeros(()))
        self.register_buffer("total_A", torch.zeros((), dtype=torch.float64))
        self.dx_A, self.wavelength_A = float(dx_A), float(wavelength_A)

    def probes(self, probe: torch.Tensor, indices: torch.Tensor, probe_scale: torch.Tensor) -> torch.Tensor:
        """The probe modes (P, K, K) complex, each propagated by ``change_A`` Å."""
        return refocused(probe, self.change_A[None], self.dx_A, self.wavelength_A)[0]

    @torch.no_grad()
    def fold(self, modes: torch.Tensor) -> None:
        """Put the change into ``modes`` (P, K, K, 2), the model's probe parameter, and start it again from zero."""
        if float(self.change_A) == 0.0:
            return
        waves = torch.view_as_complex(modes.double().contiguous())
        waves = refocused(waves, self.change_A.double()[None], self.dx_A, self.wavelength_A)[0]
        modes.copy_(torch.view_as_real(waves).to(modes.dtype))
        self.total_A.add_(self.change_A.double())
        self.change_A.zero_()

    def groups(self, config, model, priors) -> list[ParameterGroup]:
        return [ParameterGroup("probe_focus", [self.change_A], config.optim.lr.probe_focus,
                               config.optim.start.probe_focus, after_iteration=lambda: self.fold(model.probe))]

    def attributes(self, model) -> dict[str, float]:
        """results.h5's attribute ``probe_focus_change_A``: the change of focus the run made (Å, added to the
        defocus it started at), folded or not."""
        return {"probe_focus_change_A": float(self.total_A) + float(self.change_A.detach())}


@register
def probe_focus(config, model, context: BuildContext) -> ProbeFocus | None:
    """The refined change of focus, where ``optim.start.probe_focus`` is set."""
    if config.optim.start.probe_focus is None:
        return None
    if context.scans:
        raise ConfigError("optim.start.probe_focus: one scan only; the probes of several scans (scans:) are not "
                          "refocused: set it to null")
    return ProbeFocus(context.geometry.dx_A, context.data.wavelength_A)
