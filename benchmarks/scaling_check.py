"""The scaling model against this machine: the model checked against real launches of ``ptyacc
speedtest`` (with the link that ``link_check`` measures between local processes), and ``ptyacc
predict``, the command that prints either or the reference tables (``gpu_cases``)."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.gpu_cases import reference_tables
from benchmarks.link_check import NO_LINK, LinkMeasurement, format_link, measure_link
from benchmarks.scaling import (
    StepCost,
    dense_exchange,
    epoch_load,
    fit_step_cost,
    footprint_exchange,
    layout_from_config,
    predict_iteration,
)
from ptyacc.errors import PtyaccError
from ptyacc.speed.speedtest import error_line

# ----------------------------------------------------------------------------- taking part in the exchange


@dataclass(frozen=True)
class ExchangeOverhead:
    """Iteration times of one reconstruction run twice in one process, iterations interleaved:
    plain, and as a member of a one-process group (DDP with ptyacc's settings and the exchange
    hook), where the all-reduce transfers nothing. The difference per step is what taking part
    in the exchange costs a process beyond the transfer (``StepCost.exchange_fixed_s``)."""

    steps: int  # per iteration
    plain_s: tuple[float, ...]
    joined_s: tuple[float, ...]
    same_loss: bool = True  # the two runs' losses were equal in every iteration (the same computation)

    def per_step_s(self, stat=statistics.median) -> float:
        return max(0.0, (stat(self.joined_s) - stat(self.plain_s)) / self.steps)

    def __add__(self, other: ExchangeOverhead) -> ExchangeOverhead:
        """Both measurements' iterations pooled (same steps per iteration)."""
        if self.steps != other.steps:
            raise ValueError("only measurements of the same steps per iteration can be pooled")
        return ExchangeOverhead(self.steps, self.plain_s + other.plain_s, self.joined_s + other.joined_s,
                                self.same_loss and other.same_loss)


OVERHEAD_ITERATIONS = 12  # the difference of two iteration times is small: many iterations


def measure_exchange_overhead(config_path: Path, overrides: list[str], iterations: int = 6) -> ExchangeOverhead:
    """``ExchangeOverhead`` of ``config_path`` (one thread, in a process started here)."""
    import torch.multiprocessing as mp

    from ptyacc.speed.speedtest import free_port

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "overhead.json"
        mp.start_processes(_overhead_worker, args=(str(config_path), list(overrides), iterations, free_port(), str(out)),
                           nprocs=1, start_method="spawn")
        found = json.loads(out.read_text())
    return ExchangeOverhead(found["steps"], tuple(found["plain"]), tuple(found["joined"]), found["same_loss"])


