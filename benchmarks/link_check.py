"""The link between this machine's processes, measured: gloo all-reduce times over buffer sizes
between local processes, and the latency and bandwidth (``scaling.Link``) fitted to them."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.scaling import FLOAT32_BYTES, Link, ring_allreduce_s
from ptyacc.errors import PtyaccError

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

    from ptyacc.speed.speedtest import free_port

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "link.json"
        mp.start_processes(_link_worker, args=(processes, free_port(), list(sizes_bytes), repeats, str(out), timeout_s),
                           nprocs=processes, start_method="spawn")
        times = json.loads(out.read_text())
    return LinkMeasurement(processes, tuple(sizes_bytes), tuple(tuple(t) for t in times))


class LinkFitError(PtyaccError, ValueError):
    """Measured all-reduce times that no positive latency and bandwidth explain (a busy machine)."""


NO_LINK = Link("none (one process)", 0.0, float("inf"))
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
        times = ", ".join(f"{size} B {s * 1e3:.3f} ms" for size, s in zip(sizes_bytes, seconds, strict=True))
        raise LinkFitError(f"the all-reduce times ({times}) do not fit latency + bytes / bandwidth: other work on "
                           "this machine disturbed the measurement; run again when it is quiet, or with more --trials")
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
                buffer.fill_(rank + 1)
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(buffer)
                mine.append(time.perf_counter() - start)
                if not bool((buffer == processes * (processes + 1) / 2).all()):
                    raise RuntimeError(f"all-reduce of {size} B gave a wrong sum on rank {rank}")
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
