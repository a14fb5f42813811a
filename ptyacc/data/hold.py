"""Where the patterns live during a run (``data.hold``): the free-memory figures, the choice
that ``auto`` makes from them, and the one line that says which mode was chosen and why.

The figures come from ``memory_figures`` alone, so that tests can replace it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ptyacc.data.stream import PREFETCH_STEPS, FileRows, HostRows, ReadRows, compact_dtype, fill_compact, sample_of

MIB = 2**20
PATTERN_VALUE_BYTES = 4  # prepared patterns are float32 on the device
SLOW_CHUNK_PATTERNS = 8  # compressed chunks of more patterns than this are decompressed whole for each one read
BLOCK_BYTES = 4 * MIB  # float32 read at a time when a pass goes over all held patterns (host memory stays flat)


@dataclass(frozen=True)
class MemoryFigures:
    """device_free_bytes: free memory of the run's device (for a CPU device, the host's available
    memory); host_available_bytes: the host's available memory (what the OS can give without swapping)."""

    device_free_bytes: int
    host_available_bytes: int


def memory_figures(device: torch.device | str) -> MemoryFigures:
    """The free memory of ``device`` and of the host, now; the host's is what this process's
    cgroup leaves it when that is less (a container's or a batch job's memory limit)."""
    import psutil  # accelerate's own dependency

    host = int(psutil.virtual_memory().available)
    room = cgroup_room_bytes()
    host = host if room is None else min(host, room)
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return MemoryFigures(int(free), host)
    return MemoryFigures(host, host)


