"""The object, a ``Quantity``: its transmission, its initial value, its group and its results.h5 entry.

The transmission is ``(object_modes, slices, Ny, Nx, 2)`` float32 real and imaginary parts (no complex
tensor reaches a collective); under ``runtime.shard_object`` only the part of the whole object this
process holds (``region``, ``reconstruction/tiles.py``). It starts flat (amplitude 1, phase 0); further
modes start with seeded noise in their phase, drawn for the whole object so that a held region starts
from the same pixels as the whole. Its state is ``quantities.object.transmission``; results.h5 keeps it
as ``/object`` (complex64, ``ComplexField.saved``; the split object is assembled whole by ``collect_results``).

Its group (``optim.lr.object``, ``optim.start.object``; Adam, or the preconditioned descent,
``optim.object_optimizer``, ``optim/descent.py``), its ``groups``: after every iteration the TV smoothing
step, the depth and lateral blurs when asked for and the amplitude bounds (``model.object_amplitude_bounds``,
``project_object``), and the phase total variation (``optim.regularize.tv_phase``) as a regulariser.
Where the probe takes the preconditioned step, which assumes an object within the upper bound, the
bounds hold after every step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch
from torch import nn

from ptyacc.optim.descent import PreconditionedDescent
from ptyacc.optim.groups import ParameterGroup
from ptyacc.physics.regularizers import PhaseTV, blur_depth, lateral_blur, tv_phase_smoothing
from ptyacc.quantities.registry import ComplexField

if TYPE_CHECKING:
    from ptyacc.config import Config
    from ptyacc.optim.autos import AutoPriors
    from ptyacc.quantities.model import PtychoModel


@dataclass
class DepthBlurStages:
    """The object's depth blur in slices: ``start`` over the run's first stage, ``after`` once ``ease`` ended it
    (``optim.regularize.depth_blur_start_slices`` and ``depth_blur_slices``; one stage where they are equal). The
    stage ends where the stop rule first finds the run converged (``reconstruction/convergence.py``) or after
    half of a fixed number of iterations (``half_of``)."""

    start: float
    after: float
    eased_after: int | None = None  # iterations done when the first stage ended

    @property
    def staged(self) -> bool:
        return self.start != self.after and self.eased_after is None

    @property
    def sigma(self) -> float:
        return self.start if self.eased_after is None else self.after

    def ease(self, done: int) -> str:
        """End the first stage after ``done`` iterations; the line that says so."""
        self.eased_after = done
        return (f"the depth blur eased after {done} iterations: {self.start:g} slices (optim.regularize."
                f"depth_blur_start_slices), now {self.after:g} (depth_blur_slices)")

    @staticmethod
    def half_of(iterations: int) -> int:
        """Iterations done when a run without a stop rule ends its first stage."""
        return max(1, iterations // 2)


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
        self.depth_blur = DepthBlurStages(0.0, 0.0)  # ``groups`` sets the run's

    def groups(self, config: Config, model: PtychoModel, priors: AutoPriors) -> list[ParameterGroup]:
        """The object's group: after every iteration the TV
        smoothing step, the depth and lateral blurs when asked for and the amplitude bounds (``project_object``); the
        phase total variation (``optim.regularize.tv_phase``) as its regulariser; stepped by the optimizer ``priors``
        chose (Adam or ``PreconditionedDescent``), held within the amplitude bounds after every step where the probe
        takes the preconditioned step (which assumes an object within them)."""
        opt, regularize, transmission = config.optim, config.optim.regularize, self.transmission
        bounds = config.model.object_amplitude_bounds
        sigma = priors.depth_blur_slices
        self.depth_blur = DepthBlurStages(priors.depth_blur_start_slices, sigma)
        lateral_px, smoothing = priors.values["lateral_blur_px"], priors.values["tv_phase_smoothing"]
        regularizer, tv_phase = None, priors.values["tv_phase"]
        if tv_phase > 0:
            # the data term of a step is its patterns' mean loss (sum / global batch), an unbiased
            # estimate of (sum over all N patterns) / N: the penalty joins that sum, so it is / N too
            regularizer = PhaseTV(tv_phase / len(model.positions_px), regularize.tv_epsilon_rad)
        group = ParameterGroup("object", [transmission], opt.lr.object, opt.start.object,
                               after_iteration=partial(project_object, transmission, bounds, smoothing,
                                                       regularize.tv_epsilon_rad, self.depth_blur, lateral_px),
                               regularizer=regularizer,
                               exact_projection=sigma == 0 and self.depth_blur.start == 0 and lateral_px == 0
                               and smoothing == 0,
                               lateral_blur_px=lateral_px, tv_smoothing=smoothing)
        if priors.probe_optimizer == "preconditioned":
            # the probe's step assumes an object within the bound: held to it every step (docs/user-guide.md, 'The X-ray probe')
            group.after_step = partial(clamp_amplitude, transmission, *bounds)
        if priors.optimizer == "preconditioned":
            group.lr = priors.step if opt.lr.object > 0 else 0.0  # lr.object 0 freezes it either way
            # several scans: each step is the least-squares one of its batch, so an iteration over S scans' positions
            # would take S times the steps of one scan, each from a batch's share of counts: its last steps' noise
            # stays in the object (benchmarks/records/2026-12-02-two-scans-mos2.md). Divided by S, an iteration
            # moves the object as far as one scan's
            share = priors.share / (model.quantities["scans"].count if "scans" in model.quantities else 1)
            group.optimizer = PreconditionedDescent(group.params, model, group.lr, opt.preconditioner_floor, share,
                                                    priors.batch_floor)
        return [group]

    def attributes(self, model: PtychoModel) -> dict[str, int]:
        """results.h5's attribute ``depth_blur_eased_after_iterations`` where the depth blur's first stage ended."""
        eased = self.depth_blur.eased_after
        return {} if eased is None else {"depth_blur_eased_after_iterations": eased}


@torch.no_grad()
def project_object(transmission: torch.Tensor, bounds: tuple[float, float], smoothing: float = 0.0,
                   epsilon_rad: float = 0.0, depth: DepthBlurStages | None = None, lateral_px: float = 0.0) -> None:
    """The object's projection after an iteration (``quantities/object.py``), in place on ``transmission``
    (O, S, h, w, 2): the TV smoothing step of size ``smoothing``, the depth blur of ``depth``'s stage now and
    the lateral blur of ``lateral_px`` where > 0, then the amplitude within ``bounds`` (low, high)."""
    if smoothing > 0:
        transmission.data.copy_(tv_phase_smoothing(transmission.data, smoothing, epsilon_rad))
    if depth is not None and depth.sigma > 0:
        blur_depth(transmission, depth.sigma)
    if lateral_px > 0:
        transmission.data.copy_(lateral_blur(transmission.data, lateral_px))
    clamp_amplitude(transmission, *bounds)


@torch.no_grad()
def clamp_amplitude(obj: torch.Tensor, low: float, high: float) -> None:
    """Object (..., 2) real/imaginary pairs with their amplitude clamped to [low, high], phase kept."""
    amplitude = torch.linalg.vector_norm(obj, dim=-1, keepdim=True)
    obj.mul_(amplitude.clamp(low, high) / amplitude.clamp_min(1e-12))
