"""One parameter group per optimised quantity (object, probe, positions, detector, ...): its tensors, its
optimizer (Adam; for the object and the probe, Adam or the preconditioned descent below), its learning rate
and schedule, its start iteration, its projections and its regulariser (``optim.regularize``).

A group that has not started yet is not stepped, but its tensors keep requiring gradients and take part in
every forward (DESIGN rule 2). Projections run identically on every process, whether the group has started
or not, so parameters stay bit-identical.

A regulariser's gradient is added after the exchange between processes (``step`` sees the sum over
processes), on every process alike: it counts once whatever the process count, on every pixel, including
those outside the step's footprint that the exchange does not send.

The object's preconditioned descent (``optim.object_optimizer: preconditioned``, ``PreconditionedDescent``):
the gradient divided by the probe's illumination of each pixel, the least-squares step of ePIE and LSQML,
instead of Adam's step of one size everywhere. For the amplitude loss of one pattern, ||F(P O) - measured
amplitude||^2 with an orthonormal F, the gradient with respect to the object's real and imaginary parts is
2 conj(P) (psi - psi'), psi' the exit wave with the measured amplitudes put in; the step that turns psi into
psi' where the probe is (ePIE's full step) is minus half the gradient divided by |P|^2. A step's loss is the
mean over its batch, so half the gradient is divided by the mean over all positions of the probe's
intensity at each pixel (``illumination``), plus ``floor`` times its largest value so that pixels the probe
barely reaches move little:

    object -= step x 0.5 x gradient / (slices x (illumination + floor x max illumination))

The probe's (``ProbeDescent``) divides half its gradient by the object's largest intensity instead.
For the Poisson loss both take a quarter (``multislice_auto.LEAST_SQUARES``).

A step of 1 is the full least-squares step on one slice; on several slices each takes 1 / slices of it. The
illumination of all positions is made once per iteration; ``optim.preconditioner_batch_floor`` (by default
0.25 on several slices, off on one) raises it at every step to at least that fraction of the step's own
positions', which keeps a larger step stable on a dense scan. Both are exact (``illumination``): the same
bits on every process (a split object takes its region's part) and no state, so 1 and several processes agree.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import nn

from ptyacc.config import Config
from ptyacc.physics.regularizers import PhaseTV, blur_depth, lateral_blur, tv_phase_smoothing
from ptyacc.reconstruction.model import PtychoModel, orthogonalize_modes
from ptyacc.reconstruction.multislice_auto import AutoPriors
from ptyacc.reconstruction.row_adam import StepContext, TakesStepContext
from ptyacc.reconstruction.tiles import TiledAdam


@dataclass
class LrSchedule:
    """The learning rates' factor: a cosine decay from 1 at the first of ``iterations`` to ``final_fraction`` at the
    last (``optim.lr_final_fraction``), times ``scale`` (halved by each rollback after a non-finite loss,
    ``hooks.NanGuard``). One schedule serves every group."""

    iterations: int
    final_fraction: float
    scale: float = 1.0

    def factor(self, iteration: int) -> float:
        return self.scale * lr_factor(iteration, self.iterations, self.final_fraction)


@dataclass
class ParameterGroup:
    """An optimised quantity. ``after_step`` runs after every step, ``after_iteration`` after
    every iteration (projections onto the allowed set); ``start`` None = never updated.
    ``regularizer(values, grad)`` adds the gradient of a penalty at ``values`` to ``grad`` in
    place, for each tensor, before each update. ``exact_projection`` False: ``after_iteration``
    uses functions (angle, polar) whose last bit may depend on where a value sits in a tensor, so
    copies of a pixel held by several processes (``runtime.shard_object``) are refreshed afterwards.
    ``lateral_blur_px``, ``tv_smoothing``: the lateral blur's sigma and the TV smoothing step in
    ``after_iteration`` (0: none), whose reach around a pixel a process holding a tile of the
    object must hold (``tiles.needs_pixel_ring``). ``constraints`` run after ``after_iteration``
    (``model.recenter``'s, ``recenter.attach_recentring``); ``end_iteration`` runs both."""

    name: str
    params: list[torch.nn.Parameter]
    lr: float
    start: int | None
    after_step: Callable[[], None] | None = None
    after_iteration: Callable[[], None] | None = None
    optimizer: torch.optim.Optimizer | None = field(default=None, repr=False)
    regularizer: Callable[[torch.Tensor, torch.Tensor], None] | None = None
    exact_projection: bool = True
    lateral_blur_px: float = 0.0
    tv_smoothing: float = 0.0
    schedule: LrSchedule = field(default_factory=lambda: LrSchedule(1, 1.0))
    constraints: list[Callable[[], None]] = field(default_factory=list)

    def active(self, iteration: int) -> bool:
        return self.start is not None and iteration >= self.start

    def end_iteration(self) -> None:
        """What follows every iteration: the projection ``after_iteration``, then the ``constraints``."""
        if self.after_iteration is not None:
            self.after_iteration()
        for constraint in self.constraints:
            constraint()

    def step(self, iteration: int, batch: torch.Tensor | None = None) -> None:
        """The update of one step (global batch ``batch``) of ``iteration``, at that iteration's learning
        rate (set also before the group starts, so that checkpoints hold the same rate for every group)."""
        rate = self.lr * self.schedule.factor(iteration)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        if isinstance(self.optimizer, TakesStepContext):
            self.optimizer.context = StepContext(iteration, batch)
        if self.active(iteration):
            if self.regularizer is not None:
                for param in self.params:
                    if param.grad is None:
                        param.grad = torch.zeros_like(param)
                    self.regularizer(param.detach(), param.grad)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def build_groups(config: Config, model: PtychoModel, device: torch.device,
                 auto: AutoPriors | None = None) -> list[ParameterGroup]:
    """The groups of ``model`` as ``config.optim`` and ``config.model`` describe them: each quantity's
    (``model.quantities``, the object and the probe first, each stepped by the optimizer ``auto`` chose:
    Adam or the preconditioned descent), then the tilt's and the slice thickness's; Adam (the fused
    kernel where ``device`` has one) for every group that brings no optimizer of its own. ``auto``: what the
    config's auto keys came to (``AutoPriors.of(config)`` when not given)."""
    auto = AutoPriors.of(config) if auto is None else auto
    fast, beta2 = _fast_adam(device), auto.beta2
    schedule = LrSchedule(config.optim.iterations, config.optim.lr_final_fraction)
    groups = [group for quantity in model.quantities.values() for group in _groups_of(quantity, config, model, auto)]
    if model.propagation is not None:  # the tilt and the slice thickness (quantities/slices.py)
        groups += model.propagation.groups(config, model)
    for group in groups:
        if group.optimizer is None:  # every group but a preconditioned object or probe
            group.optimizer = torch.optim.Adam(group.params, lr=group.lr, betas=(0.9, beta2), **fast)
        group.schedule = schedule
    return groups


def _groups_of(quantity: nn.Module, config: Config, model: PtychoModel, priors: AutoPriors) -> list[ParameterGroup]:
    """``quantity.groups(config, model, priors)``; a quantity written for the earlier protocol, whose ``groups``
    takes (config, model) only, is asked that way."""
    if len(inspect.signature(quantity.groups).parameters) == 2:
        return quantity.groups(config, model)
    return quantity.groups(config, model, priors)


def object_groups(quantity: nn.Module, config: Config, model: PtychoModel, priors: AutoPriors) -> list[ParameterGroup]:
    """The object's group (``quantities/object.py``'s ``ObjectTransmission.groups``): after every iteration the TV
    smoothing step, the depth and lateral blurs when asked for and the amplitude bounds (``project_object``); the
    phase total variation (``optim.regularize.tv_phase``) as its regulariser; stepped by the optimizer ``priors``
    chose (Adam or ``PreconditionedDescent``), held within the amplitude bounds after every step where the probe
    takes the preconditioned step (which assumes an object within them)."""
    opt, regularize, transmission = config.optim, config.optim.regularize, quantity.transmission
    bounds = config.model.object_amplitude_bounds
    # > 0 only for several slices (the config refuses it on one); auto is the data's (data_autos): still auto
    # only where no data resolved the config, and off there
    sigma = 0.0 if regularize.depth_blur_slices == "auto" else regularize.depth_blur_slices
    lateral_px, smoothing = priors.values["lateral_blur_px"], priors.values["tv_phase_smoothing"]
    regularizer, tv_phase = None, priors.values["tv_phase"]
    if tv_phase > 0:
        # the data term of a step is its patterns' mean loss (sum / global batch), an unbiased
        # estimate of (sum over all N patterns) / N: the penalty joins that sum, so it is / N too
        regularizer = PhaseTV(tv_phase / len(model.positions_px), regularize.tv_epsilon_rad)
    group = ParameterGroup("object", [transmission], opt.lr.object, opt.start.object,
                           after_iteration=partial(project_object, transmission, bounds, smoothing,
                                                   regularize.tv_epsilon_rad, sigma, lateral_px),
                           regularizer=regularizer, exact_projection=sigma == 0 and lateral_px == 0 and smoothing == 0,
                           lateral_blur_px=lateral_px, tv_smoothing=smoothing)
    if priors.probe_optimizer == "preconditioned":
        # the probe's step assumes an object within the bound: held to it every step (docs/user-guide.md, 'The X-ray probe')
        group.after_step = partial(clamp_amplitude, transmission, *bounds)
    if priors.optimizer == "preconditioned":
        group.lr = priors.step if opt.lr.object > 0 else 0.0  # lr.object 0 freezes it either way
        group.optimizer = PreconditionedDescent(group.params, model, group.lr, opt.preconditioner_floor, priors.share,
                                                priors.batch_floor)
    return [group]


def probe_groups(quantity: nn.Module, config: Config, model: PtychoModel, priors: AutoPriors) -> list[ParameterGroup]:
    """The probe's group (``quantities/probe.py``'s ``Probe.groups``): several modes made orthogonal after every
    iteration (``model.orthogonalize_probe``); stepped by the optimizer ``priors`` chose (Adam or ``ProbeDescent``).
    The recentring constraints join it later (``recenter.attach_recentring``)."""
    opt, modes = config.optim, quantity.modes
    group = ParameterGroup("probe", [modes], opt.lr.probe, opt.start.probe,
                           after_iteration=partial(orthogonalize, modes)
                           if config.model.orthogonalize_probe and len(modes) > 1 else None)
    if priors.probe_optimizer == "preconditioned":
        group.lr = opt.preconditioned_probe_step if opt.lr.probe > 0 else 0.0
        group.optimizer = ProbeDescent(group.params, group.lr, float(quantity.scale),
                                       config.model.object_amplitude_bounds[1] ** 2, priors.share)
    return [group]


@torch.no_grad()
def clamp(tensor: torch.Tensor, low: float | None, high: float | None) -> None:
    tensor.clamp_(low, high)


@torch.no_grad()
def zero_mean(offsets: torch.Tensor) -> None:
    """Position offsets (N, 2) less their mean, in place: a common shift of all positions is the object's shift,
    and with a scan affine it would let the corrections drift together."""
    offsets.sub_(offsets.mean(0))


@torch.no_grad()
def project_object(transmission: torch.Tensor, bounds: tuple[float, float], smoothing: float = 0.0,
                   epsilon_rad: float = 0.0, depth_sigma_slices: float = 0.0, lateral_px: float = 0.0) -> None:
    """The object's projection after an iteration (``quantities/object.py``), in place on ``transmission``
    (O, S, h, w, 2): the TV smoothing step of size ``smoothing``, the depth blur of ``depth_sigma_slices`` and
    the lateral blur of ``lateral_px`` where > 0, then the amplitude within ``bounds`` (low, high)."""
    if smoothing > 0:
        transmission.data.copy_(tv_phase_smoothing(transmission.data, smoothing, epsilon_rad))
    if depth_sigma_slices > 0:
        blur_depth(transmission, depth_sigma_slices)
    if lateral_px > 0:
        transmission.data.copy_(lateral_blur(transmission.data, lateral_px))
    clamp_amplitude(transmission, *bounds)


@torch.no_grad()
def clamp_amplitude(obj: torch.Tensor, low: float, high: float) -> None:
    """Object (..., 2) real/imaginary pairs with their amplitude clamped to [low, high], phase kept."""
    amplitude = torch.linalg.vector_norm(obj, dim=-1, keepdim=True)
    obj.mul_(amplitude.clamp(low, high) / amplitude.clamp_min(1e-12))


@torch.no_grad()
def orthogonalize(probe: torch.Tensor) -> None:
    """Probe modes (M, K, K, 2) made orthogonal in place (``orthogonalize_modes``)."""
    probe.copy_(torch.view_as_real(orthogonalize_modes(torch.view_as_complex(probe))))


def lr_factor(iteration: int, iterations: int, final_fraction: float) -> float:
    """Cosine decay from 1 at the first iteration to ``final_fraction`` at the last."""
    if iterations <= 1:
        return 1.0
    return final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + math.cos(math.pi * iteration / (iterations - 1)))


