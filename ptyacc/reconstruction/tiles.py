"""The object split across processes (``runtime.shard_object``, DESIGN rule 10).

Each process holds only a tile of the object plus a halo, and the Adam state of the pixels it
owns. The tiles follow the shards of ``runtime.shard_data``: the same recursive bisection of
the positions (``data.store.spatial_bisection``) also cuts the object's rectangle, at the
midpoint between the two parts' positions, so that process r owns a rectangle O_r around its
own positions. Process r holds the local region L_r: O_r and every pixel that a window of one
of its positions can reach (position corrections included), clipped to the object.

Every step (once the object is updated), after the backward pass:
- gradient phase: each process's gradient on a pixel it does not own is sent to the owner.
  The segments seg(s, r) = O_s ∩ L_r (s != r) are rectangles every process knows; process r
  writes its gradient on seg(s, r) into its slot of one packed buffer (zeros elsewhere), one
  all-reduce sums the buffers, and owner s adds the slots seg(s, r) to its own gradient;
- the owner steps its owned pixels (Adam, or ``TiledDescent``), halo pixels never;
- value phase: the owners write their new values on seg(s, r), one all-reduce, and every
  process copies the values of its halo.
So every pixel is updated by one owner with the same summed gradient as in a replicated run:
the iterates of ``runtime.shard_data`` alone, for bytes proportional to the tiles' perimeter.

The object leaves DDP (it has another shape on each process): it is in DDP's parameters to
ignore, and the comm hook of ``ptyacc/reconstruction/exchange.py`` sums only probe, positions and detector.
For results.h5 and checkpoints the main process assembles the whole object (and Adam's
moments) tile by tile: it holds the whole object once at save time, on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.optim.adam import adam

from ptyacc.data.store import Cut, spatial_bisection
from ptyacc.errors import ConfigError, PtyaccError
from ptyacc.optim.descent import PreconditionedDescent
from ptyacc.optim.row_adam import TakesStepContext
from ptyacc.physics.regularizers import lateral_blur_reach_px
from ptyacc.reconstruction.exchange import on_any_process, timed_all_reduce

Rect = tuple[int, int, int, int]  # (y0, y1, x0, x1): rows y0:y1, columns x0:x1 of the whole object
OBJECT = "object"  # the object's group
OBJECT_STATE = "quantities.object.transmission"  # the object's tensor in the model's state (quantities/object.py)
# Different shapes and values on each process. DDP (torch 2.13) names a root module's tensor "object_origin" when it
# checks shapes and syncs states, ".object_origin" in the reducer's buckets (an empty module name): both.
IGNORED_BY_DDP = (OBJECT_STATE, "object_origin", ".object_origin")


@dataclass(frozen=True)
class Tiling:
    """The split of an object of ``shape`` (Ny, Nx) px over ``len(owned)`` processes.

    owned: O_r, a partition of the object's pixels into rectangles, one per process.
    local: L_r, what process r holds: O_r plus the pixels its positions' windows can reach.
    shards: the positions of each process (those of ``spatial_shards``).
    """

    shape: tuple[int, int]
    window: int
    owned: tuple[Rect, ...]
    local: tuple[Rect, ...]
    shards: tuple[np.ndarray, ...]

    @classmethod
    def plan(cls, shards: list[np.ndarray], cut: Cut | None, positions_px: np.ndarray, shape: tuple[int, int],
             window: int, margin_px: float) -> Tiling:
        """The tiling of the shards that the bisection ``cut`` made (``spatial_bisection``, as
        ``ShardPlan.spatial``); positions_px (N, 2): the positions in object pixels; margin_px:
        how far a position may move from there (corrections, rounding)."""
        owned = tile_rectangles(cut, positions_px, shape)
        local = tuple(_bounding(rect, reach(positions_px[shard], shape, window, margin_px))
                      for rect, shard in zip(owned, shards, strict=True))
        return cls(tuple(shape), window, tuple(owned), local, tuple(shards))

    def narrowest(self) -> tuple[int, int]:
        """(process, its tile's smaller side in px) of the narrowest tile."""
        sides = [min(y1 - y0, x1 - x0) for y0, y1, x0, x1 in self.owned]
        return int(np.argmin(sides)), min(sides)

    def segments(self) -> list[tuple[int, int, Rect]]:
        """(owner s, holder r, seg(s, r) = O_s ∩ L_r) for s != r where not empty, in a fixed order."""
        found = []
        for s, own in enumerate(self.owned):
            for r, held in enumerate(self.local):
                part = _intersection(own, held)
                if s != r and part is not None:
                    found.append((s, r, part))
        return found


def tile_rectangles(cut: Cut | None, positions_px: np.ndarray, shape: tuple[int, int]) -> list[Rect]:
    """The owned rectangles, one per shard in shard order: the object's rectangle cut where
    ``cut`` split the positions, at the pixel boundary nearest the midpoint between the last
    position of the first part and the first of the second, kept between their centre pixels
    (round(position)) when they are in different pixels, so that each shard's centre pixels lie
    in its own rectangle."""
    def split(node: Cut | None, rect: list[int]) -> list[Rect]:
        if node is None:
            return [tuple(rect)]
        lo, hi = rect[2 * node.axis], rect[2 * node.axis + 1]
        below, above = positions_px[node.last_first, node.axis], positions_px[node.first_second, node.axis]
        boundary = int(np.round((below + above) / 2))
        if np.round(above) > np.round(below):
            boundary = int(np.clip(boundary, np.round(below) + 1, np.round(above)))
        boundary = int(np.clip(boundary, lo + 1, hi - 1))
        first, second = list(rect), list(rect)
        first[2 * node.axis + 1] = second[2 * node.axis] = boundary
        return split(node.first, first) + split(node.second, second)

    return split(cut, [0, int(shape[0]), 0, int(shape[1])])


def reach(centres_px: np.ndarray, shape: tuple[int, int], window: int, margin_px: float) -> Rect:
    """The pixels that the K x K windows of centres (n, 2) moved by up to ``margin_px`` can
    cover: corners round(c - K//2) clamped to [0, N - K] as ``PtychoModel._window_corners``."""
    half, high = window // 2, np.asarray(shape) - window
    low_corner = np.clip(np.floor(centres_px.min(axis=0) - margin_px - half), 0, high).astype(int)
    high_corner = np.clip(np.ceil(centres_px.max(axis=0) + margin_px - half), 0, high).astype(int)
    return int(low_corner[0]), int(high_corner[0]) + window, int(low_corner[1]), int(high_corner[1]) + window


def _bounding(a: Rect, b: Rect) -> Rect:
    return min(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), max(a[3], b[3])


def _intersection(a: Rect, b: Rect) -> Rect | None:
    y0, y1, x0, x1 = max(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), min(a[3], b[3])
    return (y0, y1, x0, x1) if y1 > y0 and x1 > x0 else None


def _area(rect: Rect) -> int:
    return (rect[1] - rect[0]) * (rect[3] - rect[2])


def halo_margin_px(window: int, refined: bool, max_offset_fraction: float = 0.25, lr_positions: float = 1e-2,
                   steps_per_iteration: int = 1) -> float:
    """How far a position may move from its start (the halo beyond its window): the position-correction
    limit plus how far Adam can move it within one iteration (lr x steps) when positions are
    refined, plus 1 px for rounding."""
    return (max_offset_fraction * window + lr_positions * steps_per_iteration if refined else 0.0) + 1.0


def plan_tiling(config, plan, positions_px: np.ndarray, shape: tuple[int, int], window: int,
                steps_per_iteration: int) -> Tiling:
    """The tiling of this run's shard plan (``ShardPlan``), or a ConfigError when a tile would be narrower than the probe
    window. The halo margin: the position-correction limit plus how far Adam can move a
    position within one iteration before the limit is enforced (lr x steps), plus 1 px for rounding."""
    opt = config.optim
    margin = halo_margin_px(window, opt.start.positions is not None, opt.max_position_offset_fraction,
                            opt.lr.positions, steps_per_iteration)
    tiling = Tiling.plan(plan.shards, plan.cut, positions_px, shape, window, margin)
    rank, side = tiling.narrowest()
    world = plan.world
    if side < window:
        fitting = [w for w in range(world - 1, 0, -1)
                   if Tiling.plan(*spatial_bisection(positions_px, w), positions_px, shape, window, margin
                                  ).narrowest()[1] >= window]
        most = fitting[0] if fitting else 1
        raise ConfigError(f"runtime.shard_object: with {world} processes the tile of process {rank} is {side} px wide, "
                          f"narrower than the {window} px probe window (object {shape[0]} x {shape[1]} px); use at "
                          f"most {most} process{'es' if most > 1 else ''} for this object, or set "
                          "runtime.shard_object: false")
    return tiling


# ----------------------------------------------------------------------------- the exchange


class HaloExchange:
    """The two collectives of a step (see the module docstring) for process ``rank``.

    ``count(nbytes, seconds)`` is told the bytes and waiting time of each collective."""

    def __init__(self, tiling: Tiling, rank: int, world: int, count=None) -> None:
        self.tiling, self.rank, self.world, self.count = tiling, rank, world, count
        y0, _, x0, _ = tiling.local[rank]
        self.segments = []  # (owner, holder, rows, columns in the local region, offset in the buffer (px))
        offset = 0
        for s, r, (a, b, c, d) in tiling.segments():
            self.segments.append((s, r, slice(a - y0, b - y0), slice(c - x0, d - x0), offset))
            offset += (b - a) * (d - c)
        self.pixels = offset

    def buffer_numel(self, values: torch.Tensor) -> int:
        """Elements of the packed buffer for a local tensor (O, S, Ly, Lx, 2)."""
        return self.pixels * values.shape[0] * values.shape[1] * values.shape[-1]

    def sum_gradients(self, grad: torch.Tensor) -> None:
        """Owned pixels of the local gradient (O, S, Ly, Lx, 2) become the sum over processes."""
        packed = self._all_reduce(grad, writer_is_holder=True)
        for rows, cols, piece in self._pieces(packed, grad, mine_as="owner"):
            grad[..., rows, cols, :] += piece

    def share_values(self, values: torch.Tensor) -> None:
        """Halo pixels of the local values (O, S, Ly, Lx, 2) become their owners' values."""
        packed = self._all_reduce(values, writer_is_holder=False)
        for rows, cols, piece in self._pieces(packed, values, mine_as="holder"):
            values[..., rows, cols, :] = piece

    def _all_reduce(self, local: torch.Tensor, writer_is_holder: bool) -> torch.Tensor:

        modes = local.shape[0] * local.shape[1] * local.shape[-1]
        packed = torch.zeros(self.pixels * modes, dtype=local.dtype, device=local.device)
        for s, r, rows, cols, offset in self.segments:
            if (r if writer_is_holder else s) == self.rank:
                part = local[..., rows, cols, :]
                packed[offset * modes:offset * modes + part.numel()] = part.reshape(-1)
        wait = timed_all_reduce(packed)
        if self.count is not None:
            self.count(packed.numel() * packed.element_size(), wait)
        return packed

    def _pieces(self, packed: torch.Tensor, local: torch.Tensor, mine_as: str):
        modes = local.shape[0] * local.shape[1] * local.shape[-1]
        for s, r, rows, cols, offset in self.segments:
            if (s if mine_as == "owner" else r) != self.rank:
                continue
            shape = (*local.shape[:2], rows.stop - rows.start, cols.stop - cols.start, local.shape[-1])
            numel = math.prod(shape)
            yield rows, cols, packed[offset * modes:offset * modes + numel].view(shape)


# ----------------------------------------------------------------------------- Adam on the owned tile


class TiledAdam:
    """Adam for the local object of one process: the halo exchange, then torch's own Adam update
    on the owned pixels only (its fused kernel when ``fused``, as the replicated run's optimizer
    has it: ``optim.groups.fast_adam``), then the halo values.

    Why torch's kernel and not the same formula written with tensor operations: the fused kernel
    rounds differently (in torch 2.13 a few values in ten thousand land 1 ulp apart after a
    step), and a refined scan affine or tilt, whose Adam steps are normalised, carries such a
    difference to a loss 0.1 % apart within one iteration. Torch's kernel gives each pixel the
    same bits wherever it sits in the tensor, so the owned tile steps as the whole object does.

    Adam's moments are kept for the owned tile only. ``state_dict`` is this process's (for
    the NaN guard's snapshots); ``full_state_dict`` (a collective) is a torch Adam state dict of
    the whole object on the main process, which is what checkpoints hold, and
    ``load_state_dict`` takes either."""

    def __init__(self, param: nn.Parameter, lr: float, tiling: Tiling, rank: int, world: int,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, regularizer=None,
                 fused: bool | None = None) -> None:
        self.param, self.tiling, self.rank, self.world = param, tiling, rank, world
        self.regularizer = regularizer  # (values, grad) -> None, the group's, added after the exchange
        self.betas, self.eps, self.fused = betas, eps, fused
        self.param_groups = [{"lr": lr, "params": [param], "betas": betas}]  # betas: checkpoint.restore's check
        self.exchange = HaloExchange(tiling, rank, world) if world > 1 else None
        y0, _, x0, _ = tiling.local[rank]
        a, b, c, d = tiling.owned[rank]
        self.owned = (slice(a - y0, b - y0), slice(c - x0, d - x0))
        self.steps = 0
        self.counter: torch.Tensor | None = None  # ``steps`` as the Adam kernel reads it, made at the next step
        self.exp_avg: torch.Tensor | None = None  # (O, S, h, w, 2) of the owned tile
        self.exp_avg_sq: torch.Tensor | None = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.param.grad = None

    def _summed_gradient(self) -> torch.Tensor:
        """The held region's gradient summed over the processes holding each pixel, the regularizer's added."""
        grad = self.param.grad if self.param.grad is not None else torch.zeros_like(self.param)
        if self.exchange is not None:
            # DDP's average: the loss is scaled by W / B, so the average is the global sum / B
            grad.div_(self.world)
            self.exchange.sum_gradients(grad)
        if self.regularizer is not None:
            # exact on the owned pixels, whose neighbours are all held (``needs_pixel_ring``)
            self.regularizer(self.param.detach(), grad)
        return grad

    @torch.no_grad()
    def step(self) -> None:
        grad = self._summed_gradient()
        rows, cols = self.owned
        owned_grad, owned = grad[..., rows, cols, :], self.param[..., rows, cols, :]
        if self.exp_avg is None:
            self.exp_avg, self.exp_avg_sq = torch.zeros_like(owned_grad), torch.zeros_like(owned_grad)
        if self.counter is None:  # torch.optim.Adam's step count: float32, on the device for the fused kernel
            self.counter = torch.tensor(float(self.steps), dtype=torch.float32, device=owned.device if self.fused else "cpu")
        beta1, beta2 = self.betas
        # the fused kernel treats every tensor as contiguous (torch 2.13 steps the pixels after a strided view's start,
        # not the view's): a tile that is not contiguous is stepped in a contiguous copy
        values = owned.contiguous() if self.fused else owned
        adam([values], [owned_grad.contiguous() if self.fused else owned_grad], [self.exp_avg], [self.exp_avg_sq], [],
             [self.counter], fused=self.fused, amsgrad=False, beta1=beta1, beta2=beta2, lr=self.param_groups[0]["lr"],
             weight_decay=0.0, eps=self.eps, maximize=False)
        if values is not owned:
            owned.copy_(values)
        self.steps += 1  # adam() counted ``counter`` up on its device; this is the host's copy
        if self.exchange is not None:
            self.exchange.share_values(self.param.data)

    def state_dict(self) -> dict:
        """This process's state: step count, learning rate and the owned tile's moments."""
        moments = {} if self.exp_avg is None else {"exp_avg": self.exp_avg.clone(),
                                                    "exp_avg_sq": self.exp_avg_sq.clone()}
        return {"tile": self.rank, "steps": self.steps, "lr": self.param_groups[0]["lr"], **moments}

    def full_state_dict(self) -> dict | None:
        """A ``torch.optim.Adam`` state dict of the whole object, assembled on the main process
        (None elsewhere); every process must call it."""
        group = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=self.param_groups[0]["lr"],
                                 betas=self.betas, eps=self.eps, fused=self.fused).state_dict()["param_groups"]
        moments = {}
        for name in ("exp_avg", "exp_avg_sq"):
            tile = getattr(self, name)
            if tile is not None:
                moments[name] = gather_tiles(tile, self.tiling, self.rank, self.world)
        if self.rank != 0:
            return None
        state = {0: {"step": torch.tensor(float(self.steps)), **moments}} if moments else {}
        return {"state": state, "param_groups": group}

    def load_state_dict(self, state: dict) -> None:
        """This process's own state (``state_dict``) or a whole-object Adam state dict (a
        checkpoint of a split or a replicated run), whose owned tile is taken."""
        self.counter = None  # made again from ``steps`` at the next step
        if "tile" in state:
            self.steps, self.param_groups[0]["lr"] = state["steps"], state["lr"]
            self.exp_avg = state["exp_avg"].clone() if "exp_avg" in state else None
            self.exp_avg_sq = state["exp_avg_sq"].clone() if "exp_avg_sq" in state else None
            return
        self.param_groups[0]["lr"] = state["param_groups"][0]["lr"]
        saved = state["state"].get(0)
        if saved is None:
            self.steps, self.exp_avg, self.exp_avg_sq = 0, None, None
            return
        y0, y1, x0, x1 = self.tiling.owned[self.rank]
        device = self.param.device
        self.steps = int(saved["step"])
        self.exp_avg = saved["exp_avg"][..., y0:y1, x0:x1, :].to(device).clone()
        self.exp_avg_sq = saved["exp_avg_sq"][..., y0:y1, x0:x1, :].to(device).clone()


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


