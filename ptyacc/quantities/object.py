"""The object, a ``Quantity``: its transmission, its initial value, its group and its results.h5 entry.

The transmission is ``(object_modes, slices, Ny, Nx, 2)`` float32 real and imaginary parts (no complex
tensor reaches a collective); under ``runtime.shard_object`` only the part of the whole object this
process holds (``region``, ``reconstruction/tiles.py``). It starts flat (amplitude 1, phase 0); further
modes start with seeded noise in their phase, drawn for the whole object so that a held region starts
from the same pixels as the whole. Its state is ``quantities.object.transmission``; results.h5 keeps it
as ``/object`` (complex64, ``ComplexField.saved``; the split object is assembled whole by ``collect_results``).

Its group (``optim.lr.object``, ``optim.start.object``; Adam, or the preconditioned descent,
``optim.object_optimizer``) is ``reconstruction/groups.py``'s ``object_groups``, its ``groups``: after
every iteration the TV smoothing step, the depth and lateral blurs when asked for and the amplitude
bounds (``model.object_amplitude_bounds``), and the phase total variation (``optim.regularize.tv_phase``)
as a regulariser. Where the probe takes the preconditioned step, which assumes an object within the
upper bound, the bounds hold after every step.
"""

from __future__ import annotations

import torch
from torch import nn

from ptyacc.quantities.registry import ComplexField
from ptyacc.reconstruction.groups import object_groups


class ObjectTransmission(ComplexField):
    """The object (module docstring). Parameter: transmission (O, S, h, w, 2) float32, (h, w) the
    rows and columns of ``region`` (y0, y1, x0, x1) of the whole object of ``shape`` (Ny, Nx)."""

    name = "object"
    tensor_name = "transmission"  # results.h5's /object: (O, S, h, w) complex64, the part this process holds

    def __init__(self, shape: tuple[int, int], modes: int = 1, slices: int = 1,
                 region: tuple[int, int, int, int] | None = None, init_noise: float = 1e-2, seed: int = 0) -> None:
        super().__init__()
        self.region = region if region is not None else (0, shape[0], 0, shape[1])
        y0, y1, x0, x1 = self.region
        phase = torch.zeros(modes, slices, y1 - y0, x1 - x0)
        if modes > 1:
            # identical modes would receive identical gradients forever
            generator = torch.Generator().manual_seed(seed)
            noise = init_noise * torch.randn(modes - 1, slices, *shape, generator=generator)
            phase[1:] = noise[..., y0:y1, x0:x1]
        self.transmission = nn.Parameter(torch.view_as_real(torch.polar(torch.ones_like(phase), phase)).contiguous())

    # its group, made beside the optimizers that step it (``reconstruction/groups.py``): building it there keeps
    # the run's path through groups.py in one visit (docs/explanation/architecture.md, "How the demo's data walk through it")
    groups = object_groups
