"""The scaling model of ``benchmarks/scaling.py`` extended to the object split (``runtime.shard_object``).

Predictions, not measurements. Per process, at the busiest process:

memory, replicated (``shard_data`` alone, the footprint exchange): the whole object, its
    gradient and Adam's two moments (and the same for every other parameter), the process's
    1/N of the patterns (float32) and its share of a batch of waves (``bench.wave_bytes``);
memory, split: the held region L_r (owned tile O_r plus the halo its windows reach) and its
    gradient, Adam's two moments for O_r only, every other parameter as above, 1/N of the
    patterns and the batch share of waves;
exchange, split: per step two all-reduces of the packed halo segments (gradients, then values;
    every process's buffer is the total of all segments, ``tiles.HaloExchange``) and DDP's
    all-reduce(s) of the other parameters (probe, positions...);
update, split: Adam on the owned tile (and the other parameters) instead of the whole object.

The tilings come from ``ptyacc.reconstruction.tiles`` (``Tiling.plan`` on ``spatial_bisection``, no processes
needed) where the positions are few enough to list; for the largest-object search (up to ~10^8
positions) from ``GridTiling``, a geometric formula for the same bisection of a square raster,
which ``tests/test_scaling.py`` checks against ``tiles.py`` on small cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from benchmarks.gpu_cases import DEVICE_COUNTS, UPDATE_BYTES_PER_FLOAT, GpuAssumption, gpu_step_cost, h100_assumption
from benchmarks.scaling import (
    FLOAT32_BYTES,
    INFINIBAND_HDR,
    NVLINK,
    Exchange,
    Layout,
    Link,
    ddp_bucket_count,
    footprint_exchange,
    predict_iteration,
    raster_layout,
)
from ptyacc.data.store import spatial_bisection
from ptyacc.reconstruction.tiles import OBJECT_STATE, Tiling, halo_margin_px
from ptyacc.speed.bench import ADAM_MOMENTS, PATTERN_VALUE_BYTES, wave_bytes

GB = 1e9
DEVICE_BYTES = 80 * GB  # "80 GB" GPUs (H100 / A100 80GB: 80 x 10^9 bytes and a little more)
RESERVE_BYTES = 8 * GB  # kept free: CUDA context, cuFFT plans and workspaces, allocator fragmentation, temporaries


# ----------------------------------------------------------------------------- tilings


@dataclass(frozen=True)
class TileSizes:
    """What the model needs of a tiling: the busiest process's held and owned pixels, and the
    pixels of all halo segments together (each all-reduce's buffer, per value of a pixel)."""

    held_px: int
    owned_px: int
    segment_px: int
    narrowest_px: int


def tile_sizes(tiling: Tiling) -> TileSizes:
    """``TileSizes`` of a ``tiles.Tiling``: the busiest process is the one holding the most."""
    def area(rect):
        return (rect[1] - rect[0]) * (rect[3] - rect[2])

    busiest = max(range(len(tiling.local)), key=lambda r: area(tiling.local[r]))
    return TileSizes(area(tiling.local[busiest]), max(area(o) for o in tiling.owned),
                     sum(area(rect) for _, _, rect in tiling.segments()), tiling.narrowest()[1])


def layout_tiling(layout: Layout, devices: int, margin_px: float) -> Tiling:
    """The tiling ``runtime.shard_object`` makes of ``layout`` on ``devices`` processes (``tiles.py``)."""
    shards, cut = spatial_bisection(layout.positions_px, devices)
    return Tiling.plan(shards, cut, layout.positions_px, layout.object_shape, layout.window_px, margin_px)


@dataclass(frozen=True)
class GridTiling:
    """The bisection of a square raster scan, in closed form: ``devices`` = 2^k tiles in
    ny = 2^ceil(k/2) rows and nx = 2^floor(k/2) columns (the first cut is across y, the wider
    extent alternates), tiles of side/ny x side/nx px. A cut lies midway between two rows of
    positions, and a window reaches K - K//2 px past its centre plus the margin, so each held
    region reaches h = K/2 + margin - step/2 px past each inner edge of its tile (tiles.py's
    rounding gives h or h +- 1/2 on either side).
    Busiest: an inner tile. Segments: every tile's held minus owned pixels,
    2 h side (ny - 1 + nx - 1) + 4 h^2 (ny - 1)(nx - 1)."""

    side_px: int
    window_px: int
    step_px: float
    margin_px: float
    devices: int

    def sizes(self) -> TileSizes:
        k = round(math.log2(self.devices))
        if 2**k != self.devices:
            raise ValueError(f"GridTiling needs a power of 2 devices, got {self.devices}")
        ny, nx = 2 ** math.ceil(k / 2), 2 ** (k // 2)
        s = self.side_px
        h = max(self.window_px / 2 + self.margin_px - self.step_px / 2, 0.0) if self.devices > 1 else 0.0
        ty, tx = s / ny, s / nx
        held = min(ty + h * min(ny - 1, 2), s) * min(tx + h * min(nx - 1, 2), s)
        segments = 2 * h * s * (ny - 1 + nx - 1) + 4 * h * h * (ny - 1) * (nx - 1)
        return TileSizes(math.ceil(held), math.ceil(ty) * math.ceil(tx), math.ceil(segments), int(min(ty, tx)))


def raster_side(scan_side: int, step_px: float, window_px: int) -> int:
    """The object side ``raster_layout`` makes for a square scan (``ObjectGeometry.around``)."""
    return int(math.ceil((scan_side - 1) * step_px + window_px // 2 + 1 + window_px - window_px // 2 + 1))


def scan_side_for(side_px: int, step_px: float, window_px: int) -> int:
    """The most positions per side of a square raster whose object is at most ``side_px``."""
    n = max(int((side_px - window_px - 2) / step_px) + 1, 1)
    while n > 1 and raster_side(n, step_px, window_px) > side_px:
        n -= 1
    return n


# ----------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class Memory:
    """Bytes one process holds at the peak of a step."""

    object: int  # the object it holds (the whole object, or its held region)
    gradient: int  # the gradient of that
    adam: int  # Adam's two moments (whole object, or the owned tile) and every other parameter's
    other_parameters: int  # probe, positions...: value and gradient
    patterns: int
    waves: int

    @property
    def total(self) -> int:
        return self.object + self.gradient + self.adam + self.other_parameters + self.patterns + self.waves


@dataclass(frozen=True)
class Case:
    """A reconstruction without its data: what memory depends on."""

    object_px: int  # object pixels (whole object)
    n_patterns: int
    window_px: int
    slices: int = 1
    probe_modes: int = 1
    object_modes: int = 1
    other_floats: int = 0  # float32 values of the parameters other than the object

    @classmethod
    def of(cls, layout: Layout) -> Case:
        others = sum(f for name, f in layout.parameter_floats() if name != OBJECT_STATE)
        return cls(layout.object_shape[0] * layout.object_shape[1], layout.n_patterns, layout.window_px,
                   layout.slices, layout.probe_modes, layout.object_modes, others)

    @property
    def bytes_per_object_px(self) -> int:
        """float32 bytes of one object pixel: complex (2 floats) per slice and object mode."""
        return self.object_modes * self.slices * 2 * FLOAT32_BYTES

    def local_batch(self, batch_size: int, devices: int) -> int:
        return -(-max(min(batch_size, self.n_patterns), devices) // devices)


def _memory(case: Case, batch_size: int, devices: int, held_px: int, adam_px: int) -> Memory:
    per_px = case.bytes_per_object_px
    others = case.other_floats * FLOAT32_BYTES
    patterns = -(-case.n_patterns // devices) * case.window_px**2 * PATTERN_VALUE_BYTES
    waves = wave_bytes(case.local_batch(batch_size, devices), case.window_px, case.probe_modes, case.object_modes,
                       case.slices)
    return Memory(held_px * per_px, held_px * per_px, ADAM_MOMENTS * (adam_px * per_px + others), 2 * others,
                  patterns, waves)


def replicated_memory(case: Case, batch_size: int, devices: int = 1) -> Memory:
    """Per process with the object replicated and the patterns sharded (``shard_data``)."""
    return _memory(case, batch_size, devices, case.object_px, case.object_px)


def split_memory(case: Case, batch_size: int, devices: int, tiles: TileSizes) -> Memory:
    """Per process with the object split (``shard_object``): the busiest held region, Adam on
    the largest owned tile."""
    if devices == 1:
        return replicated_memory(case, batch_size, 1)
    return _memory(case, batch_size, devices, tiles.held_px, tiles.owned_px)


def largest_fitting(fits, low: int, high: int) -> int:
    """The largest integer in [low, high] for which ``fits`` holds (``fits`` true up to some
    point and false after it), or low - 1 when it fails at low."""
    if not fits(low):
        return low - 1
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


@dataclass(frozen=True)
class Scan:
    """A square raster scan family: what stays fixed while the object grows."""

    window_px: int
    step_px: float
    slices: int = 1
    probe_modes: int = 1
    object_modes: int = 1
    refine_positions: bool = False
    batch_size: int = 128

    def case(self, side_px: int) -> Case:
        n = scan_side_for(side_px, self.step_px, self.window_px) ** 2
        k = self.window_px
        others = self.probe_modes * k * k * 2 + (2 * n if self.refine_positions else 0)
        return Case(side_px * side_px, n, k, self.slices, self.probe_modes, self.object_modes, others)

    def margin_px(self, steps_per_iteration: int = 1) -> float:
        return halo_margin_px(self.window_px, self.refine_positions, steps_per_iteration=steps_per_iteration)

    def grid(self, side_px: int, devices: int) -> TileSizes:
        case = self.case(side_px)
        steps = max(case.n_patterns // max(self.batch_size, devices), 1)
        return GridTiling(side_px, self.window_px, self.step_px, self.margin_px(steps), devices).sizes()

    def fits_replicated(self, side_px: int, devices: int, budget: float) -> bool:
        return replicated_memory(self.case(side_px), self.batch_size, devices).total <= budget

    def fits_split(self, side_px: int, devices: int, budget: float) -> bool:
        tiles = self.grid(side_px, devices)
        return tiles.narrowest_px >= self.window_px and \
            split_memory(self.case(side_px), self.batch_size, devices, tiles).total <= budget


def largest_side(scan: Scan, devices: int, split: bool, device_bytes: float = DEVICE_BYTES,
                 reserve_bytes: float = RESERVE_BYTES) -> int:
    """The largest square object side (px) whose reconstruction fits ``device_bytes`` less
    ``reserve_bytes`` on each of ``devices`` processes, replicated or split."""
    fits = scan.fits_split if split else scan.fits_replicated
    low = scan.window_px + 2
    if split:  # below this the narrowest tile is narrower than the window (refused), so no smaller side fits
        low = max(low, scan.window_px * 2 ** math.ceil(math.log2(devices) / 2))
    high = low
    while fits(high * 2, devices, device_bytes - reserve_bytes):
        high *= 2
    return largest_fitting(lambda s: fits(s, devices, device_bytes - reserve_bytes), low, high * 2)


# ----------------------------------------------------------------------------- exchange and time


def split_exchange(case: Case, tiles: TileSizes, other_sizes_bytes: list[int]) -> Exchange:
    """Per step: the two halo all-reduces (every process's buffer is all segments) and DDP's
    bucket(s) of the other parameters."""
    halo = tiles.segment_px * case.bytes_per_object_px
    return Exchange("object split (halos)", float(2 * halo + sum(other_sizes_bytes)),
                    2 + ddp_bucket_count(other_sizes_bytes))


def _others(case: Case) -> list[int]:
    return [case.other_floats * FLOAT32_BYTES] if case.other_floats else []


def split_step_cost(case: Case, tiles: TileSizes, gpu: GpuAssumption, devices: int):
    """The GPU step cost of ``case`` with Adam on the owned tile only (one device: the whole object)."""
    layout = Layout(np.broadcast_to(np.zeros(2), (case.n_patterns, 2)), (case.object_px, 1), case.window_px,
                    case.slices, case.probe_modes, case.object_modes)
    cost = gpu_step_cost(layout, gpu)
    owned = case.object_px if devices == 1 else tiles.owned_px
    floats = owned * case.bytes_per_object_px // FLOAT32_BYTES + case.other_floats
    return replace(cost, update_s=floats * UPDATE_BYTES_PER_FLOAT / (gpu.memory_bytes_per_s * gpu.update_efficiency))


def predict_split(case: Case, tiles: TileSizes, batch_size: int, devices: int, link: Link,
                  gpu: GpuAssumption | None = None):
    """Seconds per iteration (``scaling.Prediction``) of ``case`` split over ``devices``."""
    gpu = gpu or h100_assumption()
    cost = split_step_cost(case, tiles, gpu, devices)
    return predict_iteration(cost, split_exchange(case, tiles, _others(case)), link, devices, case.n_patterns,
                             batch_size)


def link_for(devices: int) -> Link:
    """NVLink inside one 8-GPU node, InfiniBand HDR beyond."""
    return NVLINK if devices <= (NVLINK.max_devices or 8) else INFINIBAND_HDR


# ----------------------------------------------------------------------------- tables

ELECTRON = Scan(128, 0.429 / 0.1494, slices=8, probe_modes=4, batch_size=128)
XRAY = Scan(256, 40.0, slices=1, probe_modes=4, batch_size=512)


def largest_object_table(scan: Scan, devices: tuple[int, ...] = DEVICE_COUNTS, gpu: GpuAssumption | None = None
                         ) -> str:
    """Markdown: the largest square object per N, replicated (``shard_data``) and split, and the
    split run's predicted s/iteration at its largest object."""
    gpu = gpu or h100_assumption()
    budget = DEVICE_BYTES - RESERVE_BYTES
    lines = ["| N x 80 GB | replicated (`shard_data`): side px, positions | `shard_object`: side px, positions | "
             "held / owned tile px | GB per process | s/iteration at that size (link) |", "|---|---|---|---|---|---|"]
    for n in devices:
        rep, split = largest_side(scan, n, False), largest_side(scan, n, True)
        case, tiles = scan.case(split), scan.grid(split, n)
        memory = split_memory(case, scan.batch_size, n, tiles).total
        link = link_for(n)
        seconds = predict_split(case, tiles, scan.batch_size, n, link, gpu).iteration_s
        held = "–" if n == 1 else f"{tiles.held_px / tiles.owned_px:.2f}x"
        lines.append(f"| {n} | {rep:,} ({scan.case(rep).n_patterns:,}) | {split:,} ({case.n_patterns:,}) | {held} | "
                     f"{memory / GB:.1f} of {budget / GB:.0f} | {seconds:.1f} ({link.name.split(' (')[0]}) |")
    return "\n".join(lines)


def versus_footprint_table(layout: Layout, batch_size: int, devices: tuple[int, ...] = DEVICE_COUNTS,
                           gpu: GpuAssumption | None = None, margin_px: float | None = None) -> str:
    """Markdown: s/iteration of ``layout`` per N, replicated with the footprint exchange against
    split (tilings from tiles.py), on the link ``link_for`` N; "–" where a tile would be narrower
    than the window (refused)."""
    gpu = gpu or h100_assumption()
    cost = gpu_step_cost(layout, gpu)
    case = Case.of(layout)
    margin = 1.0 if margin_px is None else margin_px
    lines = ["| N | link | footprint s/iteration | `shard_object` s/iteration | halo MiB per step (2 all-reduces) | "
             "GB per process: replicated / split |", "|---|---|---|---|---|---|"]
    for n in devices:
        link = link_for(n)
        footprint = predict_iteration(cost, footprint_exchange(layout, batch_size, "compact", devices=n), link, n,
                                      layout.n_patterns, batch_size).iteration_s
        rep = replicated_memory(case, batch_size, n).total / GB
        tiling = layout_tiling(layout, n, margin)
        tiles = tile_sizes(tiling)
        if tiles.narrowest_px < layout.window_px:
            lines.append(f"| {n} | {link.name.split(' (')[0]} | {footprint:.3f} | – (tile {tiles.narrowest_px} px) "
                         f"| – | {rep:.1f} / – |")
            continue
        split = predict_split(case, tiles, batch_size, n, link, gpu)
        halo = 2 * tiles.segment_px * case.bytes_per_object_px / 2**20
        lines.append(f"| {n} | {link.name.split(' (')[0]} | {footprint:.3f} | {split.iteration_s:.3f} | {halo:.2f} | "
                     f"{rep:.1f} / {split_memory(case, batch_size, n, tiles).total / GB:.1f} |")
    return "\n".join(lines)


def split_tables(gpu: GpuAssumption | None = None) -> str:
    """The tables of benchmarks/records/2026-11-27-scaling.md's section on ``runtime.shard_object`` (Markdown)."""
    gpu = gpu or h100_assumption()
    parts = [f"Predictions, not measurements. {DEVICE_BYTES / GB:.0f} GB per GPU, {RESERVE_BYTES / GB:.0f} GB kept "
             f"free; positions fixed (halo margin 1 px); GPU assumption: {gpu.name}; N <= 8 on NVLink, more on "
             "InfiniBand HDR."]
    for title, scan in (("Electron multislice: raster step 2.87 px, 128 px patterns, 8 slices, 4 probe modes, batch "
                         "128", ELECTRON),
                        ("X-ray: raster step 40 px, 256 px patterns, 1 slice, 4 probe modes, batch 512", XRAY)):
        parts += [f"#### Largest square object on N x 80 GB: {title}", largest_object_table(scan, gpu=gpu)]
    electron = raster_layout((512, 512), ELECTRON.step_px, 128, slices=8, probe_modes=4)
    xray = raster_layout((100, 100), XRAY.step_px, 256, slices=1, probe_modes=4)
    for title, layout, batch in (("Electron, 512 x 512 scan", electron, 128),
                                 ("X-ray, 100 x 100 scan (the reference case)", xray, 512)):
        parts += [f"#### s/iteration against the footprint exchange: {title}, object {layout.object_shape[0]} px "
                  f"square, batch {batch}", versus_footprint_table(layout, batch, gpu=gpu)]
    return "\n\n".join(parts)
