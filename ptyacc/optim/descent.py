"""The preconditioned descents of the object and the probe (``optim.object_optimizer`` and
``optim.probe_optimizer``: preconditioned, the default): the least-squares step of ePIE and LSQML
instead of Adam's step of one size everywhere.

The object's (``PreconditionedDescent``): the gradient divided by the probe's illumination of each
pixel. For the amplitude loss of one pattern, ||F(P O) - measured amplitude||^2 with an orthonormal F,
the gradient with respect to the object's real and imaginary parts is 2 conj(P) (psi - psi'), psi' the
exit wave with the measured amplitudes put in; the step that turns psi into psi' where the probe is
(ePIE's full step) is minus half the gradient divided by |P|^2. A step's loss is the mean over its
batch, so half the gradient is divided by the mean over all positions of the probe's intensity at each
pixel (``illumination``), plus ``floor`` times its largest value so that pixels the probe barely
reaches move little:

    object -= step x 0.5 x gradient / (slices x (illumination + floor x max illumination))

The probe's (``ProbeDescent``) divides half its gradient by the object's largest intensity instead.
For the Poisson loss both take a quarter (``optim/autos.py``'s ``LEAST_SQUARES``).

A step of 1 is the full least-squares step on one slice; on several slices each takes 1 / slices of it. The
illumination of all positions is made once per iteration; ``optim.preconditioner_batch_floor`` (by default
0.25 on several slices, off on one) raises it at every step to at least that fraction of the step's own
positions', which keeps a larger step stable on a dense scan. Both are exact (``illumination``): the same
bits on every process (a split object takes its region's part: ``reconstruction/tiles.py``'s
``TiledDescent``) and no state, so 1 and several processes agree.

What the descent reads of the model is ``Illuminated``, a protocol: the probe and the scan's window
corners, and the shape and origin of the object this process holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import torch

from ptyacc.optim.row_adam import TakesStepContext


class Illuminated(Protocol):
    """What the object's descent reads of the model (``quantities/model.py``'s ``PtychoModel``): the
    ``probe`` (P, K, K, 2) float32 over its ``probe_scale`` () float32; the ``object`` this process holds
    (O, S, h, w, 2) float32, its ``object_origin`` (2,) long in the whole object's pixels and the whole
    object's ``object_shape`` (Ny, Nx); the scan's ``positions_px`` (N, 2), whether they are refined
    (``refine_positions``: then ``window_corners(indices)`` (B, 2) long, else the ``fixed_corners`` (N, 2) long);
    its ``quantities``, whose "scans", with several scans of one object, gives each scan's probe
    (``every_probe(probe, scale)`` (S, P, K, K) complex) and each position's scan (``scan_of_position`` (N,) long)."""

    probe: torch.Tensor
    probe_scale: torch.Tensor
    object: torch.Tensor
    object_origin: torch.Tensor
    object_shape: torch.Tensor | tuple[int, int]
    positions_px: torch.Tensor
    refine_positions: bool
    fixed_corners: torch.Tensor
    quantities: Mapping[str, torch.nn.Module]

    def window_corners(self, indices: torch.Tensor) -> torch.Tensor: ...


# the share of the gradient that makes a step of 1 the least-squares step (the gradient is twice it)
HALF = 0.5
QUANTUM = 2.0 ** 20  # levels of the probe's intensity in the illumination (its peak = QUANTUM)


@torch.no_grad()
def illumination(model: Illuminated, batch: torch.Tensor | None = None,
                 corners: torch.Tensor | None = None) -> torch.Tensor:
    """(Ny, Nx) float32 over the whole object: the mean over all positions (or over the positions
    ``batch``) of the probe's intensity (its modes summed) at each pixel, the probe placed at each
    position's window corner (``corners`` (N, 2) of all positions, the model's now when not given).
    With several scans each position has its own scan's probe, whose counts may differ.

    The same bits on every process: the intensity is rounded to integer multiples of 2^-20 of its
    peak, so every pixel's sum is an integer, exact in float64 in any order (a batch's additions)
    and returned by the float64 FFT convolution (all positions) to far better than 0.5: rounded."""
    probe = torch.view_as_complex(model.probe.detach()) * model.probe_scale  # ``complex_probe``, inline
    scans = model.quantities["scans"] if "scans" in model.quantities else None
    probes = probe[None] if scans is None else scans.every_probe(probe, model.probe_scale).detach()
    intensity = (probes.real.square() + probes.imag.square()).sum(1)  # (S, K, K)
    compute = torch.device("cpu") if intensity.device.type == "mps" else intensity.device  # no float64 on MPS
    peak = intensity.max().clamp_min(1e-30)
    levels = torch.round(intensity.to(compute, torch.float64) * (QUANTUM / peak.to(compute, torch.float64)))
    if corners is None:
        corners = all_corners(model)
    scan_of = None if scans is None else scans.scan_of_position.to(corners.device)  # (N,) each position's scan
    if batch is not None:
        chosen = batch.to(corners.device)
        corners, scan_of = corners[chosen], None if scan_of is None else scan_of[chosen]
    corners = corners.to(compute)
    shape, k, count = tuple(model.object_shape), levels.shape[-1], len(corners)

    def lit(level: torch.Tensor, mine: torch.Tensor) -> torch.Tensor:
        """One scan's ``level`` (K, K) summed at its positions' corners ``mine`` (B, 2)."""
        if batch is not None:
            return window_sum(level, mine, shape, loop=compute.type == "cpu")
        hits = torch.zeros(shape, device=compute, dtype=torch.float64)
        hits.index_put_((mine[:, 0], mine[:, 1]), torch.ones(len(mine), device=compute, dtype=torch.float64),
                        accumulate=True)
        kernel = torch.zeros(shape, device=compute, dtype=torch.float64)
        kernel[:k, :k] = level
        # corners lie in [0, N - K], so corner + offset < N: the circular convolution wraps nothing
        return torch.round(torch.fft.irfft2(torch.fft.rfft2(hits) * torch.fft.rfft2(kernel), s=shape)).clamp_min(0)

    # each scan's sum, added to the first: one scan is one sum, as before several scans existed
    summed = None
    for number, level in enumerate(levels):
        part = lit(level, corners if scan_of is None else corners[scan_of.to(compute) == number])
        summed = part if summed is None else summed + part
    return (summed * (peak.to(compute, torch.float64) / (QUANTUM * count))).to(intensity.device, torch.float32)


