"""The reconstruction loop: one code path for one process and for many.

Everything that changes parameters (steps, constraints) runs identically on every process;
everything that writes (files, figures, progress) runs on the main process only.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from ptyacc.config import Config
from ptyacc.data import EpochBatches, PtychoData, load_data, spatial_shards
from ptyacc.data.dataset import keep_only
from ptyacc.distributed import check_in_sync, get_attribute, make_accelerator, unwrap
from ptyacc.errors import ConfigError
from ptyacc.geometry import ObjectGeometry
from ptyacc.model import PtychoModel
from ptyacc.output import Results, save_figures, save_results, versions
from ptyacc.physics import fresnel_propagator, mixed_state_probe, stem_probe

MAX_POSITION_OFFSET_FRACTION = 0.25  # of the probe window


@dataclass
class Reconstruction:
    """What ``reconstruct`` returns: the saved results plus the live objects behind them."""

    results: Results
    model: PtychoModel
    data: PtychoData
    loss: list[float] = field(default_factory=list)
    iteration_times_s: list[float] = field(default_factory=list)
    wall_time_s: float = 0.0
    output_dir: Path | None = None
    world_size: int = 1


def reconstruct(config: Config, accelerator=None, data: PtychoData | None = None,
                write: bool = True, on_step=None) -> Reconstruction:
    """Run the reconstruction described by ``config``.

    accelerator: an existing ``accelerate.Accelerator``; made from ``config.runtime`` if None.
    data: an already loaded dataset; read from ``config.data`` if None.
    write: write results.h5 and figures to ``config.output.dir`` (main process only).
    on_step: optional callback(iteration, indices) called on every process for every step.
    """
    started = time.perf_counter()
    if config.runtime.threads:
        torch.set_num_threads(config.runtime.threads)
    accelerator = accelerator or make_accelerator(config.runtime)
    torch.manual_seed(config.runtime.seed)
    world, rank = accelerator.num_processes, accelerator.process_index
    keep = None
    if config.runtime.shard_data:
        # each process reads and holds only the patterns of its own spatial shard
        keep = lambda positions_A: spatial_shards(positions_A, world)[rank]  # noqa: E731
    data = data if data is not None else load_data(config, keep)
    if keep is not None and data.pattern_rows is None:
        data = keep_only(data, keep)
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px, config.model.object_padding_px)
    held_sum = data.patterns.sum(dtype=torch.float64).to(accelerator.device)
    if keep is not None:
        held_sum = accelerator.reduce(held_sum, reduction="sum")
    model = build_model(config, data, geometry, mean_intensity=float(held_sum) / data.n_patterns)

    opt_cfg = config.optim
    groups = [("object", [model.object], opt_cfg.lr.object, opt_cfg.start.object),
              ("probe", [model.probe], opt_cfg.lr.probe, opt_cfg.start.probe)]
    if model.refine_positions:
        groups.append(("positions", [model.position_offsets], opt_cfg.lr.positions, opt_cfg.start.positions))
    optimizers = [torch.optim.Adam(params, lr=lr, **_fast_adam(accelerator.device)) for _, params, lr, _ in groups]
    starts = [start for *_, start in groups]

    shards = spatial_shards(data.positions_A, world) if keep is not None else None
    batches = EpochBatches(geometry.positions_px, opt_cfg.batch_size, world, opt_cfg.grouping, config.runtime.seed,
                           shards)
    loader = DataLoader(batches, batch_size=1, shuffle=False, collate_fn=_single_item)
    with warnings.catch_warnings():
        # torch deprecates broadcast_buffers=False in favour of a DDP option accelerate cannot pass yet
        warnings.filterwarnings("ignore", message=".*broadcast_buffers.*deprecated", category=FutureWarning)
        model, *optimizers, loader = accelerator.prepare(model, *optimizers, loader)

    patterns = data.patterns.to(accelerator.device)
    row_of = torch.arange(data.n_patterns, device=accelerator.device)  # position index -> row of `patterns`
    if data.pattern_rows is not None:
        row_of[torch.from_numpy(data.pattern_rows).to(accelerator.device)] = torch.arange(
            len(data.pattern_rows), device=accelerator.device)
    bare: PtychoModel = unwrap(model)
    max_offset = MAX_POSITION_OFFSET_FRACTION * data.detector_px
    bounds = tuple(config.model.object_amplitude_bounds)
    out_dir = Path(config.output.dir)
    history: list[float] = []
    iteration_times: list[float] = []
    progress = _progress(accelerator, config, opt_cfg.iterations)

    for iteration in range(opt_cfg.iterations):
        loader.set_epoch(iteration)
        factor = lr_factor(iteration, opt_cfg.iterations, opt_cfg.lr_final_fraction)
        for optimizer, (_, _, lr, _) in zip(optimizers, groups, strict=True):
            for group in optimizer.param_groups:
                group["lr"] = lr * factor
        iteration_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        tick = time.perf_counter()
        for indices, global_size in loader:
            if on_step is not None:
                on_step(iteration, indices)
            pattern_losses = model(indices, patterns[row_of[indices]], opt_cfg.loss)
            # DDP averages gradients over processes; x world makes that average the global sum / B.
            accelerator.backward(pattern_losses * (world / global_size))
            for optimizer, start in zip(optimizers, starts):
                if start is not None and iteration >= start:
                    optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            iteration_sum += pattern_losses.detach()
        bare.apply_constraints(bounds, config.model.orthogonalize_probe, max_offset)
        total = accelerator.reduce(iteration_sum, reduction="sum")
        history.append(float(total) / data.n_patterns)
        iteration_times.append(time.perf_counter() - tick)
        if not math.isfinite(history[-1]):
            raise FloatingPointError(f"loss became {history[-1]} at iteration {iteration}")
        if config.runtime.check_sync_every and (iteration + 1) % config.runtime.check_sync_every == 0:
            check_in_sync(accelerator, model, iteration)
        if progress is not None:
            rate = data.n_patterns / max(iteration_times[-1], 1e-9)
            progress.set_postfix(loss=f"{history[-1]:.5g}", patterns_per_s=f"{rate:.0f}")
            progress.update(1)
        save_now = config.output.save_every and (iteration + 1) % config.output.save_every == 0
        if write and save_now and iteration + 1 < opt_cfg.iterations:
            _save(accelerator, config, bare, data, geometry, history, out_dir)
    if progress is not None:
        progress.close()
    check_in_sync(accelerator, model, opt_cfg.iterations - 1)
    results = collect_results(config, bare, data, geometry, history, world)
    results.iteration_time_s = np.asarray(iteration_times)
    if write:
        _save(accelerator, config, bare, data, geometry, history, out_dir, results)
    accelerator.wait_for_everyone()
    return Reconstruction(results=results, model=bare, data=data, loss=history, iteration_times_s=iteration_times,
                          wall_time_s=time.perf_counter() - started,
                          output_dir=out_dir if write else None, world_size=world)


def lr_factor(iteration: int, iterations: int, final_fraction: float) -> float:
    """Cosine decay from 1 at the first iteration to ``final_fraction`` at the last."""
    if iterations <= 1:
        return 1.0
    return final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + math.cos(math.pi * iteration / (iterations - 1)))


def build_model(config: Config, data: PtychoData, geometry: ObjectGeometry,
                mean_intensity: float | None = None) -> PtychoModel:
    """The initial model: a probe from the experiment's optics, scaled to the data's mean
    intensity (total counts per pattern; computed from the held patterns if None), split into
    modes; a flat object; positions from the data."""
    k = data.detector_px
    if geometry.shape[0] < k or geometry.shape[1] < k:
        raise ConfigError(f"data: the object ({geometry.shape[0]} x {geometry.shape[1]} px) is smaller than the "
                          f"probe window ({k} x {k} px)")
    if data.semiangle_mrad is None:
        raise ConfigError("experiment.semiangle_mrad: needed to build the initial probe, and the data file "
                          "has no 'semiangle_mrad' attribute")
    probe = stem_probe(k, data.dk_invA, data.wavelength_A, data.semiangle_mrad, data.aberrations)
    try:
        mean_intensity = data.mean_intensity if mean_intensity is None else mean_intensity
        probe = mixed_state_probe(probe * math.sqrt(mean_intensity), config.model.probe_modes)
    except ValueError as exc:
        raise ConfigError(f"model.probe_modes: {exc}") from None
    slices = config.model.slices
    propagator = (fresnel_propagator(k, data.dx_A, data.wavelength_A, config.model.slice_thickness_A)
                  if slices > 1 else None)
    return PtychoModel(probe, geometry, config.model.object_modes, slices, propagator,
                       refine_positions=config.optim.start.positions is not None, seed=config.runtime.seed)


def collect_results(config: Config, model: PtychoModel, data: PtychoData, geometry: ObjectGeometry,
                    history: list[float], world_size: int) -> Results:
    """The model's state as a Results record (CPU, NumPy)."""
    with torch.no_grad():
        positions_px = get_attribute(model, "positions")().double().cpu().numpy()
        obj = get_attribute(model, "complex_object")().cpu().numpy()
        probe = get_attribute(model, "complex_probe")().cpu().numpy()
    import yaml

    attrs = {"config": config.to_yaml(), "versions": yaml.safe_dump(versions()), "world_size": world_size,
             "iterations_done": len(history), "wavelength_A": data.wavelength_A, "loss_name": config.optim.loss,
             "source": data.source}
    return Results(object=obj, probe=probe, positions_A=geometry.to_A(positions_px), loss=np.asarray(history),
                   dx_A=geometry.dx_A, origin_A=geometry.origin_A, attrs=attrs)


def _save(accelerator, config: Config, model: PtychoModel, data: PtychoData, geometry: ObjectGeometry,
          history: list[float], out_dir: Path, results: Results | None = None) -> None:
    if not accelerator.is_main_process:
        return
    results = results or collect_results(config, model, data, geometry, history, accelerator.num_processes)
    save_results(out_dir / "results.h5", results)
    if config.output.figures:
        save_figures(out_dir, results, initial_positions_A=data.positions_A)


def _progress(accelerator, config: Config, total: int):
    if not (accelerator.is_main_process and config.runtime.progress and sys.stderr.isatty()):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="ptyacc", unit="it", dynamic_ncols=True)


def _fast_adam(device: torch.device) -> dict:
    """Adam's fused kernel where this torch has it for the device (CPU and CUDA in torch >= 2.4)."""
    try:
        torch.optim.Adam([torch.zeros(1, device=device, requires_grad=True)], fused=True)
    except (RuntimeError, TypeError, ValueError):
        return {}
    return {"fused": True}


def _single_item(items: list) -> object:
    """Collate for batch size 1: the dataset item itself (indices, global batch size)."""
    return items[0]
