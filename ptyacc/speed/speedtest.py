"""`ptyacc speedtest`: the same config on 1, 2, ... processes, timed and compared.

Each (process count, trial) is a real launch (`python -m ptyacc.run` for one process,
`accelerate launch --multi_gpu` for more), so start-up, process-group set-up and
communication are all in the figures. Writes a per-iteration CSV, a summary CSV and a PNG of
loss against wall time per process count.
"""

from __future__ import annotations

import csv
import io
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ptyacc.errors import OutputError, PtyaccError
from ptyacc.reconstruction.exchange import KINDS
from ptyacc.results.h5file import load_results
from ptyacc.results.outdir import hold_output_dir, write_bytes, write_text


@dataclass
class Trial:
    processes: int
    trial: int
    wall_s: float
    loss: list[float]
    iteration_time_s: list[float]
    comm_bytes: list[int] = ()  # per iteration, multi-process runs
    comm_time_s: list[float] = ()
    comm_split: dict[str, list[int]] = field(default_factory=dict)  # object / probe / other bytes per iteration
    comm_calls: list[int] = ()


def launch_command(config: Path, processes: int, overrides: list[str]) -> list[str]:
    run = ["-m", "ptyacc.run", str(config), "--quiet", "--overwrite", *[a for o in overrides for a in ("--set", o)]]
    if processes == 1:
        return [sys.executable, *run]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(free_port()), *run]


def run_speedtest(config: Path, process_counts: list[int], trials: int, out_dir: Path, overrides: list[str] = (),
                  threads_per_process: int | None = None, echo=print) -> list[Trial]:
    """Launch every (count, trial), collect its results.h5, write the CSVs and the PNG. The
    folder is locked for the whole speedtest (a second one into it is refused)."""
    with hold_output_dir(out_dir, main=True, setting="--output-dir"):
        done = _run_trials(config, process_counts, trials, out_dir, overrides, threads_per_process, echo)
        write_tables(done, out_dir)
        try:
            plot_loss_vs_time(done, out_dir / "speedtest.png")
        except OutputError as exc:  # the figure is a convenience: the tables are written, go on
            echo(f"ptyacc: warning: speedtest.png not written: {exc}")
    return done