def _overhead_worker(rank: int, config_path: str, overrides: list[str], iterations: int, port: int, out: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from ptyacc.config import load_config
    from ptyacc.reconstruction.distributed import kwargs_handlers, quiet_ddp_settings
    from ptyacc.reconstruction.engine import Reconstructor
    from ptyacc.reconstruction.exchange import GradientExchange

    config = load_config(config_path, [*overrides, "runtime.threads=1", "runtime.progress=false"])
    plain, joined = Reconstructor(config, write=False), Reconstructor(config, write=False)
    plain.build()
    joined.build(plain.data)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        with quiet_ddp_settings():
            joined.wrapped = DistributedDataParallel(joined.model, **kwargs_handlers(config.runtime, "cpu")[0].to_kwargs())
        joined.exchange = GradientExchange(joined.model, 1, footprint=config.runtime.object_exchange == "footprint")
        joined.wrapped.register_comm_hook(None, joined.exchange.hook)
        times: dict[str, list[float]] = {"plain": [], "joined": []}
        same_loss = True
        for iteration in range(iterations):
            (loss, plain_s), (joined_loss, joined_s) = plain._iteration(iteration), joined._iteration(iteration)
            times["plain"].append(plain_s)
            times["joined"].append(joined_s)
            same_loss &= loss == joined_loss
        found = {"steps": len(joined.loader), "same_loss": same_loss, **{k: warm_iterations(v) for k, v in times.items()}}
        Path(out).write_text(json.dumps(found))
    finally:
        # the DDP reducer goes while the group still lives: the reducer holding the group's last reference
        # would join gloo's worker thread from a destructor that holds the GIL, while that thread waits for
        # the GIL to release the exchange hook's callback (a hang seen once at the worker's exit)
        dist.barrier()
        joined.wrapped = None
        gc.collect()
        dist.destroy_process_group()


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
    exchange_fixed_s: float = 0.0  # per step, taking part in the exchange beyond the transfer (medians)


def warm_iterations(times: list[float]) -> list[float]:
    """The iteration times after the first (which warms up), or all of them when fewer than 3."""
    return list(times[1:] if len(times) >= 3 else times)


def check_against_launches(config_path: Path, overrides: list[str], process_counts: list[int], batch_sizes: list[int],
                           trials: int, out_dir: Path, echo=print
                           ) -> tuple[dict[int, LinkMeasurement], list[CheckRow], StepCost, StepCost]:
    """Calibrate the model on this machine and compare it with real launches.

    Each trial measures the link for every process count N > 1 (gloo all-reduces between N local
    processes: with more processes than cores, a hop also waits for its receiver to be scheduled,
    which the measured latency then holds) and then launches
    ``ptyacc speedtest`` (4 iterations unless overridden, one thread per process) for every
    batch size and process count, so that trials interleave and drifts of the machine's load
    touch every configuration alike; then it starts min(processes, cores) independent 1-process
    runs side by side, whose slowdown against the lone run is the cost of sharing the machine
    (memory bandwidth, caches; ``StepCost.shared_slowdown``), and measures what taking part in the
    exchange costs a process per step beyond the transfer, in one process
    (``measure_exchange_overhead``, ``StepCost.exchange_fixed_s``). fixed_s and per_pattern_s are
    fitted to the 1-process runs; the 2-, 4-, ... process runs are predicted from that fit, the
    slowdown, the link, this machine's cores and
    the bytes worked out from the geometry: dense, or the footprint of compact or random
    batches, whichever is nearest the bytes the run measured. Once with medians, once with minima.
    """
    from ptyacc.config import load_config

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
    samples = CheckSamples()
    for trial in range(trials):
        samples.take_trial(config_path, overrides, process_counts, batch_sizes, out_dir / f"trial{trial}",
                           lambda line, t=trial: echo(f"trial {t + 1}/{trials}: {line}"))
    for measurement in samples.links.values():
        echo(format_link(measurement))
    fits = samples.fits(n, batch_sizes)
    rows = [samples.row(layout, config.runtime.seed, fits, batch, p, cores) for batch in batch_sizes
            for p in process_counts]
    return samples.links, rows, fits[statistics.median], fits[min]


@dataclass
class CheckSamples:
    """What the check's trials measured, pooled over the trials: the link per process count,
    and per batch size (and process count) the warm iteration times, the bytes and seconds of
    the runs' exchanges, the times of independent runs side by side, and what taking part in
    the exchange costs a process."""

    links: dict[int, LinkMeasurement] = field(default_factory=dict)
    times: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    comm: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    comm_s: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    beside: dict[int, list[float]] = field(default_factory=dict)
    overheads: dict[int, ExchangeOverhead] = field(default_factory=dict)

    def take_trial(self, config_path: Path, overrides: list[str], process_counts: list[int], batch_sizes: list[int],
                   out_dir: Path, echo) -> None:
        from ptyacc.speed.speedtest import run_speedtest

        side_by_side = min(max(process_counts), os.cpu_count() or 1)  # processes that compute at once
        for p in sorted({p for p in process_counts if p > 1}):
            echo(f"gloo all-reduces between {p} local processes")
            this = measure_link(p)
            self.links[p] = self.links[p] + this if p in self.links else this
        for batch in batch_sizes:
            sets = [*overrides, f"optim.batch_size={batch}"]
            for run in run_speedtest(config_path, process_counts, 1, out_dir / f"batch{batch}", sets,
                                     threads_per_process=1, echo=lambda line, b=batch: echo(f"batch {b}, {line}{_load()}")):
                self.times.setdefault((batch, run.processes), []).extend(warm_iterations(run.iteration_time_s))
                self.comm.setdefault((batch, run.processes), []).extend(run.comm_bytes)
                self.comm_s.setdefault((batch, run.processes), []).extend(run.comm_time_s)
            if side_by_side > 1:
                echo(f"batch {batch}, {side_by_side} independent 1-process runs side by side{_load()}")
                self.beside.setdefault(batch, []).extend(
                    run_side_by_side(config_path, sets, side_by_side, out_dir / f"beside{batch}"))
            if max(process_counts) > 1:
                echo(f"batch {batch}, one process with and without DDP and the exchange hook{_load()}")
                measured = measure_exchange_overhead(config_path, sets, OVERHEAD_ITERATIONS)
                self.overheads[batch] = self.overheads[batch] + measured if batch in self.overheads else measured

    def fits(self, n: int, batch_sizes: list[int]) -> dict:
        """The step cost fitted to the 1-process runs, with the slowdown of sharing the machine
        (the mean over the batch sizes): for the medians and for the minima."""
        fits = {}
        for stat in (statistics.median, min):
            cost = fit_step_cost([(epoch_load(n, b, 1)[0], n, stat(self.times[(b, 1)])) for b in batch_sizes])
            if self.beside:
                slowdown = float(np.mean([stat(self.beside[b]) / stat(self.times[(b, 1)]) for b in batch_sizes]))
                cost = StepCost(cost.fixed_s, cost.per_pattern_s, shared_slowdown=slowdown)
            fits[stat] = cost
        return fits

    def row(self, layout, seed: int, fits: dict, batch: int, p: int, cores: int) -> CheckRow:
        """Predicted against measured for ``batch`` on ``p`` processes, with the exchange whose
        bytes are nearest those the run measured."""
        n = layout.n_patterns
        steps, _ = epoch_load(n, batch, p)
        candidates = [dense_exchange(layout), *(footprint_exchange(layout, batch, grouping, seed, p)
                                                for grouping in ("compact", "random"))]
        measured_bytes = float(statistics.median(self.comm[(batch, p)])) if self.comm[(batch, p)] else None
        exchange = min(candidates, key=lambda e: abs(steps * e.bytes_per_step - (measured_bytes or 0.0)))
        if measured_bytes is None:
            exchange = candidates[0]
        links = ({statistics.median: self.links[p].link, min: self.links[p].best_link} if p > 1
                 else dict.fromkeys(fits, NO_LINK))
        costs = {stat: dataclasses.replace(fits[stat], exchange_fixed_s=self.overheads[batch].per_step_s(stat))
                 if batch in self.overheads else fits[stat] for stat in fits}
        predicted = {stat: predict_iteration(costs[stat], exchange, links[stat], p, n, batch, cores) for stat in fits}
        comm_s = self.comm_s[(batch, p)]
        return CheckRow(batch, p, exchange.name if p > 1 else "–", measured_bytes,
                        steps * candidates[0].bytes_per_step, steps * candidates[1].bytes_per_step,
                        statistics.median(self.times[(batch, p)]), min(self.times[(batch, p)]),
                        predicted[statistics.median].iteration_s, predicted[min].iteration_s,
                        predicted[statistics.median].exchange_s, statistics.median(comm_s) if comm_s else None,
                        costs[statistics.median].exchange_fixed_s if p > 1 else 0.0)


def run_side_by_side(config_path: Path, overrides: list[str], copies: int, out_dir: Path) -> list[float]:
    """Warm iteration times of ``copies`` independent 1-process runs of ``config_path`` started
    together, one thread each: how fast a process computes while as many others share the
    machine (no process group, no exchange). Pooled over the copies."""
    import subprocess

    from ptyacc.results.h5file import load_results
    from ptyacc.speed.speedtest import launch_command

    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    folders = [out_dir / f"copy{i}" for i in range(copies)]
    procs = [subprocess.Popen(launch_command(config_path, 1, [*overrides, f"output.dir={folder}", "output.figures=false"]),
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for folder in folders]
    errors = [proc.communicate()[1] for proc in procs]  # read every pipe to the end: a full one would stall its run
    failed = [error for proc, error in zip(procs, errors, strict=True) if proc.returncode != 0]
    if failed:
        tail = error_line(failed[0])
        raise PtyaccError(f"predict: a 1-process run beside others failed: {tail}")
    times = []
    for folder in folders:
        times += warm_iterations(load_results(folder / "results.h5").iteration_time_s.tolist())
    return times


def _load() -> str:
    """The machine's 1-minute load average, to read the timings by."""
    return f" (load average {os.getloadavg()[0]:.1f})" if hasattr(os, "getloadavg") else ""


def format_check(rows: list[CheckRow], median_cost: StepCost, min_cost: StepCost, cores: int | None = None) -> str:
    cores = cores or os.cpu_count() or 1
    lines = [f"compute fitted to the 1-process runs (one thread, {cores} cores): medians {median_cost.fixed_s * 1e3:.2f} ms "
             f"per step + {median_cost.per_pattern_s * 1e6:.1f} us per pattern; minima {min_cost.fixed_s * 1e3:.2f} ms + "
             f"{min_cost.per_pattern_s * 1e6:.1f} us; computing beside other processes (independent runs side by "
             f"side) slows a process by x{median_cost.shared_slowdown:.2f} (medians) / x{min_cost.shared_slowdown:.2f} "
             "(minima)",
             *(f"batch {batch}: taking part in the exchange costs a process {1e3 * fixed:.2f} ms per step beyond the "
               "transfer (medians; DDP and the exchange hook on a one-process group)"
               for batch, fixed in sorted({(r.batch_size, r.exchange_fixed_s) for r in rows if r.processes > 1})),
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


def run_predict(config_path: Path | None, overrides: list[str], process_counts: list[int], batch_sizes: list[int],
                trials: int, out_dir: Path, link_only: bool, echo=print) -> str:
    """What ``ptyacc predict`` prints: the link measured here (``link_only``), the check against
    launches of ``config_path``, or, without a config, the reference tables."""
    if link_only:
        counts = [p for p in process_counts if p > 1] or [2]
        return "\n\n".join(format_link(measure_link(p, repeats=max(15, 5 * trials))) for p in counts)
    if config_path is None:
        from benchmarks.scaling_tiles import split_tables

        return reference_tables() + "\n\n## Object split (runtime.shard_object)\n\n" + split_tables()
    _, rows, median_cost, min_cost = check_against_launches(config_path, overrides, process_counts, batch_sizes, trials,
                                                            out_dir, echo)
    return format_check(rows, median_cost, min_cost)
