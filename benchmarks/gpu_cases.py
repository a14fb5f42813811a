"""The scaling model on GPUs: the bytes a pattern moves, the GPU assumed, its step cost, and the
speed-up tables of the reference cases that ``ptyacc predict`` prints (benchmarks/records/2026-11-27-scaling.md)."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.scaling import (
    INFINIBAND_HDR,
    LINKS,
    NVLINK,
    Layout,
    Link,
    StepCost,
    dense_exchange,
    epoch_load,
    fit_step_cost,
    footprint_exchange,
    predict_iteration,
    raster_layout,
)

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


# ----------------------------------------------------------------------------- reference cases and the command

ELECTRON_STEP_PX = 0.429 / 0.1494  # PtyRAD's tBL-WSe2: 0.429 Å scan step, 0.1494 Å pixels
XRAY_STEP_PX = 40.0  # 256 px windows, 85% linear overlap


def reference_cases() -> list[tuple[str, Layout, tuple[int, ...]]]:
    """(title, layout, batch sizes) of the two cases in benchmarks/records/2026-11-27-scaling.md."""
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
    """The prediction tables of benchmarks/records/2026-11-27-scaling.md (Markdown)."""
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