def needs_pixel_ring(tiling: Tiling, ring_px: int = 1, key: str = "optim.regularize.tv_phase") -> None:
    """A ConfigError unless every process holds the ``ring_px`` pixels around its tile (within the object):
    a phase TV (1 px) or a lateral blur (its reach) needs them to get the owned pixels right."""
    ny, nx = tiling.shape
    for rank, ((y0, y1, x0, x1), held) in enumerate(zip(tiling.owned, tiling.local, strict=True)):
        ring = (max(y0 - ring_px, 0), min(y1 + ring_px, ny), max(x0 - ring_px, 0), min(x1 + ring_px, nx))
        if _bounding(ring, held) != held:
            raise ConfigError(f"runtime.shard_object: process {rank} does not hold the {ring_px} pixel(s) around its "
                              f"tile that {key} needs (a scan with no overlap between windows?); set "
                              f"runtime.shard_object: false or {key}: 0")


def gather_tiles(tile: torch.Tensor, tiling: Tiling, rank: int, world: int) -> torch.Tensor | None:
    """The whole (O, S, Ny, Nx, 2) tensor on the main process's CPU from every process's owned
    ``tile``, received one tile at a time (None on the other processes)."""
    if world == 1:
        return tile.detach().cpu().clone()
    import torch.distributed as dist

    if rank != 0:
        dist.send(tile.detach().contiguous(), dst=0)
        return None
    whole = torch.empty((*tile.shape[:2], *tiling.shape, tile.shape[-1]), dtype=tile.dtype)
    for source, (y0, y1, x0, x1) in enumerate(tiling.owned):
        part = tile.detach() if source == 0 else torch.empty(
            (*tile.shape[:2], y1 - y0, x1 - x0, tile.shape[-1]), dtype=tile.dtype, device=tile.device)
        if source != 0:
            dist.recv(part, src=source)
        whole[..., y0:y1, x0:x1, :] = part.cpu()
    return whole