def all_corners(model: Illuminated) -> torch.Tensor:
    """(N, 2) long: the window corners of all positions as the forward pass puts them now."""
    return (model.window_corners(torch.arange(len(model.positions_px), device=model.positions_px.device))
            if model.refine_positions else model.fixed_corners)


def window_sum(levels: torch.Tensor, corners: torch.Tensor, shape: tuple[int, int], loop: bool) -> torch.Tensor:
    """``shape`` float64: ``levels`` (K, K) added at each of ``corners`` (B, 2): by B slice additions
    (``loop``; on the CPU six times faster than the other way) or by one ``index_add_`` (one kernel
    on a GPU)."""
    summed, k = torch.zeros(shape, device=levels.device, dtype=torch.float64), levels.shape[-1]
    if loop:
        for y, x in corners.tolist():
            summed[y:y + k, x:x + k] += levels
        return summed
    offsets = torch.arange(k, device=levels.device)
    pixels = (corners[:, 0, None, None] + offsets[:, None]) * shape[1] + corners[:, 1, None, None] + offsets
    return summed.view(-1).index_add_(0, pixels.reshape(-1), levels.expand(len(corners), k, k).reshape(-1)).view(shape)


def preconditioner(model: Illuminated, floor: float, share: float = HALF,
                   light: torch.Tensor | None = None, origin: tuple[int, int] | None = None) -> torch.Tensor:
    """(h, w) the factor of the gradient of the object this model holds (its region of the whole
    object): ``share`` / (slices x (``light`` + floor x its largest value)), ``light`` the
    whole object's illumination (``illumination(model)`` when not given)."""
    light = illumination(model) if light is None else light
    factor = share / (model.object.shape[1] * (light + floor * light.max()).clamp_min(1e-30))
    y0, x0 = origin if origin is not None else model.object_origin.tolist()  # origin: read off the device once
    return factor[y0:y0 + model.object.shape[2], x0:x0 + model.object.shape[3]]


class PreconditionedDescent(TakesStepContext, torch.optim.Optimizer):
    """The object (O, S, h, w, 2) less ``lr`` x its gradient x ``preconditioner(model, floor)``,
    the illumination of all positions made anew once per iteration and, with a ``batch_floor``,
    raised at every step to at least ``batch_floor`` x the illumination of the step's batch
    (its ``context``). No state."""

    def __init__(self, params, model: Illuminated, lr: float, floor: float, share: float = HALF,
                 batch_floor: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "floor": floor, "share": share})
        self.model, self.batch_floor = model, batch_floor
        self.light: torch.Tensor | None = None  # the illumination of all positions
        self.corners: torch.Tensor | None = None  # and their window corners
        self.factor, self.made_in = None, None  # the preconditioner, and the iteration whose probe made it and ``light``
        self.origin = tuple(model.object_origin.tolist())  # fixed for the run: one read, not one per step

    def current_factor(self) -> torch.Tensor:
        """The preconditioner: the illumination of all positions made anew at the first step of every
        iteration (the ``context``'s), raised to its batch's share at every step."""
        group, context = self.param_groups[0], self.context
        if self.light is None or self.made_in != context.iteration:
            self.corners, self.made_in = all_corners(self.model), context.iteration
            self.light = illumination(self.model, corners=self.corners)
            self.factor = preconditioner(self.model, group["floor"], group["share"], self.light, self.origin)
        if self.batch_floor > 0 and context.batch is not None:  # the corners of the iteration's start
            light = torch.maximum(self.light, self.batch_floor * illumination(self.model, context.batch, self.corners))
            return preconditioner(self.model, group["floor"], group["share"], light, self.origin)
        return self.factor

    @torch.no_grad()
    def step(self, closure=None) -> None:
        factor = self.current_factor()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    param.addcmul_(param.grad, factor[:, :, None], value=-group["lr"])



class ProbeDescent(torch.optim.Optimizer):
    """The probe (M, K, K, 2), stored divided by ``probe_scale``, less ``lr`` x its gradient x
    ``factor``: ``share`` / (probe_scale^2 x the object's largest intensity), the least-squares step
    for an object of that intensity (a step of 1 gives one exit wave the measured amplitudes where
    the object has it); every process the same numbers. No state."""

    def __init__(self, params, lr: float, probe_scale: float, intensity: float, share: float = HALF) -> None:
        super().__init__(params, {"lr": lr, "factor": share / (probe_scale ** 2 * intensity)})

    @torch.no_grad()
    def step(self, closure=None) -> None:
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    param.add_(param.grad, alpha=-group["lr"] * group["factor"])
