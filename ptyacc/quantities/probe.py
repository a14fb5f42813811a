"""The probe, a ``Quantity``: its modes, their scale, its group and its results.h5 entry.

The modes are ``(probe_modes, K, K, 2)`` float32 real and imaginary parts divided by ``scale`` (a
buffer: the initial modes' largest amplitude), so that Adam's step sizes are relative to the probe's
peak amplitude. The initial modes are ``reconstruction/initial.py``'s (the optics', a file's, or the
data's). Its state is ``quantities.probe.modes`` and ``quantities.probe.scale``; results.h5 keeps the
modes, times the scale, as ``/probe`` (complex64, ``ComplexField.saved``).

Its group (``optim.lr.probe``, ``optim.start.probe``; Adam, or the preconditioned descent,
``optim.probe_optimizer``, ``optim/descent.py``), its ``groups``: several modes made orthogonal after every
iteration (``model.orthogonalize_probe``); the recentring constraints join it (``reconstruction/recenter.py``).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import torch
from torch import nn

from ptyacc.optim.descent import ProbeDescent
from ptyacc.optim.groups import ParameterGroup
from ptyacc.quantities.model import PtychoModel, orthogonalize_modes
from ptyacc.quantities.registry import ComplexField

if TYPE_CHECKING:
    from ptyacc.config import Config
    from ptyacc.optim.autos import AutoPriors


class Probe(ComplexField):
    """The probe (module docstring). Parameter: modes (P, K, K, 2) float32; buffer: scale () float32."""

    name = "probe"
    tensor_name, scale_name = "modes", "scale"  # results.h5's /probe: (P, K, K) complex64, the modes times the scale

    def __init__(self, probe: torch.Tensor) -> None:
        """``probe``: the initial modes (P, K, K) complex."""
        super().__init__()
        scale = probe.abs().max().clamp_min(1e-30).to(torch.float32)
        self.register_buffer("scale", scale)
        self.modes = nn.Parameter(torch.view_as_real(probe.to(torch.complex64) / scale).contiguous())

    def groups(self, config: Config, model: PtychoModel, priors: AutoPriors) -> list[ParameterGroup]:
        """The probe's group: several modes made orthogonal after every
        iteration (``model.orthogonalize_probe``); stepped by the optimizer ``priors`` chose (Adam or ``ProbeDescent``).
        The recentring constraints join it later (``reconstruction/recenter.py``'s ``attach_recentring``)."""
        opt, modes = config.optim, self.modes
        group = ParameterGroup("probe", [modes], opt.lr.probe, opt.start.probe,
                               after_iteration=partial(orthogonalize, modes)
                               if config.model.orthogonalize_probe and len(modes) > 1 else None)
        return [stepped_as_the_probe(group, config, priors, float(self.scale))]


def stepped_as_the_probe(group: ParameterGroup, config: Config, priors: AutoPriors, probe_scale: float) -> ParameterGroup:
    """``group`` (probe modes, optim.lr.probe's Adam step) given the probe's step where ``priors`` chose the
    preconditioned probe: ``ProbeDescent`` of ``optim.preconditioned_probe_step`` (0 where optim.lr.probe is
    0, which freezes the probe under either optimizer), for modes over ``probe_scale``; else left to Adam.
    Every probe of a run (several scans' too) takes this one rule, so none lags behind another."""
    if priors.probe_optimizer == "preconditioned":
        opt = config.optim
        group.lr = opt.preconditioned_probe_step if opt.lr.probe > 0 else 0.0
        group.optimizer = ProbeDescent(group.params, group.lr, probe_scale,
                                       config.model.object_amplitude_bounds[1] ** 2, priors.share)
    return group


@torch.no_grad()
def orthogonalize(probe: torch.Tensor) -> None:
    """Probe modes (M, K, K, 2) made orthogonal in place (``orthogonalize_modes``)."""
    probe.copy_(torch.view_as_real(orthogonalize_modes(torch.view_as_complex(probe))))