def object_tiles(config, plan, geometry, window: int, steps: int, rank: int, world: int) -> tuple:
    """(ObjectTiles or None, its run.log lines): ``runtime.shard_object`` over ``world`` processes."""
    if not config.runtime.shard_object or world == 1:
        said = "runtime.shard_object: one process holds the whole object (nothing to split)"
        return None, [said] if config.runtime.shard_object else []
    tiles = ObjectTiles(plan_tiling(config, plan, geometry.positions_px, geometry.shape, window, steps), rank, world)
    return tiles, [tiles.describe()]


class ObjectTiles:
    """The object split of one run, as the engine, the saver and the checkpoints use it."""

    def __init__(self, tiling: Tiling, rank: int, world: int) -> None:
        self.tiling, self.rank, self.world = tiling, rank, world
        self.optimizer: TiledAdam | None = None  # or TiledDescent, a subclass

    @property
    def region(self) -> Rect:
        """The part of the object this process holds (L_r)."""
        return self.tiling.local[self.rank]

    def describe(self) -> str:
        y0, y1, x0, x1 = self.tiling.owned[self.rank]
        ly0, ly1, lx0, lx1 = self.region
        held = sum(_area(r) for r in self.tiling.local) / (self.tiling.shape[0] * self.tiling.shape[1])
        return (f"object split over {self.world} processes: this one owns rows {y0}:{y1}, columns {x0}:{x1} and "
                f"holds rows {ly0}:{ly1}, columns {lx0}:{lx1} (all processes together hold {held:.2f}x the object)")

    def take_over(self, model: nn.Module, groups: list) -> None:
        """Before ``accelerator.prepare``: the object leaves DDP; its group steps with TiledAdam (or TiledDescent for
        the preconditioned descent), regularizer after the halo exchange, halos refreshed after an inexact projection."""
        nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, list(IGNORED_BY_DDP))
        group = next(g for g in groups if g.name == OBJECT)
        for key, ring_px in (("tv_phase", group.regularizer is not None), ("tv_phase_smoothing", group.tv_smoothing > 0),
                             ("lateral_blur_px", lateral_blur_reach_px(group.lateral_blur_px))):
            if ring_px:
                needs_pixel_ring(self.tiling, int(ring_px), f"optim.regularize.{key}")
        if isinstance(group.optimizer, PreconditionedDescent):  # optim.object_optimizer: preconditioned
            self.optimizer = TiledDescent(group.optimizer, model.object, self.tiling, self.rank, self.world,
                                          group.regularizer)
        else:
            defaults = group.optimizer.defaults
            self.optimizer = TiledAdam(model.object, group.lr, self.tiling, self.rank, self.world, betas=defaults["betas"],
                                       eps=defaults["eps"], regularizer=group.regularizer, fused=defaults.get("fused"))
        group.optimizer, group.regularizer = self.optimizer, None
        project, exchange = group.after_iteration, self.optimizer.exchange
        if project is not None and not group.exact_projection and exchange is not None:
            def project_and_refresh() -> None:
                project()
                exchange.share_values(model.object.data)

            group.after_iteration = project_and_refresh

    def connect(self, count) -> None:
        """``count(nbytes, seconds)`` is told every object collective (the exchange's traffic)."""
        if self.optimizer.exchange is not None:
            self.optimizer.exchange.count = count

    def check_windows(self, model: nn.Module, indices: torch.Tensor) -> None:
        """Stop with a clear error if a window of ``indices`` (b,) left the held region (a
        position moved further than the halo allows)."""
        corners = model.window_corners(indices.to(model.positions_px.device))
        local = corners - model.object_origin
        limit = torch.tensor(model.object.shape[2:4], device=local.device) - model.window
        if on_any_process((local < 0).any() | (local > limit).any(), self.world):
            raise PtyaccError("runtime.shard_object: a position moved beyond the halo of a process's object region "
                              "within one iteration; lower optim.lr.positions or optim.max_position_offset_fraction, "
                              "or set runtime.shard_object: false")

    @torch.no_grad()
    def whole_object(self, model: nn.Module) -> torch.Tensor | None:
        """The whole object (O, S, Ny, Nx, 2) on the main process's CPU (None elsewhere); a collective."""
        rows, cols = self.optimizer.owned
        return gather_tiles(model.object[..., rows, cols, :], self.tiling, self.rank, self.world)

    def full_state(self, model: nn.Module, optimizers: list) -> tuple[dict, list] | None:
        """Model and optimizer state dicts as a replicated run's, whole object included, on the main process."""
        whole = self.whole_object(model)
        states = [o.full_state_dict() if o is self.optimizer else o.state_dict() for o in optimizers]
        if self.rank != 0:
            return None
        model_state = dict(model.state_dict())
        model_state[OBJECT_STATE] = whole
        return model_state, states

    def localize(self, state: dict) -> dict:
        """A checkpoint (whole object) with the model's object cut to this process's region."""
        y0, y1, x0, x1 = self.region
        model_state = dict(state["model"])
        key = OBJECT_STATE if OBJECT_STATE in model_state else OBJECT  # OBJECT: written before it was a quantity
        model_state[key] = model_state[key][..., y0:y1, x0:x1, :]
        return dict(state, model=model_state)
