"""How many torch CPU threads a run uses (``runtime.threads``).

torch's default is one thread per core. On a machine whose cores are busy with other work, its
threads wait for each other at every parallel operation, and a run is several times slower
than with one thread (the demo on a 2-core machine at a load average of 4-5: 29.7 s with two
threads, 7.4-10.0 s with one). ``auto`` takes the cores this process may run on (its CPU
affinity, shared among the processes of this node) less the load other work puts on them (the
one-minute load average), at least one; OMP_NUM_THREADS, when set, is kept. The choice is made
once per process, so that runs in one process compute alike.
"""

from __future__ import annotations

import os

import torch

_chosen: tuple[int, str] | None = None


def usable_cores() -> int:
    """The cores this process may run on (its affinity; all cores where the system cannot say)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def auto_threads(cores: int, load: float, processes: int, omp: str | None) -> tuple[int | None, str]:
    """The threads ``auto`` picks for one of ``processes`` on ``cores`` usable cores at a
    one-minute ``load`` average (None: leave torch's setting, from ``omp``, OMP_NUM_THREADS), and
    the line that says why."""
    if omp:
        return None, f"runtime.threads: auto: {torch.get_num_threads()} (OMP_NUM_THREADS={omp})"
    share = max(1, cores // processes)
    idle = max(1, int((cores - load) / processes + 0.5))  # cores left by other work, rounded
    threads = min(share, idle)
    why = f"{cores} usable core(s), load average {load:.2f}" + (f", {processes} processes" if processes > 1 else "")
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
        threads, line = auto_threads(usable_cores(), os.getloadavg()[0], processes, os.environ.get("OMP_NUM_THREADS"))
        _chosen = (threads or torch.get_num_threads(), line)
    torch.set_num_threads(_chosen[0])
    return _chosen[1], "set runtime.threads" in _chosen[1]