def _run_trials(config: Path, process_counts: list[int], trials: int, out_dir: Path, overrides: list[str],
                threads_per_process: int | None, echo) -> list[Trial]:
    cores = os.cpu_count() or 1
    done: list[Trial] = []
    for processes in process_counts:
        for trial in range(trials):
            run_dir = out_dir / f"p{processes}_t{trial}"
            sets = [*overrides, f"output.dir={run_dir}", "output.figures=false"]
            env = dict(os.environ, OMP_NUM_THREADS=str(threads_per_process or max(1, cores // processes)))
            env.pop("WORLD_SIZE", None)
            start = time.perf_counter()
            proc = subprocess.run(launch_command(config, processes, sets), env=env, capture_output=True, text=True)
            wall = time.perf_counter() - start
            if proc.returncode != 0:
                tail = error_line(proc.stderr).removeprefix("ptyacc: error: ")
                raise PtyaccError(f"speedtest: the run on {processes} process(es) failed: {tail}")
            results = load_results(run_dir / "results.h5")
            times = results.iteration_time_s.tolist() if results.iteration_time_s is not None else []
            done.append(_trial(processes, trial, wall, results))
            traffic = _traffic_text(done[-1])
            echo(f"{processes} process(es), trial {trial + 1}/{trials}: {wall:.1f} s, "
                 f"{statistics.median(times):.3f} s/iteration{traffic}, final loss {results.loss[-1]:.6g}")
    return done


def _trial(processes: int, trial: int, wall_s: float, results) -> Trial:
    times = results.iteration_time_s.tolist() if results.iteration_time_s is not None else []
    if results.comm_bytes is None:
        return Trial(processes, trial, wall_s, results.loss.tolist(), times)
    split = {kind: getattr(results, f"comm_bytes_{kind}").tolist() for kind in KINDS
             if getattr(results, f"comm_bytes_{kind}") is not None}
    calls = results.comm_calls.tolist() if results.comm_calls is not None else []
    return Trial(processes, trial, wall_s, results.loss.tolist(), times, results.comm_bytes.tolist(),
                 results.comm_time_s.tolist(), split, calls)


def _traffic_text(t: Trial) -> str:
    if not t.comm_bytes:
        return ""
    split = ", ".join(f"{kind} {statistics.median(v) / 2**20:.2f}" for kind, v in t.comm_split.items())
    waiting = statistics.median(w / s for w, s in zip(t.comm_time_s, t.iteration_time_s[-len(t.comm_time_s):],
                                                      strict=True))
    return (f", exchanged {statistics.median(t.comm_bytes) / 2**20:.2f} MiB per iteration ({split}), "
            f"{statistics.median(t.comm_calls) if t.comm_calls else 0:g} collectives, waiting {waiting:.0%}")


def summarize(trials: list[Trial]) -> list[dict]:
    """Per process count: median s/iteration, speed-up against the smallest count, final losses."""
    rows = []
    counts = sorted({t.processes for t in trials})
    base = None
    for processes in counts:
        mine = [t for t in trials if t.processes == processes]
        per_iteration = statistics.median(x for t in mine for x in t.iteration_time_s)
        base = base or per_iteration
        finals = [t.loss[-1] for t in mine]
        comm_s = [x for t in mine for x in t.comm_time_s]
        comm_bytes = [x for t in mine for x in t.comm_bytes]
        by_kind = {kind: [x for t in mine for x in t.comm_split.get(kind, ())] for kind in KINDS}
        calls = [x for t in mine for x in t.comm_calls]
        rows.append({"processes": processes, "trials": len(mine), "s_per_iteration": per_iteration,
                     "comm_mib_per_iteration": statistics.median(comm_bytes) / 2**20 if comm_bytes else 0.0,
                     **{f"comm_{kind}_mib_per_iteration": statistics.median(v) / 2**20 if v else 0.0
                        for kind, v in by_kind.items()},
                     "collectives_per_iteration": statistics.median(calls) if calls else 0,
                     "comm_s_per_iteration": statistics.median(comm_s) if comm_s else 0.0,
                     "waiting_fraction": statistics.median(comm_s) / per_iteration if comm_s else 0.0,
                     "speedup": base / per_iteration, "wall_s": statistics.median(t.wall_s for t in mine),
                     "final_loss_mean": statistics.fmean(finals), "final_loss_spread": max(finals) - min(finals)})
    return rows


def write_tables(trials: list[Trial], out_dir: Path) -> None:
    """speedtest.csv and speedtest_summary.csv, plain numbers only (written atomically)."""
    per_iteration = io.StringIO()
    writer = csv.writer(per_iteration)
    writer.writerow(["processes", "trial", "iteration", "iteration_time_s", "elapsed_s", "loss"])
    for t in trials:
        elapsed = 0.0
        for i, (dt, loss) in enumerate(zip(t.iteration_time_s, t.loss, strict=True)):
            elapsed += dt
            writer.writerow([t.processes, t.trial, i, f"{dt:.6f}", f"{elapsed:.6f}", repr(float(loss))])
    write_text(out_dir / "speedtest.csv", per_iteration.getvalue())
    rows = summarize(trials)
    summary = io.StringIO()
    writer = csv.DictWriter(summary, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows({key: _plain(value) for key, value in row.items()} for row in rows)
    write_text(out_dir / "speedtest_summary.csv", summary.getvalue())


def _plain(value):
    """A NumPy scalar as the Python number it holds, whose repr is the number itself."""
    return value.item() if hasattr(value, "item") else value


def format_summary(trials: list[Trial]) -> str:
    lines = ["| processes | trials | s/iteration | exchange s/iteration (waiting) | exchanged MiB/iteration: object / "
             "probe / other | collectives/iteration | speed-up | wall s | final loss (mean) | final loss spread |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summarize(trials):
        lines.append(f"| {r['processes']} | {r['trials']} | {r['s_per_iteration']:.4f} | "
                     f"{r['comm_s_per_iteration']:.4f} ({r['waiting_fraction']:.0%}) | "
                     f"{r['comm_object_mib_per_iteration']:.2f} / {r['comm_probe_mib_per_iteration']:.2f} / "
                     f"{r['comm_other_mib_per_iteration']:.3f} | {r['collectives_per_iteration']:g} | "
                     f"{r['speedup']:.2f} | {r['wall_s']:.1f} | {r['final_loss_mean']:.6g} | "
                     f"{r['final_loss_spread']:.2g} |")
    return "\n".join(lines)


def plot_loss_vs_time(trials: list[Trial], path: Path) -> None:
    from matplotlib.figure import Figure  # a Figure needs no backend: the session's stays as it is

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    colors = {}
    for t in trials:
        elapsed, total = [], 0.0
        for dt in t.iteration_time_s:
            total += dt
            elapsed.append(total)
        color = colors.setdefault(t.processes, f"C{len(colors)}")
        ax.semilogy(elapsed, t.loss, color=color, alpha=0.8,
                    label=f"{t.processes} process(es)" if t.trial == 0 else None)
    ax.set(xlabel="wall time in iterations (s)", ylabel="loss", title="loss against time")
    ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    write_bytes(path, png.getvalue())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def error_line(stderr: str) -> str:
    """The line of a failed launch's output that names the error: the last one that reads like an
    exception (the launcher's closing summary, rows of '=' and its own traceback, comes after it), else the
    last of ptyacc's own ``ptyacc: error:`` lines (a refused config: no traceback), else the last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^(\[rank\d+\]:? *)?[\w.]*(Error|Exception)\b", line)
             and "ChildFailedError" not in line]
    said = [line for line in lines if re.match(r"^(\[rank\d+\]:? *)?ptyacc: error:", line)]
    return (named or said or lines or ["(no output)"])[-1]
