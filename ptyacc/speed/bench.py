"""`ptyacc bench`: seconds per iteration against the FFT bound, measured in one process.

The FFT bound is the time of exactly the Fourier transforms one iteration must do, run with
torch.fft at the same batch shapes: for every pattern, probe mode and object mode, 2*slices - 1
transforms of K x K forward and as many backward (one more each way in the near field: the Fresnel
propagation to the detector), plus, when the probe is shifted per position (positions refined, or
fixed at sub-pixel offsets that differ), the probe-shift transforms (one inverse transform forward,
one backward, per pattern and probe mode). ``ffts_per_step`` counts them; benchmarks/tests/test_operators.py
checks the count against the transforms a step issues.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data import EpochBatches, load_data
from ptyacc.results.outdir import write_text


def ffts_per_step(slices: int, shifted: bool, near_field: bool = False) -> int:
    """The transforms of one step in the FFT bound, each over the whole batch (all patterns, probe
    and object modes at once): 2*slices - 1 forward (2*slices in the near field) and as many
    backward, and with a probe shifted per position the shift's inverse transform and its gradient's."""
    return 2 * (2 * slices - 1 + near_field) + (2 if shifted else 0)


def per_position_shift(model) -> bool:
    """Whether the model shifts the probe per position (a transform over the batch each way)."""
    return bool(model.refine_positions or (model.needs_shift and not model.uniform_shift))


def fft_bound_s(batch_sizes: list[int], probe_modes: int, object_modes: int, slices: int, k: int,
                shifted: bool, device: torch.device | str = "cpu", repeats: int = 5, near_field: bool = False) -> float:
    """Seconds per iteration spent in the FFTs the model needs, best of ``repeats``."""
    shapes = {}
    for b in batch_sizes:
        shapes[b] = shapes.get(b, 0) + 1
    waves = {b: torch.randn(b, probe_modes, object_modes, k, k, dtype=torch.complex64, device=device) for b in shapes}
    probes = {b: torch.randn(b, probe_modes, k, k, dtype=torch.complex64, device=device) for b in shapes}
    per_pattern = ffts_per_step(slices, False, near_field)
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        for b, count in shapes.items():
            for _ in range(count):
                for _ in range(per_pattern):
                    torch.fft.fft2(waves[b])
                if shifted:
                    torch.fft.ifft2(probes[b])
                    torch.fft.fft2(probes[b])
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def run_bench(config: Config, iterations: int = 5, warmup: int = 2) -> dict:
    """Time ``warmup + iterations`` reconstruction iterations on one process and the FFT bound.
    With ``output.trackers`` the run writes, into a temporary folder removed afterwards (trackers
    need one), and ``s_per_iteration_with_hooks`` shows what they cost."""
    import shutil
    import tempfile

    from ptyacc.reconstruction.distributed import make_accelerator
    from ptyacc.reconstruction.engine import reconstruct

    config.optim.iterations = warmup + iterations
    config.runtime.progress = False
    writes = bool(config.output.trackers)
    if writes:
        config.output.dir, config.output.figures = tempfile.mkdtemp(prefix="ptyacc-bench-"), False
    accelerator = make_accelerator(config.runtime, config.output)
    # code loaded on first use (the FFT library; torch._dynamo, ~70 MB, which the optimizers import) is
    # not the problem's memory: load it before the baseline
    torch.fft.fft2(torch.zeros(8, 8, dtype=torch.complex64))
    importlib.import_module("torch._dynamo")
    data = load_data(config)
    # loading (reading chunks, or simulating) may leave freed heap resident; the patterns are counted
    # at their float32 size instead, and loading's own peak is a separate measurement
    _release_free_memory()
    baseline_rss = _rss_bytes() - data.patterns.numel() * data.patterns.element_size()
    marks, starts = {}, {}

    def on_step(iteration, indices):
        starts.setdefault(iteration, time.perf_counter())
        # the peak is taken over the timed iterations: start-up allocations and lazy imports are done by then
        if iteration == warmup and "rss" not in marks:
            marks["rss"], marks["reset"] = _rss_bytes(), _reset_peak_rss()
            if accelerator.device.type == "cuda":  # what the warm-up left queued is counted before the reset
                torch.cuda.synchronize(accelerator.device)
                torch.cuda.reset_peak_memory_stats(accelerator.device)

    try:
        rec = reconstruct(config, accelerator=accelerator, data=data, write=writes, on_step=on_step)
    finally:
        if writes:
            shutil.rmtree(config.output.dir, ignore_errors=True)
    timed = rec.iteration_times_s[warmup:]
    # from one iteration's first step to the next one's: the iteration and the hooks after it
    with_hooks = [starts[i + 1] - starts[i] for i in range(warmup, warmup + iterations - 1)]
    per_iteration = statistics.median(timed)
    batch = rec.config.optim.batch_size  # as the run took it: given, or what its auto became
    batches = EpochBatches(np.zeros((data.n_patterns, 2)), batch, 1)
    bound = fft_bound_s([len(b) for b in batches.global_batches()], config.model.probe_modes,
                        config.model.object_modes, config.model.slices, data.detector_px,
                        per_position_shift(rec.model), accelerator.device, near_field=rec.model.near_field)
    high_water = _status_bytes("VmHWM") if marks.get("reset") else None
    peak, memory_measure = _peak_memory(accelerator.device, high_water, baseline_rss)
    minimum = _minimum_bytes(rec.model, data, batch)
    transient = max(high_water - marks["rss"], 0) if high_water is not None else None
    return {
        "device": _device_name(accelerator.device),
        "threads": torch.get_num_threads(),
        "patterns": data.n_patterns,
        "detector_px": data.detector_px,
        "batch_size": batch,
        "probe_modes": config.model.probe_modes,
        "object_modes": config.model.object_modes,
        "slices": config.model.slices,
        "refine_positions": rec.model.refine_positions,
        "iterations_timed": len(timed),
        "s_per_iteration": per_iteration,
        "s_per_iteration_all": timed,
        "s_per_iteration_with_hooks": statistics.mean(with_hooks) if with_hooks else None,
        "trackers": list(config.output.trackers),
        "patterns_per_s": data.n_patterns / per_iteration,
        "fft_bound_s": bound,
        "ratio": per_iteration / bound,
        "peak_memory_bytes": peak,
        "minimum_memory_bytes": minimum,
        "memory_ratio": peak / minimum,
        "iteration_transient_bytes": transient,
        "memory_measure": memory_measure,
        "final_loss": rec.loss[-1],
        "torch": str(torch.__version__),
        "python": sys.version.split()[0],
    }


def _peak_memory(device: torch.device, high_water: int | None, baseline_rss: int) -> tuple[int, str]:
    """The run's peak memory in bytes beyond the baseline, and how it was measured: the CUDA
    allocator's peak, else the resident set's high-water mark over the timed iterations
    (``high_water``, None where it could not be reset), else the process's coarse peak."""
    if device.type == "cuda":  # the caching allocator holds more than it hands out: both are said
        reserved = torch.cuda.max_memory_reserved(device) / 2**20
        return torch.cuda.max_memory_allocated(device), f"CUDA allocator peak, timed iterations; {reserved:.1f} MiB reserved"
    if high_water is not None:
        return max(high_water - baseline_rss, 0), "resident set, timed iterations"
    return max(_peak_rss_bytes() - baseline_rss, 0), "peak resident set of the process (coarse)"


