"""One parameter group per optimised quantity (object, probe, positions, detector): its
tensors, its Adam, its learning rate and schedule, its start iteration, its projections and
its regulariser (``optim.regularize``).

A group that has not started yet is not stepped, but its tensors keep requiring gradients
and take part in every forward (DESIGN rule 2). Projections run identically on every
process, whether the group has started or not, so parameters stay bit-identical.

A regulariser's gradient is added to the gradient after the exchange between processes (when
``step`` runs, the gradient is already the sum over processes, footprint exchange or not), on
every process alike, from the same parameters: it counts once whatever the process count, on
every pixel, including those outside the step's footprint that the exchange does not send.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ptyacc.config import Config
from ptyacc.physics.regularizers import (
    depth_blur,
    lateral_blur,
    phase_total_variation_gradient,
    tv_phase_smoothing,
)
from ptyacc.reconstruction.model import PtychoModel, orthogonalize_modes
from ptyacc.reconstruction.multislice_auto import resolved_values
from ptyacc.reconstruction.slices import TiltSmoothing, median_neighbour_distance


@dataclass
class LrSchedule:
    """The learning rates' factor: a cosine decay from 1 at the first of ``iterations`` to
    ``final_fraction`` at the last (``optim.lr_final_fraction``), times ``scale`` (halved by
    each rollback after a non-finite loss, ``hooks.NanGuard``). One schedule serves every group."""

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

    def step(self, iteration: int) -> None:
        """The update of one step of ``iteration``, at that iteration's learning rate (set also
        before the group starts, so that checkpoints hold the same rate for every group)."""
        rate = self.lr * self.schedule.factor(iteration)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        if self.active(iteration):
            if self.regularizer is not None:
                for param in self.params:
                    if param.grad is None:
                        param.grad = torch.zeros_like(param)
                    self.regularizer(param.detach(), param.grad)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def build_groups(config: Config, model: PtychoModel, device: torch.device,
                 priors: dict[str, float] | None = None) -> list[ParameterGroup]:
    """The groups of ``model`` as ``config.optim`` and ``config.model`` describe them, each with
    its Adam (the fused kernel where ``device`` has one); ``priors``: the values of
    ``optim.regularize``'s keys that may be auto (``multislice_auto.AutoPriors``), resolved here
    when not given."""
    opt, start = config.optim, config.optim.start
    probe_modes = model.probe.shape[0]
    groups = [
        _object_group(config, model, priors),
        ParameterGroup("probe", [model.probe], opt.lr.probe, start.probe,
                       after_iteration=(lambda: orthogonalize(model.probe))
                       if config.model.orthogonalize_probe and probe_modes > 1 else None),
    ]
    if model.refine_positions:
        limit_px = opt.max_position_offset_fraction * model.window
        groups.append(ParameterGroup("positions", [model.position_offsets], opt.lr.positions, start.positions,
                                     after_iteration=lambda: clamp(model.position_offsets, -limit_px, limit_px)))
    if model.scan_affine is not None:
        groups.append(ParameterGroup("scan_affine", [model.scan_affine], opt.lr.scan_affine, start.scan_affine,
                                     after_iteration=lambda: zero_mean(model.position_offsets)))
    groups += slice_groups(config, model)
    detector = [p for p in (model.background, model.intensity_weights) if p is not None]
    if detector:
        # a negative background or weight could make the predicted intensity negative (and the
        # Poisson loss undefined) at the next step: projected after every step
        groups.append(ParameterGroup("detector", detector, opt.lr.detector,
                                     start.probe if start.detector == "probe" else start.detector,
                                     after_step=lambda: [clamp(p, 0.0, None) for p in detector]))
    fast, beta2 = _fast_adam(device), adam_beta2(config)
    schedule = LrSchedule(opt.iterations, opt.lr_final_fraction)
    for group in groups:
        group.optimizer = torch.optim.Adam(group.params, lr=group.lr, betas=(0.9, beta2), **fast)
        group.schedule = schedule
    return groups


def slice_groups(config: Config, model: PtychoModel) -> list[ParameterGroup]:
    """The refined tilt (smoothed over neighbouring positions after every iteration when there is
    one per position) and slice thickness (kept above a hundredth of its start), if any."""
    propagation, opt, groups = model.propagation, config.optim, []
    if propagation is None:
        return groups
    tilt, thickness = propagation.tilt_mrad, propagation.slice_thickness_A
    if isinstance(tilt, torch.nn.Parameter):
        tilts, smooth = [tilt], None
        if propagation.per_position:
            sigma_A = config.model.tilt_smoothing_A
            sigma_px = (sigma_A / propagation.dx_A if sigma_A is not None
                        else 2 * median_neighbour_distance(model.positions_px.cpu().numpy()))
            smoothing, offsets = TiltSmoothing(model.positions_px, sigma_px), propagation.tilt_offsets_mrad
            tilts.append(offsets)
            smooth = lambda: smoothing(offsets)  # noqa: E731
        groups.append(ParameterGroup("tilt", tilts, opt.lr.tilt, opt.start.tilt, after_iteration=smooth))
    if isinstance(thickness, torch.nn.Parameter):
        floor_A = 0.01 * config.model.slice_thickness_A
        groups.append(ParameterGroup("slice_thickness", [thickness], opt.lr.slice_thickness
                                     * config.model.slice_thickness_A, opt.start.slice_thickness,
                                     after_step=lambda: clamp(thickness, floor_A, None)))
    return groups


def adam_beta2(config: Config) -> float:
    """``optim.adam_beta2``, with auto resolved: 0.95 for one slice, 0.999 for multislice."""
    if config.optim.adam_beta2 != "auto":
        return float(config.optim.adam_beta2)
    return 0.95 if config.model.slices == 1 else 0.999


def _object_group(config: Config, model: PtychoModel, priors: dict[str, float] | None) -> ParameterGroup:
    """The object: after every iteration the TV smoothing step, the depth and lateral blurs when
    asked for, and the amplitude bounds; the phase total variation (``optim.regularize``)."""
    low, high = config.model.object_amplitude_bounds
    regularize = config.optim.regularize
    sigma = regularize.depth_blur_slices  # > 0 only for several slices (the config refuses it on one)
    if priors is None:
        priors = resolved_values(config)
    lateral_px, smoothing = priors["lateral_blur_px"], priors["tv_phase_smoothing"]

    def project() -> None:
        if smoothing > 0:
            model.object.data.copy_(tv_phase_smoothing(model.object.data, smoothing, regularize.tv_epsilon_rad))
        if sigma > 0:
            blur_depth(model.object, sigma)
        if lateral_px > 0:
            model.object.data.copy_(lateral_blur(model.object.data, lateral_px))
        clamp_amplitude(model.object, low, high)

    regularizer, tv_phase = None, priors["tv_phase"]
    if tv_phase > 0:
        # the data term of a step is its patterns' mean loss (sum / global batch), an unbiased
        # estimate of (sum over all N patterns) / N: the penalty joins that sum, so it is / N too
        regularizer = PhaseTV(tv_phase / len(model.positions_px), regularize.tv_epsilon_rad)
    return ParameterGroup("object", [model.object], config.optim.lr.object, config.optim.start.object,
                          after_iteration=project, regularizer=regularizer,
                          exact_projection=sigma == 0 and lateral_px == 0 and smoothing == 0,
                          lateral_blur_px=lateral_px, tv_smoothing=smoothing)


@dataclass
class PhaseTV:
    """``weight`` x phase total variation (``phase_total_variation``) of the object, as a
    regularizer: adds its gradient to a gradient in place."""

    weight: float
    epsilon_rad: float

    def __call__(self, values: torch.Tensor, grad: torch.Tensor) -> None:
        _, penalty_grad = phase_total_variation_gradient(values, self.epsilon_rad)
        grad.add_(penalty_grad, alpha=self.weight)


@torch.no_grad()
def blur_depth(obj: torch.Tensor, sigma_slices: float) -> None:
    """Object (O, S, Ny, Nx, 2) blurred along depth in place (``depth_blur``)."""
    obj.copy_(depth_blur(obj, sigma_slices))


@torch.no_grad()
def clamp(tensor: torch.Tensor, low: float | None, high: float | None) -> None:
    tensor.clamp_(low, high)


@torch.no_grad()
def zero_mean(offsets: torch.Tensor) -> None:
    """Position offsets (N, 2) less their mean, in place: a common shift of all positions is the
    object's shift, and with a scan affine it would let the corrections drift together."""
    offsets.sub_(offsets.mean(0))


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