def cgroup_room_bytes(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
                      ) -> int | None:
    """The memory left under the limit of this process's cgroup (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``, less what it uses); None when there is no limit or none can be read."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, where = line.split(":", 2)
        if controllers == "":
            folder, limit_name, usage_name = root / where.lstrip("/"), "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            folder, limit_name, usage_name = root / "memory" / where.lstrip("/"), "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        try:
            limit, usage = (folder / limit_name).read_text().strip(), int((folder / usage_name).read_text())
        except (OSError, ValueError):
            continue
        if limit != "max" and int(limit) < 2**60:  # v1 writes "no limit" as a huge number
            return max(int(limit) - usage, 0)
    return None


@dataclass(frozen=True)
class HoldChoice:
    """The mode (device, host or disk) and the reason, one line for the terminal and run.log."""

    mode: str
    reason: str


def choose_hold(requested: str, fraction: float, device_bytes: int, host_bytes: Callable[[], int],
                device: torch.device | str) -> HoldChoice:
    """``requested`` as it is, or for ``auto`` the first of device, host and disk whose memory
    holds the patterns within ``fraction`` of its free memory: ``device_bytes`` the prepared
    float32 patterns this process holds, ``host_bytes()`` what they take in host memory (as
    counts when they are; asked only when they do not fit on the device)."""
    if requested != "auto":
        return HoldChoice(requested, "data.hold: " + requested)
    figures = memory_figures(device)
    device_room, host_room = fraction * figures.device_free_bytes, fraction * figures.host_available_bytes
    where = torch.device(device).type
    if device_bytes <= device_room:
        return HoldChoice("device", f"{_mib(device_bytes)} fit in {fraction:g} x {_mib(figures.device_free_bytes)} "
                                    f"free on the {where} device")
    host_bytes = host_bytes()
    if host_bytes <= host_room:
        return HoldChoice("host", f"{_mib(device_bytes)} do not fit in {fraction:g} x "
                                  f"{_mib(figures.device_free_bytes)} free on the {where} device; {_mib(host_bytes)} "
                                  f"fit in {fraction:g} x {_mib(figures.host_available_bytes)} available host memory")
    return HoldChoice("disk", f"{_mib(host_bytes)} do not fit in {fraction:g} x {_mib(figures.host_available_bytes)} "
                              f"available host memory (nor {_mib(device_bytes)} in {fraction:g} x "
                              f"{_mib(figures.device_free_bytes)} free on the {where} device)")


def _mib(nbytes: int) -> str:
    """``nbytes`` in KiB, MiB or GiB, whichever reads best."""
    for unit, size in (("GiB", 2**30), ("MiB", MIB)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes / 1024:.1f} KiB"


@dataclass
class StreamedPatterns:
    """The held patterns of a run that does not keep them on the device (``data.hold`` host or
    disk), as ``load_data`` leaves them.

    read:          sorted distinct position indices (n,) -> prepared patterns (n, K, K) float32
    counts_total:  sum of all held prepared patterns (float64), for the probe's scaling
    pattern_sum:   (K, K) float64 per-pixel sum over the held patterns (model layout)
    bytes:         what the patterns take on "disk" (the held share of the file), in "host"
                   memory and on the "device", in this mode
    warning:       a chunk layout that makes reading slow, its cost and the fix; "" if none
    """

    read: ReadRows
    counts_total: float
    pattern_sum: np.ndarray
    bytes: dict[str, int] = field(default_factory=dict)
    warning: str = ""


def hold_patterns(data_config, source, rows: np.ndarray | None, prepare, shape: tuple[int, int], n_file: int,
                  device: torch.device | str, open_again: Callable[[], object]
                  ) -> tuple[np.ndarray, StreamedPatterns | None, HoldChoice]:
    """The held patterns ``rows`` (None = all ``n_file``) of the open ``source`` (a
    ``readers.PatternFile``), ``shape`` (K, K) once prepared, where ``data_config.hold`` puts them:
    (prepared float32 (H, K, K), None, the choice) on the device, else ((0, K, K), their
    ``StreamedPatterns``, the choice). ``open_again`` opens the file anew for the disk reader
    (``source`` is closed after loading)."""
    held = np.arange(n_file) if rows is None else np.asarray(rows)
    device_bytes = len(held) * shape[0] * shape[1] * PATTERN_VALUE_BYTES

    def host_bytes() -> int:  # as counts (uint16) when a sample of them are counts
        return len(held) * shape[0] * shape[1] * compact_dtype(FileRows(source, prepare)(sample_of(held))).itemsize

    choice = choose_hold(data_config.hold, data_config.hold_memory_fraction, device_bytes, host_bytes, device)
    if choice.mode == "device":
        return source.read(rows, prepare).patterns, None, choice
    disk_bytes = source.path.stat().st_size * len(held) // max(n_file, 1)
    if choice.mode == "host":
        from_file = FileRows(source, prepare)
        dtype = compact_dtype(from_file(sample_of(held)))
        read = HostRows(fill_compact(from_file, held, shape, dtype, BLOCK_BYTES), held)
        host_bytes = read.patterns.nbytes
    else:
        read, host_bytes = FileRows(open_again(), prepare), 0
    total, pixel_sum = held_sums(read, held, shape)
    streamed = StreamedPatterns(read, total, pixel_sum, {"disk": disk_bytes, "host": host_bytes, "device": 0},
                                slow_layout(source) if choice.mode == "disk" else "")
    return np.zeros((0, *shape), dtype=np.float32), streamed, choice


def slow_layout(source) -> str:
    """A warning when the file's chunks make each step's reads slow (compressed chunks of many
    patterns, each decompressed whole for every pattern a step takes from it); "" otherwise."""
    chunks = source.stored_chunks()
    if chunks is None or not chunks[1] or chunks[0] <= SLOW_CHUNK_PATTERNS:
        return ""
    return (f"warning: {source.path} stores the patterns in compressed chunks of {chunks[0]} patterns: data.hold: disk "
            f"decompresses a whole chunk for each pattern a step reads from it, up to {chunks[0]} x the reading "
            f"of the patterns themselves; rewrite it for streaming with `ptyacc convert {source.path.name} "
            "OUT.h5 --streaming` (chunks of one pattern, uncompressed), or use data.hold: host")


def held_sums(read: ReadRows, held: np.ndarray, shape: tuple[int, int], block_bytes: int = BLOCK_BYTES
              ) -> tuple[float, np.ndarray]:
    """(sum of all values, (K, K) per-pixel sum), float64, of the prepared patterns ``held``,
    read ``block_bytes`` of float32 at a time."""
    pixel_sum = np.zeros(shape, dtype=np.float64)
    per_block = max(1, block_bytes // (4 * shape[0] * shape[1]))
    for start in range(0, len(held), per_block):
        pixel_sum += read(held[start:start + per_block]).sum(axis=0, dtype=np.float64)
    return float(pixel_sum.sum()), pixel_sum


def hold_lines(data, store, device: torch.device | str, batch_positions: int) -> list[str]:
    """Where this run holds the patterns and why, with the bytes they take on disk, in host
    memory and on the device (streamed: the steps in flight, of ``batch_positions`` each), and
    any warning about reading them (lines for the terminal and run.log)."""
    device = torch.device(device)
    if data.streamed is not None:
        in_flight = (PREFETCH_STEPS + 1) * batch_positions * data.detector_px**2 * PATTERN_VALUE_BYTES
        nbytes = {**data.streamed.bytes, "device": in_flight}
    else:  # in memory: on the device, or (data.hold: host for patterns given in memory) on the host
        in_memory = data.n_held * data.detector_px**2 * PATTERN_VALUE_BYTES
        on_host = not store.holds_on_device or device.type != "cpu"  # a GPU run keeps the loaded copy too
        nbytes = {"disk": 0, "host": in_memory if on_host else 0, "device": in_memory if store.holds_on_device else 0}
    mode, reason = (data.hold.mode, data.hold.reason) if data.hold is not None else (
        "device" if store.holds_on_device else "host", "patterns given in memory")
    sizes = ", ".join(f"{_mib(nbytes[where])} {label}" for where, label in
                      (("disk", "on disk"), ("host", "in host memory"), ("device", "on the device")))
    warning = [data.streamed.warning] if data.streamed is not None and data.streamed.warning else []
    return [f"data.hold: {mode} ({reason}); patterns: {sizes}", *warning]


def hold_report(config, sample, device: str) -> list[str]:
    """For ``ptyacc info``: the bytes all the patterns of ``config.data`` take on disk, in host
    memory and on the device in each mode, judged from the prepared ``sample`` (a PtychoData of a
    few of them), and the mode ``data.hold`` would choose now on ``device`` (``runtime.device``
    resolved)."""
    n, k = sample.n_patterns, sample.detector_px
    device_bytes = n * k * k * PATTERN_VALUE_BYTES
    dtype = compact_dtype(sample.patterns.numpy())
    host_bytes = n * k * k * dtype.itemsize
    disk_bytes = config.resolve_input(config.data.path).stat().st_size if config.data.path else 0
    choice = choose_hold(config.data.hold, config.data.hold_memory_fraction, device_bytes, lambda: host_bytes, device)
    return [f"patterns: {_mib(disk_bytes)} on disk; data.hold device: {_mib(device_bytes)} on the device (float32); "
            f"host: {_mib(host_bytes)} in host memory ({dtype.name}); disk: only the steps in flight "
            "(runtime.shard_data divides each by the number of processes)",
            f"data.hold: {choice.mode} on {device} ({choice.reason})"]


def peak_rss_bytes() -> int:
    """This process's peak resident memory: Linux's VmHWM (``getrusage`` would count the parent's
    peak too, as it survives fork and exec), elsewhere ``getrusage``."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        import resource
        import sys

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:"))


def peak_memory_lines(accelerator) -> list[str]:
    """The peak host memory (RSS) of each process so far, and its peak device memory (CUDA): one
    line, or one per process (a collective: every process calls it)."""
    peak_rss = peak_rss_bytes()
    device = accelerator.device
    on_device = (f"{_mib(torch.cuda.max_memory_allocated(device))} peak on {device}" if device.type == "cuda"
                 else "no separate device memory")
    line = f"{_mib(peak_rss)} peak host RSS, {on_device}"
    if accelerator.num_processes == 1:
        return [f"memory: {line}"]
    from accelerate.utils import gather_object

    return [f"memory of rank {rank}: {text}" for rank, text in enumerate(gather_object([line]))]
