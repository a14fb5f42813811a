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
or measured here with gloo by ``scaling_check.measure_link``). ``scaling_check`` compares the
model with real launches of ``ptyacc speedtest`` on this machine; benchmarks/records/2026-11-27-scaling.md has the tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ptyacc.data.store import EpochBatches
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.reconstruction.exchange import footprint_box
from ptyacc.reconstruction.tiles import OBJECT_STATE

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
    shared_slowdown: processes sharing one machine's cores (``cores`` in ``predict_iteration``)
        compute this much slower than one process alone, as they share its memory bandwidth and
        caches; measured by running independent 1-process runs side by side
        (``scaling_check.run_side_by_side``); 1 for dedicated devices.
    exchange_fixed_s: per step of a run on several devices, the work of taking part in the
        exchange apart from the transfer: DDP's bookkeeping, the exchange hook (footprint, packing
        and its copies), handing the collective to the backend and back. Measured with DDP and the
        hook on a one-process group (``scaling_check.measure_exchange_overhead``), where the
        all-reduce transfers nothing; 0 leaves it out.
    """

    fixed_s: float
    per_pattern_s: float
    update_s: float = 0.0
    copy_bytes_per_s: float | None = None
    shared_slowdown: float = 1.0
    exchange_fixed_s: float = 0.0


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
    memory copies done by the processes themselves), and each runs ``cost.shared_slowdown``
    slower than alone. None: dedicated devices (GPUs).
    """
    steps, busiest = epoch_load(n_patterns, batch_size, devices)
    share = max(1.0, devices / cores) if cores else 1.0
    if cores and devices > 1:
        share *= cost.shared_slowdown
    compute = share * (steps * cost.fixed_s + busiest * cost.per_pattern_s)
    update = share * steps * cost.update_s
    if devices == 1:
        return Prediction(devices, compute, update, 0.0)
    wire = steps * exchange_step_s(exchange, devices, link)
    wire += exchange.collectives_per_iteration * ring_allreduce_s(0, devices, link)
    copies = steps * 6 * exchange.bytes_per_step / cost.copy_bytes_per_s if cost.copy_bytes_per_s else 0.0
    return Prediction(devices, compute, update, share * (wire + copies + steps * cost.exchange_fixed_s))


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
        params = [(OBJECT_STATE, self.object_modes * self.slices * self.object_shape[0] * self.object_shape[1] * 2),
                  ("quantities.probe.modes", self.probe_modes * k * k * 2)]
        if self.refine_positions:
            params.append(("quantities.positions.offsets_px", n * 2))
        if self.background:
            params.append(("quantities.fitted.background", k * k))
        if self.intensity_weights:
            params.append(("quantities.fitted.intensity_weights", n))
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
    others = sum(floats for name, floats in layout.parameter_floats() if name != OBJECT_STATE)
    boxes = [footprint_box(corners[batch], layout.window_px) for batch in batches]
    floats = [per_pixel * (y1 - y0) * (x1 - x0) + others for y0, y1, x0, x1 in boxes]
    return Exchange(f"footprint ({grouping} batches)", FLOAT32_BYTES * float(np.mean(floats)), 1)
