"""The probe, a ``Quantity``: its modes, their scale, its group and its results.h5 entry.

The modes are ``(probe_modes, K, K, 2)`` float32 real and imaginary parts divided by ``scale`` (a
buffer: the initial modes' largest amplitude), so that Adam's step sizes are relative to the probe's
peak amplitude. The initial modes are ``reconstruction/initial.py``'s (the optics', a file's, or the
data's). Its state is ``quantities.probe.modes`` and ``quantities.probe.scale``; results.h5 keeps the
modes, times the scale, as ``/probe`` (complex64, ``ComplexField.saved``).

Its group (``optim.lr.probe``, ``optim.start.probe``; Adam, or the preconditioned descent,
``optim.probe_optimizer``) is ``reconstruction/groups.py``'s ``probe_groups``, its ``groups``: several
modes made orthogonal after every iteration (``model.orthogonalize_probe``); the recentring constraints join it (``recenter.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from ptyacc.quantities.registry import ComplexField
from ptyacc.reconstruction.groups import probe_groups


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

    # its group, made beside the optimizers that step it (``reconstruction/groups.py``): building it there keeps
    # the run's path through groups.py in one visit (docs/explanation/architecture.md, "How the demo's data walk through it")
    groups = probe_groups
