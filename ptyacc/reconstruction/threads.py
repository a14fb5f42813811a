"""How many torch CPU threads a run uses (``runtime.threads``).

torch's default is one thread per core. On a machine whose cores are busy with other work, its
threads wait for each other at every parallel operation, and a run is several times slower
than with one thread (the demo on a 2-core machine at a load average of 4-5: 29.7 s with two
threads, 7.4-10.0 s with one). ``auto`` takes the cores this process may run on (its CPU
affinity, shared among the processes of this node) less the load other work puts on them, at
least one; OMP_NUM_THREADS, when set, is kept. The load is the one-minute load average, or, where
the system says how busy its cores are now (Linux's /proc/stat, sampled over BUSY_WINDOW_S while
this process waits) and that is less, the cores busy now: the average trails by a minute and holds
this user's own last run (a run started a few seconds after another on an idle 2-core machine saw
a load of 0.58, took one thread, and was 27 % slower than with two). The choice is made once per
process, so that runs in one process compute alike.
"""

from __future__ import annotations

import os
import time

import torch

BUSY_WINDOW_S = 0.1
_chosen: tuple[int, str] | None = None


def cpu_times(stat: str = "/proc/stat") -> tuple[int, int] | None:
    """(busy, all) clock ticks of every core together since boot, from ``stat``'s first line; None where the
    system has no such file."""
    try:
        with open(stat) as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 4:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    total = sum(fields[:8])  # user .. steal; guest time is already counted in user
    return total - idle, total


def busy_cores(window_s: float = BUSY_WINDOW_S, stat: str = "/proc/stat") -> float | None:
    """How many cores' worth of work other processes did over the next ``window_s`` seconds (this one waits
    meanwhile); None where the system does not say."""
    before = cpu_times(stat)
    time.sleep(window_s)
    after = cpu_times(stat)
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)


def usable_cores() -> int:
    """The cores this process may run on (its affinity; all cores where the system cannot say)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def auto_threads(cores: int, load: float, processes: int, omp: str | None,
                 busy: float | None = None) -> tuple[int | None, str]:
    """The threads ``auto`` picks for one of ``processes`` on ``cores`` usable cores at a
    one-minute ``load`` average, ``busy`` cores busy now (where known: the lesser of the two is the
    other work's), and the line that says why; None for the threads where ``omp``
    (OMP_NUM_THREADS) is set: torch's setting, from it, stays."""
    if omp:
        return None, f"runtime.threads: auto: {torch.get_num_threads()} (OMP_NUM_THREADS={omp})"
    share = max(1, cores // processes)
    other = load if busy is None else min(load, busy)
    idle = max(1, int((cores - other) / processes + 0.5))  # cores left by other work, rounded
    threads = min(share, idle)
    why = (f"{cores} usable core(s), load average {load:.2f}" + ("" if busy is None else f", {busy:.2f} busy now")
           + (f", {processes} processes" if processes > 1 else ""))
    advice = "; set runtime.threads to choose" if threads < share else ""
    return threads, f"runtime.threads: auto: {threads} ({why}){advice}"


def set_threads(asked: int | str | None) -> tuple[str, bool]:
    """Apply ``runtime.threads`` (a number, ``auto`` or None: torch's default); the line for
    run.log, and whether the user should see it (auto chose fewer threads than cores: the
    machine is busy)."""
    global _chosen
    if asked is None:
        return f"runtime.threads: torch's default, {torch.get_num_threads()}", False
    if asked != "auto":
        torch.set_num_threads(asked)
        return f"runtime.threads: {asked}", False
    if _chosen is None:
        processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        omp = os.environ.get("OMP_NUM_THREADS")
        threads, line = auto_threads(usable_cores(), os.getloadavg()[0], processes, omp, None if omp else busy_cores())
        _chosen = (threads or torch.get_num_threads(), line)
    torch.set_num_threads(_chosen[0])
    return _chosen[1], "set runtime.threads" in _chosen[1]