ADAM_MOMENTS = 2  # Adam keeps two moments per parameter value
PATTERN_VALUE_BYTES = 4  # patterns are held as float32


def wave_bytes(batch_size: int, window_px: int, probe_modes: int, object_modes: int, slices: int) -> int:
    """One batch's complex64 waves: a K x K wave per pattern, probe mode, object mode and slice."""
    return batch_size * probe_modes * object_modes * slices * window_px * window_px * 8


def _minimum_bytes(model, data, batch_size: int) -> int:
    """Patterns + parameters + Adam state (2 per parameter) + one batch's complex waves."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    waves = wave_bytes(batch_size, data.detector_px, model.probe.shape[0], model.object.shape[0], model.object.shape[1])
    return data.patterns.numel() * PATTERN_VALUE_BYTES + (1 + ADAM_MOMENTS) * params + waves


def _release_free_memory() -> None:
    """Collect garbage and hand the C heap's free pages back (glibc), so the resident set
    counts live memory only."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _status_bytes(field: str) -> int:
    """A memory figure (kB) from /proc/self/status, in bytes; 0 where there is none."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _rss_bytes() -> int:
    """Resident memory now (Linux), else the peak so far."""
    return _status_bytes("VmRSS") or _peak_rss_bytes()


def _reset_peak_rss() -> bool:
    """Restart the kernel's peak-resident-set counter (Linux: clear_refs 5); False where impossible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _status_bytes("VmHWM") > 0


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"{device.type} ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def format_report(report: dict) -> str:
    mib = 2**20
    return "\n".join([
        f"device            {report['device']}",
        f"problem           {report['patterns']} patterns of {report['detector_px']}^2, batch {report['batch_size']}, "
        f"{report['probe_modes']} probe x {report['object_modes']} object modes, {report['slices']} slice(s), "
        f"positions {'refined' if report['refine_positions'] else 'fixed'}",
        f"iteration         {report['s_per_iteration']:.4f} s (median of {report['iterations_timed']})",
        *([f"with hooks        {report['s_per_iteration_with_hooks']:.4f} s (mean of "
           f"{report['iterations_timed'] - 1}; trackers: {', '.join(report['trackers']) or 'none'})"]
          if report.get("s_per_iteration_with_hooks") is not None else []),
        f"patterns/s        {report['patterns_per_s']:.0f}",
        f"FFT bound         {report['fft_bound_s']:.4f} s",
        f"ratio             {report['ratio']:.2f}",
        f"peak memory       {report['peak_memory_bytes'] / mib:.1f} MiB ({report['memory_measure']}); minimum "
        f"{report['minimum_memory_bytes'] / mib:.1f} MiB (patterns, parameters, Adam state, one batch's waves); "
        f"ratio {report['memory_ratio']:.2f}"
        + (f"; growth within an iteration {report['iteration_transient_bytes'] / mib:.1f} MiB"
           if report.get("iteration_transient_bytes") is not None else ""),
    ])


def write_json(report: dict, path: Path) -> None:
    """The report as JSON, written atomically (a full disk: OutputError, no partial file)."""
    write_text(path, json.dumps(report, indent=2))
