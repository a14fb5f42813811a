"""A scaling model: predicted seconds per iteration on N devices joined by a link.

Predictions, not measurements. One iteration (every position once) is the sum over its steps
of what the busiest device does:

    compute:  fixed_s + per_pattern_s * b        b = its share of the step's global batch
    update:   update_s                           replicated on every device: does not shrink with N
    exchange: collectives * 2(N-1) * latency_s + 2(N-1)/N * bytes / bandwidth   (ring all-reduce)

The inputs are the compute time per pattern and per step (fitted to 1-process runs here, or
derived from a stated assumption for a GPU), the bytes and collectives each step exchanges
(worked out from the geometry alone: the whole object before issue 11's change, the footprint
of each compact global batch after it) and a ``Link`` (latency and bandwidth; presets below,
or measured here with gloo by ``measure_link``). ``check_against_launches`` compares the model
with real launches of ``ptyacc speedtest`` on this machine; docs/scaling.md has the tables.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptyacc.data.batches import EpochBatches
from ptyacc.errors import PtyaccError
from ptyacc.exchange import footprint_box
from ptyacc.geometry import ObjectGeometry

FLOAT32_BYTES = 4


# ----------------------------------------------------------------------------- links


@dataclass(frozen=True)
class Link:
    """A link between devices as a ring all-reduce sees it: each hop of the ring costs
    ``latency_s`` per message and carries ``bandwidth_bytes_per_s`` in each direction."""

    name: str
    latency_s: float
    bandwidth_bytes_per_s: float
    source: str = ""
    max_devices: int | None = None  # links inside one node join at most this many devices


NVLINK = Link(
    "NVLink 4 (H100 SXM, NVSwitch; within one node)", 2e-6, 370e9,
    "450 GB/s per direction is the line rate per H100 SXM GPU (900 GB/s both ways); NCCL gets "
    "about 370 GB/s of it in a ring after ~20% protocol overhead (NCCL maintainer in "
    "NVIDIA/nccl-tests issue 212). Latency: assumed 2 us per hop (NCCL's low-latency protocol "
    "through NVSwitch), i.e. ~30 us for an 8-GPU all-reduce of a few bytes.", max_devices=8)
PCIE = Link(
    "PCIe 4.0 x16 (GPU to GPU through the host bridge)", 5e-6, 22e9,
    "32 GB/s per direction line rate (16 GT/s x 16 lanes, 128b/130b); assumed 70% of it (22 GB/s) "
    "for peer copies through the host bridge; latency assumed 5 us per hop.", max_devices=8)
INFINIBAND_HDR = Link(
    "InfiniBand HDR (200 Gb/s, one port per node)", 6e-6, 23e9,
    "25 GB/s per direction line rate; assumed 23 GB/s achieved (RDMA bandwidth tests reach ~92%); "
    "latency ~1 us on the wire, assumed 6 us per hop through NCCL's network proxy. A ring that "
    "crosses nodes goes at its slowest hop, so this is also the figure for 8-GPU nodes with one port.")
ETHERNET_10G = Link(
    "10 GbE (TCP sockets)", 50e-6, 1.1e9,
    "1.25 GB/s line rate, ~1.1 GB/s for TCP; latency assumed 50 us per hop (kernel TCP stack and "
    "the socket transport of NCCL or gloo).")
LINKS = {"nvlink": NVLINK, "pcie": PCIE, "infiniband_hdr": INFINIBAND_HDR, "ethernet_10g": ETHERNET_10G}


def ring_allreduce_s(n_bytes: float, devices: int, link: Link) -> float:
    """Seconds of one ring all-reduce of ``n_bytes`` (each device's buffer) over ``devices``.

    Reduce-scatter then all-gather, N-1 hops each, every hop carrying 1/N of the buffer:
    2(N-1) latency + 2(N-1)/N bytes / bandwidth. The ring because it is bandwidth-optimal (no
    all-reduce can send less than 2(N-1)/N of the buffer per device), it is what NCCL uses for
    large buffers and what torch's gloo all-reduce runs, and the buffers here (an object
    footprint or the whole object) are large. Its latency term grows with N where NCCL's tree
    for small buffers grows with log N, so for tiny buffers on many devices it overestimates.
    An empty buffer still costs the latencies: every rank issues every collective (DESIGN rule 9).
    """
    if devices <= 1:
        return 0.0
    hops = 2 * (devices - 1)
    return hops * link.latency_s + hops / devices * n_bytes / link.bandwidth_bytes_per_s


# ----------------------------------------------------------------------------- costs and prediction


@dataclass(frozen=True)
class StepCost:
    """Seconds one device spends on a step, apart from the exchange.

    fixed_s: per step whatever the batch (Python, operator launches, small tensors).
    per_pattern_s: per pattern the device computes (forward and backward of the data term).
    update_s: per step on the whole replicated state (the zeroed object gradient, Adam on every
        object pixel): the same on every device, so it does not shrink with N.
    copy_bytes_per_s: memory bandwidth for the exchange's copies (into the all-reduce buffer,
        the division, back out: 6 bytes moved per byte exchanged); None leaves them out.
    """

    fixed_s: float
    per_pattern_s: float
    update_s: float = 0.0
    copy_bytes_per_s: float | None = None


@dataclass(frozen=True)
class Exchange:
    """What the steps send: mean bytes per step (each device's buffer, float32), all-reduces per
    step, and the all-reduces per iteration outside the steps (the loss sum)."""

    name: str
    bytes_per_step: float
    collectives_per_step: int
    collectives_per_iteration: int = 1


@dataclass(frozen=True)
class Prediction:
    """Seconds per iteration and its parts (the busiest device)."""

    devices: int
    compute_s: float
    update_s: float
    exchange_s: float

    @property
    def iteration_s(self) -> float:
        return self.compute_s + self.update_s + self.exchange_s


def epoch_load(n_patterns: int, batch_size: int, devices: int) -> tuple[int, int]:
    """(steps per iteration, patterns the busiest device computes per iteration), with the
    global batches cut as ``EpochBatches`` cuts them: max(B, N) positions per step, step sizes
    differing by at most one, each step split over the devices as evenly as it goes."""
    batch = max(min(batch_size, n_patterns), devices)
    steps = max(n_patterns // batch, 1)
    size, larger = divmod(n_patterns, steps)
    busiest = larger * -(-(size + 1) // devices) + (steps - larger) * -(-size // devices)
    return steps, busiest


def predict_iteration(cost: StepCost, exchange: Exchange, link: Link, devices: int, n_patterns: int,
                      batch_size: int, cores: int | None = None) -> Prediction:
    """Seconds per iteration on ``devices`` devices.

    cores: the devices are processes sharing this many CPU cores (one thread each): with more
    processes than cores every process gets cores/devices of a core, for its computation and
    for the copies and reductions of its all-reduces alike (on one machine gloo's all-reduce is
    memory copies done by the processes themselves). None: dedicated devices (GPUs).
    """
    steps, busiest = epoch_load(n_patterns, batch_size, devices)
    share = max(1.0, devices / cores) if cores else 1.0
    compute = share * (steps * cost.fixed_s + busiest * cost.per_pattern_s)
    update = share * steps * cost.update_s
    if devices == 1:
        return Prediction(devices, compute, update, 0.0)
    wire = steps * exchange_step_s(exchange, devices, link)
    wire += exchange.collectives_per_iteration * ring_allreduce_s(0, devices, link)
    copies = steps * 6 * exchange.bytes_per_step / cost.copy_bytes_per_s if cost.copy_bytes_per_s else 0.0
    return Prediction(devices, compute, update, share * (wire + copies))


def exchange_step_s(exchange: Exchange, devices: int, link: Link) -> float:
    """Seconds of one step's all-reduces: their latencies, and the bytes once through the ring
    (splitting a buffer into several all-reduces adds latency, not bandwidth time)."""
    if devices <= 1:
        return 0.0
    return (exchange.collectives_per_step * ring_allreduce_s(0, devices, link)
            + ring_allreduce_s(exchange.bytes_per_step, devices, link) - ring_allreduce_s(0, devices, link))


def fit_step_cost(runs: list[tuple[int, int, float]]) -> StepCost:
    """fixed_s and per_pattern_s from 1-device runs (steps per iteration, patterns per iteration,
    seconds per iteration) at two or more batch sizes: least squares on
    seconds = steps * fixed_s + patterns * per_pattern_s, relative errors weighted alike. Costs
    per iteration (constraints, loss sum) come out spread over the steps, in fixed_s."""
    rows = np.array([[steps, patterns] for steps, patterns, _ in runs], dtype=float)
    seconds = np.array([s for *_, s in runs], dtype=float)
    if len({steps for steps, _, _ in runs}) < 2:
        raise ValueError("fit_step_cost needs runs with at least two different numbers of steps (batch sizes)")
    (fixed, per_pattern), *_ = np.linalg.lstsq(rows / seconds[:, None], np.ones_like(seconds), rcond=None)
    return StepCost(fixed_s=float(fixed), per_pattern_s=float(per_pattern))


# ----------------------------------------------------------------------------- bytes from the geometry


@dataclass(frozen=True)
class Layout:
    """The optimisable state of a reconstruction and where its probe windows fall: all that the
    exchange depends on, without data.

    positions_px: (N, 2) probe centres (y, x) in object pixels (``ObjectGeometry.positions_px``).
    object_shape: (Ny, Nx) object pixels; window_px: K, the probe window (pattern size).
    """

    positions_px: np.ndarray
    object_shape: tuple[int, int]
    window_px: int
    slices: int = 1
    probe_modes: int = 1
    object_modes: int = 1
    refine_positions: bool = False
    background: bool = False
    intensity_weights: bool = False

    @property
    def n_patterns(self) -> int:
        return len(self.positions_px)

    def parameter_floats(self) -> list[tuple[str, int]]:
        """(name, float32 values) of every parameter in the model's registration order
        (``PtychoModel``: complex values stored as real pairs)."""
        k, n = self.window_px, self.n_patterns
        params = [("object", self.object_modes * self.slices * self.object_shape[0] * self.object_shape[1] * 2),
                  ("probe", self.probe_modes * k * k * 2)]
        if self.refine_positions:
            params.append(("position_offsets", n * 2))
        if self.background:
            params.append(("background", k * k))
        if self.intensity_weights:
            params.append(("intensity_weights", n))
        return params

    def window_corners(self) -> np.ndarray:
        """(N, 2) integer top-left pixel of each window: round(centre - K//2), clamped to
        [0, object size - K] as ``PtychoModel`` does (round half to even, like torch.round)."""
        corner = np.round(self.positions_px - self.window_px // 2)
        high = np.asarray(self.object_shape) - self.window_px
        return np.minimum(np.clip(corner, 0, None), high).astype(np.int64)


def raster_layout(scan_shape: tuple[int, int], step_px: float, window_px: int, **state) -> Layout:
    """A raster scan of ``scan_shape`` positions ``step_px`` object pixels apart, on the object
    canvas ptyacc would make for it (``ObjectGeometry.around``)."""
    ny, nx = scan_shape
    y, x = np.meshgrid(np.arange(ny) * step_px, np.arange(nx) * step_px, indexing="ij")
    geometry = ObjectGeometry.around(np.stack([y.ravel(), x.ravel()], axis=1), 1.0, window_px)
    return Layout(geometry.positions_px, geometry.shape, window_px, **state)


def layout_from_config(config) -> Layout:
    """The layout of the reconstruction ``config`` describes (reads or simulates its data)."""
    from ptyacc.data import load_data

    data = load_data(config)
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px, config.model.object_padding_px)
    model = config.model
    return Layout(geometry.positions_px, geometry.shape, data.detector_px, model.slices, model.probe_modes,
                  model.object_modes, config.optim.start.positions is not None, model.background,
                  model.intensity_weights)


DDP_FIRST_BUCKET_BYTES = 2**20  # torch's DDP: the first bucket is capped at 1 MiB
DDP_BUCKET_BYTES = 25 * 2**20  # and the others at 25 MiB (bucket_cap_mb)


def ddp_bucket_count(tensor_bytes: list[int]) -> int:
    """All-reduces per step of DDP for parameters of these sizes (registration order): DDP
    fills buckets from the last parameter backwards and closes one once it reaches its cap."""
    buckets, filled, cap = 0, 0, DDP_FIRST_BUCKET_BYTES
    for nbytes in reversed(tensor_bytes):
        filled += nbytes
        if filled >= cap:
            buckets, filled, cap = buckets + 1, 0, DDP_BUCKET_BYTES
    return buckets + (filled > 0)


def dense_exchange(layout: Layout) -> Exchange:
    """Today's exchange: DDP all-reduces every parameter's whole gradient every step."""
    sizes = [floats * FLOAT32_BYTES for _, floats in layout.parameter_floats()]
    return Exchange("dense (whole object)", float(sum(sizes)), ddp_bucket_count(sizes))


def footprint_exchange(layout: Layout, batch_size: int, grouping: str = "compact", seed: int = 0,
                       devices: int = 1) -> Exchange:
    """Issue 11's exchange: per step one all-reduce of the object inside the footprint (the
    bounding box of the global batch's windows, ``footprint_box``) packed with every other
    parameter whole. Bytes are the mean over one epoch's global batches as ``EpochBatches``
    forms them (``grouping``, ``seed``); they depend on N only through a batch of at least N."""
    batches = EpochBatches(layout.positions_px, batch_size, devices, grouping, seed).global_batches()
    corners = layout.window_corners()
    per_pixel = layout.object_modes * layout.slices * 2
    others = sum(floats for name, floats in layout.parameter_floats() if name != "object")
    boxes = [footprint_box(corners[batch], layout.window_px) for batch in batches]
    floats = [per_pixel * (y1 - y0) * (x1 - x0) + others for y0, y1, x0, x1 in boxes]
    return Exchange(f"footprint ({grouping} batches)", FLOAT32_BYTES * float(np.mean(floats)), 1)


# ----------------------------------------------------------------------------- GPU compute: assumptions

# Bytes the data term moves per pattern, counted from ptyacc's fused forward and backward
# (physics/fused.py), per pixel of a K x K wave, complex64 = 8 bytes read or written:
WAVE_BYTES_FIRST_SLICE = 124  # probe x patch, far-field FFT, |.|^2, gradient scale, adjoint FFT, patch and probe gradients
WAVE_BYTES_PER_EXTRA_SLICE = 168  # 2 FFTs and 2 products forward; the same plus 2 gradient products backward
PATCH_BYTES_PER_SLICE = 40  # per object mode: gather the patch, stack its gradient, scatter-add it into the object gradient
LOSS_BYTES = 100  # per pattern pixel: the dozen real-valued passes of the loss and its derivative
UPDATE_BYTES_PER_FLOAT = 40  # per parameter float and step: zeroed gradient, gradient scaling, fused Adam (7 x 4 bytes)


def pattern_bytes(window_px: int, slices: int, probe_modes: int, object_modes: int = 1) -> float:
    """Bytes of memory traffic of one pattern's forward and backward (the count above)."""
    waves = probe_modes * object_modes * (WAVE_BYTES_FIRST_SLICE + WAVE_BYTES_PER_EXTRA_SLICE * (slices - 1))
    return window_px**2 * (waves + object_modes * PATCH_BYTES_PER_SLICE * slices + LOSS_BYTES)


# PtyRAD 1.0 on one full NVIDIA A100 80GB (Lee et al., "PtyRAD: A High-performance and Flexible
# Ptychographic Reconstruction Framework with Automatic Differentiation", arXiv 2505.07814,
# Supplementary Table S5): experimental tBL-WSe2, 128 x 128 positions, 128 px patterns,
# 12 probe modes, 6 slices; seconds per iteration at batch sizes 16, 64, 256, 1024.
PTYRAD_A100_ITERATION_S = {16: 9.83, 64: 6.95, 256: 5.85, 1024: 5.69}
PTYRAD_CASE = {"n_patterns": 128 * 128, "window_px": 128, "slices": 6, "probe_modes": 12}
A100_MEMORY_BYTES_PER_S = 2.04e12  # A100 80GB SXM, HBM2e
H100_MEMORY_BYTES_PER_S = 3.35e12  # H100 SXM, HBM3


@dataclass(frozen=True)
class GpuAssumption:
    """How fast one GPU is assumed to run ptyacc: the data term reaches ``efficiency`` of the
    memory-bandwidth bound of ``pattern_bytes``; streaming updates reach ``update_efficiency``;
    ``fixed_s`` per step (operator launches, Python)."""

    name: str
    memory_bytes_per_s: float
    efficiency: float
    update_efficiency: float
    fixed_s: float
    source: str = ""


def h100_assumption() -> GpuAssumption:
    """An H100 SXM running ptyacc as efficiently as PtyRAD runs on an A100: the fraction of the
    memory-bandwidth bound PtyRAD reaches per pattern, and PtyRAD's per-step overhead, both from
    the fit of its Table S5 (seconds = steps * fixed + patterns * per_pattern)."""
    n = PTYRAD_CASE["n_patterns"]
    ptyrad = fit_step_cost([(n // b, n, s) for b, s in PTYRAD_A100_ITERATION_S.items()])
    bound_s = pattern_bytes(PTYRAD_CASE["window_px"], PTYRAD_CASE["slices"], PTYRAD_CASE["probe_modes"]) \
        / A100_MEMORY_BYTES_PER_S
    return GpuAssumption("H100 SXM (assumed)", H100_MEMORY_BYTES_PER_S, bound_s / ptyrad.per_pattern_s, 0.8,
                         ptyrad.fixed_s,
                         f"PtyRAD on an A100 (arXiv 2505.07814, Table S5): {ptyrad.per_pattern_s * 1e6:.0f} us per "
                         f"pattern (12 modes, 6 slices, 128 px) = {bound_s / ptyrad.per_pattern_s:.2f} of the "
                         f"memory-bandwidth bound; {ptyrad.fixed_s * 1e3:.1f} ms per step")


def gpu_step_cost(layout: Layout, gpu: GpuAssumption) -> StepCost:
    """The step cost of ``layout`` on one GPU under the assumption ``gpu``."""
    per_pattern = pattern_bytes(layout.window_px, layout.slices, layout.probe_modes, layout.object_modes) \
        / (gpu.memory_bytes_per_s * gpu.efficiency)
    floats = sum(f for _, f in layout.parameter_floats())
    update = floats * UPDATE_BYTES_PER_FLOAT / (gpu.memory_bytes_per_s * gpu.update_efficiency)
    return StepCost(gpu.fixed_s, per_pattern, update, gpu.memory_bytes_per_s * gpu.update_efficiency)


# ----------------------------------------------------------------------------- tables


DEVICE_COUNTS = (1, 2, 4, 8, 16, 32, 64)


def speedup_table(layout: Layout, batch_size: int, cost: StepCost, links: dict[str, Link] = LINKS,
                  devices: tuple[int, ...] = DEVICE_COUNTS) -> str:
    """Markdown: predicted speed-up against one device, before (dense) / after (footprint), per
    link; "–" beyond the devices one node's link joins; * where N > batch (the batch grows to N)."""
    dense = dense_exchange(layout)
    single = predict_iteration(cost, dense, NVLINK, 1, layout.n_patterns, batch_size).iteration_s
    header = "| devices | " + " | ".join(f"{name} before / after" for name in links) + " |"
    lines = [header, "|---" * (len(links) + 1) + "|"]
    for n in devices:
        after = footprint_exchange(layout, batch_size, "compact", devices=n)
        cells = []
        for link in links.values():
            if link.max_devices is not None and n > link.max_devices:
                cells.append("–")
                continue
            before_s = predict_iteration(cost, dense, link, n, layout.n_patterns, batch_size).iteration_s
            after_s = predict_iteration(cost, after, link, n, layout.n_patterns, batch_size).iteration_s
            cells.append(f"{single / before_s:.2f} / {single / after_s:.2f}")
        lines.append(f"| {n}{'*' if n > batch_size else ''} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe_case(layout: Layout, batch_size: int, cost: StepCost) -> str:
    """One paragraph of the figures behind a table."""
    dense = dense_exchange(layout)
    after = footprint_exchange(layout, batch_size, "compact")
    steps, _ = epoch_load(layout.n_patterns, batch_size, 1)
    single = predict_iteration(cost, dense, NVLINK, 1, layout.n_patterns, batch_size)
    return (f"{layout.n_patterns} positions, {layout.window_px} px windows, object {layout.object_shape[0]} x "
            f"{layout.object_shape[1]} px x {layout.slices} slice(s), {layout.probe_modes} probe mode(s); batch "
            f"{batch_size} ({steps} steps per iteration). Per step: before {dense.bytes_per_step / 2**20:.2f} MiB in "
            f"{dense.collectives_per_step} all-reduce(s), after {after.bytes_per_step / 2**20:.3f} MiB in 1 "
            f"({after.bytes_per_step / dense.bytes_per_step:.1%}). One GPU: {single.iteration_s:.3f} s per iteration "
            f"(compute {single.compute_s:.3f} s of which {steps * cost.fixed_s:.3f} s fixed per-step costs, "
            f"update {single.update_s:.3f} s; per pattern {cost.per_pattern_s * 1e6:.1f} us, per step "
            f"{cost.fixed_s * 1e3:.2f} ms + update {cost.update_s * 1e3:.3f} ms).")


# ----------------------------------------------------------------------------- this machine's link


@dataclass(frozen=True)
class LinkMeasurement:
    """Gloo all-reduce times between ``processes`` local processes: per buffer size, the times of
    every repeat (the slowest rank's); and the links fitted to their medians and to their minima
    (the least disturbed by other work on the machine)."""

    processes: int
    sizes_bytes: tuple[int, ...]
    times_s: tuple[tuple[float, ...], ...]

    @property
    def median_s(self) -> list[float]:
        return [statistics.median(t) for t in self.times_s]

    @property
    def min_s(self) -> list[float]:
        return [min(t) for t in self.times_s]

    @property
    def link(self) -> Link:
        return fit_link(self.sizes_bytes, self.median_s, self.processes, f"gloo, {self.processes} local processes, medians")

    @property
    def best_link(self) -> Link:
        return fit_link(self.sizes_bytes, self.min_s, self.processes, f"gloo, {self.processes} local processes, minima")

    def __add__(self, other: LinkMeasurement) -> LinkMeasurement:
        """Both measurements' repeats pooled (same processes and sizes)."""
        if (self.processes, self.sizes_bytes) != (other.processes, other.sizes_bytes):
            raise ValueError("only measurements of the same processes and sizes can be pooled")
        return LinkMeasurement(self.processes, self.sizes_bytes,
                               tuple(a + b for a, b in zip(self.times_s, other.times_s, strict=True)))


LINK_SIZES_BYTES = (8, 2**10, 2**14, 2**17, 2**20, 2**22, 2**24, 2**26)


def measure_link(processes: int = 2, sizes_bytes: tuple[int, ...] = LINK_SIZES_BYTES, repeats: int = 15,
                 timeout_s: float = 120.0) -> LinkMeasurement:
    """Time gloo all-reduces of float32 buffers of ``sizes_bytes`` between ``processes`` local
    processes (one thread each, started here), ``repeats`` times each after 2 untimed ones."""
    import torch.multiprocessing as mp

    from ptyacc.speedtest import free_port

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "link.json"
        mp.start_processes(_link_worker, args=(processes, free_port(), list(sizes_bytes), repeats, str(out), timeout_s),
                           nprocs=processes, start_method="spawn")
        times = json.loads(out.read_text())
    return LinkMeasurement(processes, tuple(sizes_bytes), tuple(tuple(t) for t in times))


SMALL_BUFFER_BYTES = 2**14  # at most this: the time is nearly all latency
LARGE_BUFFER_BYTES = 2**20  # at least this: the time is mostly bandwidth


def fit_link(sizes_bytes, seconds, processes: int, name: str = "") -> Link:
    """The ring model's latency and bandwidth from all-reduce times: the latency from the
    buffers of 16 KiB or less (nearly all latency), the bandwidth from those of 1 MiB or more,
    fitted in absolute terms so that the largest buffers, whose time matters most, decide it;
    a few rounds, each using the other's latest value (exact for times the model made)."""
    hops = 2 * (processes - 1)
    b, t = np.asarray(sizes_bytes, dtype=float), np.asarray(seconds, dtype=float)
    small, large = b <= SMALL_BUFFER_BYTES, b >= LARGE_BUFFER_BYTES
    if not small.any() or not large.any():
        raise ValueError("fit_link needs buffers of at most 16 KiB and of at least 1 MiB")
    ring_bytes = hops / processes * b
    inverse_bandwidth = 0.0
    for _ in range(20):
        latency = float(np.mean(t[small] - ring_bytes[small] * inverse_bandwidth)) / hops
        x, y = ring_bytes[large], t[large] - hops * latency
        inverse_bandwidth = float(np.dot(x, y) / np.dot(x, x))
    if latency <= 0 or inverse_bandwidth <= 0:
        raise ValueError(f"all-reduce times {list(seconds)} do not fit latency + bytes / bandwidth")
    return Link(name or f"gloo, {processes} local processes", latency, 1 / inverse_bandwidth,
                f"fitted to all-reduces of {int(b.min())} B to {b.max() / 2**20:.0f} MiB")


def _link_worker(rank: int, processes: int, port: int, sizes_bytes: list[int], repeats: int, out: str,
                 timeout_s: float) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=processes,
                            timeout=timedelta(seconds=timeout_s))
    try:
        times = []
        for size in sizes_bytes:
            buffer = torch.ones(max(1, size // FLOAT32_BYTES))
            for _ in range(2):
                dist.all_reduce(buffer)
            mine = []
            for _ in range(repeats):
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(buffer)
                mine.append(time.perf_counter() - start)
            slowest = torch.tensor(mine, dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            times.append(slowest.tolist())
        if rank == 0:
            Path(out).write_text(json.dumps(times))
    finally:
        dist.destroy_process_group()


def format_link(measurement: LinkMeasurement) -> str:
    lines = [f"gloo all-reduce between {measurement.processes} local processes, "
             f"{len(measurement.times_s[0])} repeats per size:",
             "| bytes | median s | min s | model (medians) s | model (minima) s |", "|---|---|---|---|---|"]
    link, best = measurement.link, measurement.best_link
    for size, med, low in zip(measurement.sizes_bytes, measurement.median_s, measurement.min_s, strict=True):
        lines.append(f"| {size} | {med:.6f} | {low:.6f} | {ring_allreduce_s(size, measurement.processes, link):.6f} | "
                     f"{ring_allreduce_s(size, measurement.processes, best):.6f} |")
    for what, fitted in (("medians", link), ("minima", best)):
        lines.append(f"fit to the {what}: latency {fitted.latency_s * 1e6:.0f} us per hop, "
                     f"bandwidth {fitted.bandwidth_bytes_per_s / 1e9:.2f} GB/s")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the check on this machine


@dataclass(frozen=True)
class CheckRow:
    """Predicted against measured seconds per iteration for one batch size and process count:
    medians (typical) and minima (least disturbed by other work on the machine)."""

    batch_size: int
    processes: int
    exchange: str  # the exchange the run used: the one whose bytes are nearest its measured bytes
    measured_bytes: float | None  # all-reduced per iteration and process (results.h5), None for 1 process
    dense_bytes: float  # per iteration, predicted
    footprint_bytes: float  # per iteration, predicted for compact batches
    measured_median_s: float
    measured_min_s: float
    predicted_median_s: float
    predicted_min_s: float
    predicted_exchange_s: float  # all-reduce seconds per iteration, link fitted to the medians
    measured_exchange_s: float | None  # median of the run's own record (waits for the slower process included)


def warm_iterations(times: list[float]) -> list[float]:
    """The iteration times after the first (which warms up), or all of them when fewer than 3."""
    return list(times[1:] if len(times) >= 3 else times)


def check_against_launches(config_path: Path, overrides: list[str], process_counts: list[int], batch_sizes: list[int],
                           trials: int, out_dir: Path, echo=print
                           ) -> tuple[LinkMeasurement, list[CheckRow], StepCost, StepCost]:
    """Calibrate the model on this machine and compare it with real launches.

    Each trial measures the link (gloo all-reduces between 2 local processes) and then launches
    ``ptyacc speedtest`` (4 iterations unless overridden, one thread per process) for every
    batch size and process count, so that trials interleave and drifts of the machine's load
    touch every configuration alike. fixed_s and per_pattern_s are fitted to the 1-process runs;
    the 2-, 4-, ... process runs are predicted from that fit, the link, this machine's cores and
    the bytes worked out from the geometry: dense, or the footprint of compact or random
    batches, whichever is nearest the bytes the run measured. Once with medians, once with minima.
    """
    from ptyacc.config import load_config
    from ptyacc.speedtest import run_speedtest

    if 1 not in process_counts or len(set(batch_sizes)) < 2 or min(process_counts + batch_sizes) < 1:
        raise PtyaccError("predict: the check fits the compute time to 1-process runs at two batch sizes or more: "
                          "--processes must include 1 and --batch-sizes give two different sizes, all >= 1")
    overrides = ["optim.iterations=4", *overrides]
    config = load_config(config_path, overrides)
    layout = layout_from_config(config)
    n, cores = layout.n_patterns, os.cpu_count() or 1
    if len({epoch_load(n, b, 1)[0] for b in batch_sizes}) < 2:
        raise PtyaccError(f"predict: batch sizes {batch_sizes} all give {epoch_load(n, batch_sizes[0], 1)[0]} step(s) "
                          f"per iteration of {n} positions; give sizes that give different numbers of steps")
    measurement = None
    times: dict[tuple[int, int], list[float]] = {}
    comm: dict[tuple[int, int], list[int]] = {}
    comm_s: dict[tuple[int, int], list[float]] = {}
    for trial in range(trials):
        echo(f"trial {trial + 1}/{trials}: gloo all-reduces between 2 local processes")
        this = measure_link(2)
        measurement = this if measurement is None else measurement + this
        for batch in batch_sizes:
            sets = [*overrides, f"optim.batch_size={batch}"]
            for run in run_speedtest(config_path, process_counts, 1, out_dir / f"trial{trial}" / f"batch{batch}", sets,
                                     threads_per_process=1, echo=lambda line, b=batch: echo(f"batch {b}, {line}{_load()}")):
                times.setdefault((batch, run.processes), []).extend(warm_iterations(run.iteration_time_s))
                comm.setdefault((batch, run.processes), []).extend(run.comm_bytes)
                comm_s.setdefault((batch, run.processes), []).extend(run.comm_time_s)
    echo(format_link(measurement))
    fits = {stat: fit_step_cost([(epoch_load(n, b, 1)[0], n, stat(times[(b, 1)])) for b in batch_sizes])
            for stat in (statistics.median, min)}
    links = {statistics.median: measurement.link, min: measurement.best_link}
    rows = []
    for batch in batch_sizes:
        for p in process_counts:
            steps, _ = epoch_load(n, batch, p)
            candidates = [dense_exchange(layout), *(footprint_exchange(layout, batch, grouping, config.runtime.seed, p)
                                                    for grouping in ("compact", "random"))]
            measured_bytes = float(statistics.median(comm[(batch, p)])) if comm[(batch, p)] else None
            exchange = min(candidates, key=lambda e: abs(steps * e.bytes_per_step - (measured_bytes or 0.0)))
            if measured_bytes is None:
                exchange = candidates[0]
            predicted = {stat: predict_iteration(fits[stat], exchange, links[stat], p, n, batch, cores) for stat in fits}
            rows.append(CheckRow(batch, p, exchange.name if p > 1 else "–", measured_bytes,
                                 steps * candidates[0].bytes_per_step, steps * candidates[1].bytes_per_step,
                                 statistics.median(times[(batch, p)]), min(times[(batch, p)]),
                                 predicted[statistics.median].iteration_s, predicted[min].iteration_s,
                                 predicted[statistics.median].exchange_s,
                                 statistics.median(comm_s[(batch, p)]) if comm_s[(batch, p)] else None))
    return measurement, rows, fits[statistics.median], fits[min]


def _load() -> str:
    """The machine's 1-minute load average, to read the timings by."""
    return f" (load average {os.getloadavg()[0]:.1f})" if hasattr(os, "getloadavg") else ""


def format_check(rows: list[CheckRow], median_cost: StepCost, min_cost: StepCost, cores: int | None = None) -> str:
    cores = cores or os.cpu_count() or 1
    lines = [f"compute fitted to the 1-process runs (one thread, {cores} cores): medians {median_cost.fixed_s * 1e3:.2f} ms "
             f"per step + {median_cost.per_pattern_s * 1e6:.1f} us per pattern; minima {min_cost.fixed_s * 1e3:.2f} ms + "
             f"{min_cost.per_pattern_s * 1e6:.1f} us",
             "| batch | processes | exchange | MiB/iteration measured / dense / compact footprint | median s/iteration "
             "predicted / measured | ratio | min s/iteration predicted / measured | ratio | all-reduce s/iteration "
             "predicted / measured (medians) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        measured_mib = f"{r.measured_bytes / 2**20:.3f}" if r.measured_bytes is not None else "–"
        exchange = (f"{r.predicted_exchange_s:.4f} / {r.measured_exchange_s:.4f}" if r.measured_exchange_s is not None
                    else "–")
        lines.append(f"| {r.batch_size} | {r.processes} | {r.exchange} | {measured_mib} / {r.dense_bytes / 2**20:.3f} / "
                     f"{r.footprint_bytes / 2**20:.3f} | {r.predicted_median_s:.4f} / {r.measured_median_s:.4f} | "
                     f"{r.predicted_median_s / r.measured_median_s:.2f} | {r.predicted_min_s:.4f} / "
                     f"{r.measured_min_s:.4f} | {r.predicted_min_s / r.measured_min_s:.2f} | {exchange} |")
    checked = [r for r in rows if r.processes > 1]
    for what, ratio in (("medians", lambda r: r.predicted_median_s / r.measured_median_s),
                        ("minima", lambda r: r.predicted_min_s / r.measured_min_s)):
        worst = max((abs(ratio(r) - 1) for r in checked), default=0.0)
        lines.append(f"{what}: largest deviation of the multi-process predictions {worst:.0%} "
                     f"({'within' if worst <= 0.25 else 'NOT within'} 25%)")
    lines.append("(1-process rows are the fit itself. The measured all-reduce time includes waiting for the slower "
                 "process, which other work on a shared machine lengthens: every step waits for both.)")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- reference cases and the command

ELECTRON_STEP_PX = 0.429 / 0.1494  # PtyRAD's tBL-WSe2: 0.429 Å scan step, 0.1494 Å pixels
XRAY_STEP_PX = 40.0  # 256 px windows, 85% linear overlap


def reference_cases() -> list[tuple[str, Layout, tuple[int, ...]]]:
    """(title, layout, batch sizes) of the two cases in docs/scaling.md."""
    electron = raster_layout((128, 128), ELECTRON_STEP_PX, 128, slices=8, probe_modes=4)
    xray = raster_layout((100, 100), XRAY_STEP_PX, 256, slices=1, probe_modes=4)
    return [("Electron multislice: 128 x 128 scan, 128 px patterns, 8 slices, 4 probe modes", electron, (32, 128)),
            ("Large X-ray field of view: 100 x 100 = 10,000 positions, 256 px patterns, 1 slice, 4 probe modes",
             xray, (128, 512))]


def sensitivity(layout: Layout, batch_size: int, gpu: GpuAssumption) -> str:
    """How the 8-GPU NVLink and 64-GPU InfiniBand speed-ups after the change move when the GPU
    assumption does."""
    variants = [("as assumed", gpu),
                ("per-step overhead 1 ms", GpuAssumption(**{**gpu.__dict__, "fixed_s": 1e-3})),
                ("data term at the memory-bandwidth bound", GpuAssumption(**{**gpu.__dict__, "efficiency": 1.0})),
                ("both", GpuAssumption(**{**gpu.__dict__, "fixed_s": 1e-3, "efficiency": 1.0}))]
    lines = ["| GPU assumption | 1 GPU s/iteration | 8 GPUs NVLink, after | 64 GPUs InfiniBand HDR, after |",
             "|---|---|---|---|"]
    for label, variant in variants:
        cost = gpu_step_cost(layout, variant)
        single = predict_iteration(cost, dense_exchange(layout), NVLINK, 1, layout.n_patterns, batch_size).iteration_s
        speedups = [single / predict_iteration(cost, footprint_exchange(layout, batch_size, "compact", devices=n), link, n,
                                               layout.n_patterns, batch_size).iteration_s
                    for n, link in ((8, NVLINK), (64, INFINIBAND_HDR))]
        lines.append(f"| {label} | {single:.3f} | {speedups[0]:.2f} | {speedups[1]:.2f} |")
    return "\n".join(lines)


def reference_tables(gpu: GpuAssumption | None = None) -> str:
    """The prediction tables of docs/scaling.md (Markdown)."""
    gpu = gpu or h100_assumption()
    parts = [f"GPU assumption: {gpu.name}; {gpu.source}."]
    for title, layout, batches in reference_cases():
        cost = gpu_step_cost(layout, gpu)
        for batch in batches:
            parts += [f"### {title}; batch {batch}", describe_case(layout, batch, cost),
                      "Predicted speed-up against one GPU, before (dense) / after (footprint):",
                      speedup_table(layout, batch, cost),
                      "If the GPU assumption is off (speed-ups after the change):", sensitivity(layout, batch, gpu)]
    return "\n\n".join(parts)


def run_predict(config_path: Path | None, overrides: list[str], process_counts: list[int], batch_sizes: list[int],
                trials: int, out_dir: Path, link_only: bool, echo=print) -> str:
    """What ``ptyacc predict`` prints: the link measured here (``link_only``), the check against
    launches of ``config_path``, or, without a config, the reference tables."""
    if link_only:
        counts = [p for p in process_counts if p > 1] or [2]
        return "\n\n".join(format_link(measure_link(p, repeats=max(15, 5 * trials))) for p in counts)
    if config_path is None:
        from ptyacc.scaling_tiles import split_tables

        return reference_tables() + "\n\n## Object split (runtime.shard_object)\n\n" + split_tables()
    _, rows, median_cost, min_cost = check_against_launches(config_path, overrides, process_counts, batch_sizes, trials,
                                                            out_dir, echo)
    return format_check(rows, median_cost, min_cost)