def _fast_adam(device: torch.device) -> dict:
    """Adam's fused kernel where this torch has it for the device (CPU and CUDA in torch >= 2.4)."""
    try:
        torch.optim.Adam([torch.zeros(1, device=device, requires_grad=True)], fused=True)
    except (RuntimeError, TypeError, ValueError):
        return {}
    return {"fused": True}


# ----------------------------------------------------------------------------- the preconditioned descent

# the share of the gradient that makes a step of 1 the least-squares step (the gradient is twice it)
HALF = 0.5
QUANTUM = 2.0 ** 20  # levels of the probe's intensity in the illumination (its peak = QUANTUM)


@torch.no_grad()
def illumination(model: PtychoModel, batch: torch.Tensor | None = None,
                 corners: torch.Tensor | None = None) -> torch.Tensor:
    """(Ny, Nx) float32 over the whole object: the mean over all positions (or over the positions
    ``batch``) of the probe's intensity (its modes summed) at each pixel, the probe placed at each
    position's window corner (``corners`` (N, 2) of all positions, the model's now when not given).
    With several scans (``quantities/scans.py``) each position has its own scan's probe.

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
    summed = torch.zeros(shape, device=compute, dtype=torch.float64)
    for number, level in enumerate(levels):
        mine = corners if scan_of is None else corners[scan_of.to(compute) == number]
        if batch is not None:
            summed += window_sum(level, mine, shape, loop=compute.type == "cpu")
            continue
        hits = torch.zeros(shape, device=compute, dtype=torch.float64)
        hits.index_put_((mine[:, 0], mine[:, 1]), torch.ones(len(mine), device=compute, dtype=torch.float64),
                        accumulate=True)
        kernel = torch.zeros(shape, device=compute, dtype=torch.float64)
        kernel[:k, :k] = level
        # corners lie in [0, N - K], so corner + offset < N: the circular convolution wraps nothing
        summed += torch.round(torch.fft.irfft2(torch.fft.rfft2(hits) * torch.fft.rfft2(kernel), s=shape)).clamp_min(0)
    return (summed * (peak.to(compute, torch.float64) / (QUANTUM * count))).to(intensity.device, torch.float32)


def all_corners(model: PtychoModel) -> torch.Tensor:
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


def preconditioner(model: PtychoModel, floor: float, share: float = HALF,
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

    def __init__(self, params, model: PtychoModel, lr: float, floor: float, share: float = HALF,
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

    def tiled(self, param: torch.nn.Parameter, tiling, rank: int, world: int, regularizer=None) -> TiledDescent:
        """The same update for a process that holds one tile of the object (``runtime.shard_object``)."""
        return TiledDescent(self, param, tiling, rank, world, regularizer)


class TiledDescent(TakesStepContext, TiledAdam):
    """``PreconditionedDescent`` on the owned pixels of a split object: the halo exchange of
    ``TiledAdam``, then the preconditioned step instead of Adam's, then the halo values."""

    def __init__(self, whole: PreconditionedDescent, param: torch.nn.Parameter, tiling, rank: int, world: int,
                 regularizer=None) -> None:
        super().__init__(param, whole.param_groups[0]["lr"], tiling, rank, world, regularizer=regularizer)
        self.whole = whole
        self.param_groups[0].update(floor=whole.param_groups[0]["floor"], share=whole.param_groups[0]["share"])

    @torch.no_grad()
    def step(self) -> None:
        grad = self._summed_gradient()
        self.whole.context = self.context
        factor = self.whole.current_factor()
        rows, cols = self.owned
        self.steps += 1
        owned = self.param[..., rows, cols, :]
        owned.addcmul_(grad[..., rows, cols, :], factor[rows, cols, None], value=-self.param_groups[0]["lr"])
        if self.exchange is not None:
            self.exchange.share_values(self.param.data)

    def full_state_dict(self) -> dict | None:
        """This optimizer's state dict as a replicated run's (main process; None elsewhere)."""
        if self.rank != 0:
            return None
        state = self.whole.state_dict()
        state["param_groups"][0]["lr"] = self.param_groups[0]["lr"]
        return state

    def load_state_dict(self, state: dict) -> None:
        """This process's own state or a whole-object one; there are no moments to take."""
        self.param_groups[0]["lr"] = state["lr"] if "tile" in state else state["param_groups"][0]["lr"]
        self.steps = state.get("steps", 0)


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
