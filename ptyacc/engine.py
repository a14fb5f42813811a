"""The reconstruction loop: one code path for one process and for many.

Everything that changes parameters (steps, constraints) runs identically on every process;
everything that writes (files, figures, progress) runs on the main process only.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from ptyacc.checkpoint import checkpoint_folder, latest_checkpoint, restore, save_checkpoint
from ptyacc.config import Config
from ptyacc.data import EpochBatches, PtychoData, load_data, spatial_shards
from ptyacc.data.dataset import keep_only
from ptyacc.distributed import CommMeter, attach_comm_meter, check_in_sync, get_attribute, make_accelerator, unwrap
from ptyacc.errors import ConfigError, DistributedError, PtyaccError
from ptyacc.geometry import ObjectGeometry
from ptyacc.model import PtychoModel
from ptyacc.output import Results, load_results, save_figures, save_results, versions
from ptyacc.physics import Detector, deviance_sums, fresnel_propagator, mixed_state_probe, stem_probe
from ptyacc.physics.fused import CompiledTerms
from ptyacc.runlog import RunLog

MAX_POSITION_OFFSET_FRACTION = 0.25  # of the probe window
MAX_ROLLBACKS = 3


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
    poisson_deviance: float | None = None  # per counted pixel, for Poisson runs
    # multi-process runs: gradient bytes all-reduced and seconds spent in those all-reduces, per iteration
    comm_bytes: list[int] = field(default_factory=list)
    comm_time_s: list[float] = field(default_factory=list)


def reconstruct(config: Config, accelerator=None, data: PtychoData | None = None, write: bool = True,
                on_step=None, resume: bool = False, overwrite: bool = False) -> Reconstruction:
    """Run the reconstruction described by ``config``.

    accelerator: an existing ``accelerate.Accelerator``; made from ``config.runtime`` if None.
    data: an already loaded dataset; read from ``config.data`` if None.
    write: write results.h5, figures, run.log and checkpoints to ``config.output.dir``
        (main process only). An output folder that already holds results or checkpoints is
        refused unless ``overwrite`` (start again) or ``resume`` (continue from the newest
        complete checkpoint) is given.
    on_step: optional callback(iteration, indices) called on every process for every step.
    """
    started = time.perf_counter()
    out_dir = Path(config.output.dir)
    if write:
        check_output_dir(out_dir, resume, overwrite)
    if config.runtime.threads:
        torch.set_num_threads(config.runtime.threads)
    accelerator = accelerator or make_accelerator(config.runtime)
    world, rank = accelerator.num_processes, accelerator.process_index
    log = RunLog(out_dir / "run.log" if write and accelerator.is_main_process else None, append=resume)
    log.header(config, accelerator)
    torch.manual_seed(config.runtime.seed)
    keep = None
    if config.runtime.shard_data:
        # each process reads and holds only the patterns of its own spatial shard
        keep = lambda positions_A: spatial_shards(positions_A, world)[rank]  # noqa: E731
    data = data if data is not None else load_data(config, keep)
    if keep is not None and data.pattern_rows is None:
        data = keep_only(data, keep)
    previous = None
    if config.model.init_from:
        previous = _previous_results(config, data)
        data = dataclasses.replace(data, positions_A=previous.positions_A.copy())
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px, config.model.object_padding_px)
    held_sum = data.patterns.sum(dtype=torch.float64).to(accelerator.device)
    if keep is not None:
        held_sum = accelerator.reduce(held_sum, reduction="sum")
    model = build_model(config, data, geometry, mean_intensity=float(held_sum) / data.n_patterns)
    if previous is not None:
        start_from(model, geometry, previous, config.model.init_from)
    log.line(f"data: {data.source}, {data.n_patterns} positions, patterns {data.detector_px}^2, dx {data.dx_A:.4g} A, "
             f"object {geometry.shape[0]} x {geometry.shape[1]} px")

    opt_cfg = config.optim
    groups = [("object", [model.object], opt_cfg.lr.object, opt_cfg.start.object),
              ("probe", [model.probe], opt_cfg.lr.probe, opt_cfg.start.probe)]
    if model.refine_positions:
        groups.append(("positions", [model.position_offsets], opt_cfg.lr.positions, opt_cfg.start.positions))
    detector_params = [p for p in (model.background, model.intensity_weights) if p is not None]
    if detector_params:
        groups.append(("detector", detector_params, opt_cfg.lr.detector, opt_cfg.start.probe))
    optimizers = [torch.optim.Adam(params, lr=lr, **_fast_adam(accelerator.device)) for _, params, lr, _ in groups]
    starts = [start for *_, start in groups]
    history: list[float] = []
    iteration_times: list[float] = []
    if resume:
        found = latest_checkpoint(out_dir)
        if found is None:
            raise ConfigError(f"output.dir: --resume given but {checkpoint_folder(out_dir)} holds no complete "
                              "checkpoint (set output.checkpoint_every, or run without --resume)")
        path, state = found
        restore(model, optimizers, state, path)
        history, iteration_times = list(state["loss"]), list(state["iteration_time_s"])
        log.line(f"resumed from {path} after iteration {state['iterations_done']}")

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
    if config.runtime.compile:
        bare.loss_terms = CompiledTerms(report=lambda text: _tell(accelerator, log, text))
    meter = attach_comm_meter(model, world)
    max_offset = MAX_POSITION_OFFSET_FRACTION * data.detector_px
    bounds = tuple(config.model.object_amplitude_bounds)
    saver = _Saver(accelerator, config, bare, data, geometry, out_dir, write)
    progress = _progress(accelerator, config, opt_cfg.iterations, initial=len(history))
    lr_scale, retries = 1.0, 0

    iteration = len(history)
    while iteration < opt_cfg.iterations:
        good = _snapshot(bare, optimizers)
        loader.set_epoch(iteration)
        factor = lr_scale * lr_factor(iteration, opt_cfg.iterations, opt_cfg.lr_final_fraction)
        for optimizer, (_, _, lr, _) in zip(optimizers, groups, strict=True):
            for group in optimizer.param_groups:
                group["lr"] = lr * factor
        iteration_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        tick = time.perf_counter()
        with _collective_errors(world, iteration, out_dir):
            for indices, global_size in loader:
                if on_step is not None:
                    on_step(iteration, indices)
                pattern_losses = model(indices, patterns[row_of[indices]], opt_cfg.loss)
                # DDP averages gradients over processes; x world makes that average the global sum / B.
                accelerator.backward(pattern_losses * (world / global_size))
                for optimizer, start in zip(optimizers, starts, strict=True):
                    if start is not None and iteration >= start:
                        optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                bare.apply_step_constraints()
                iteration_sum += pattern_losses.detach()
            bare.apply_constraints(bounds, config.model.orthogonalize_probe, max_offset)
            loss = float(accelerator.reduce(iteration_sum, reduction="sum")) / data.n_patterns
        if not math.isfinite(loss):
            bad = [name for name, p in bare.named_parameters() if not torch.isfinite(p).all()] or ["the loss only"]
            _restore_snapshot(bare, optimizers, good)
            if opt_cfg.on_nan == "rollback" and retries < MAX_ROLLBACKS:
                retries += 1
                lr_scale *= 0.5
                log.line(f"iteration {iteration}: loss {loss} (non-finite: {', '.join(bad)}); rolled back, "
                         f"learning rates x{lr_scale:g}")
                continue
            saver.save(history, iteration_times)
            where = f"{out_dir / 'results.h5'}" if write else "memory"
            raise PtyaccError(f"optim: the loss became {loss} at iteration {iteration} (non-finite values in: "
                              f"{', '.join(bad)}); the last good state (after {iteration} iterations) is in {where}. "
                              "Lower optim.lr, or set optim.on_nan: rollback")
        history.append(loss)
        iteration_times.append(time.perf_counter() - tick)
        iteration += 1
        comm = ""
        if meter is not None:
            counts = meter.end_iteration()
            comm = (f", all-reduced {counts['bytes'] / 2**20:.2f} MiB in {counts['calls']} calls, "
                    f"{counts['busy_s']:.3f} s")
        log.line(f"iteration {iteration}/{opt_cfg.iterations}: loss {loss:.6g}, {iteration_times[-1]:.3f} s{comm}")
        if config.runtime.check_sync_every and iteration % config.runtime.check_sync_every == 0:
            check_in_sync(accelerator, model, iteration - 1)
        if progress is not None:
            rate = data.n_patterns / max(iteration_times[-1], 1e-9)
            progress.set_postfix(loss=f"{loss:.5g}", patterns_per_s=f"{rate:.0f}")
            progress.update(1)
        every = config.output.checkpoint_every
        if every and (iteration % every == 0 or iteration == opt_cfg.iterations):
            saver.checkpoint(optimizers, history, iteration_times, config.output.keep_checkpoints)
        if config.output.save_every and iteration % config.output.save_every == 0 and iteration < opt_cfg.iterations:
            saver.save(history, iteration_times, meter)
    if progress is not None:
        progress.close()
    check_in_sync(accelerator, model, opt_cfg.iterations - 1)
    deviance = None
    if opt_cfg.loss == "poisson":
        mine = (data.pattern_rows if data.pattern_rows is not None else np.arange(data.n_patterns)[rank::world])
        sums = poisson_deviance_sums(bare, patterns, row_of, torch.as_tensor(mine, device=accelerator.device))
        if world > 1:
            sums = accelerator.reduce(sums, reduction="sum")
        deviance = float(sums[0] / (0.5 * sums[1]))
        log.line(f"Poisson deviance per counted pixel: {deviance:.6g}")
    saver.deviance = deviance
    results = saver.save(history, iteration_times, meter, figures=config.output.figures)
    wall = time.perf_counter() - started
    log.line(f"done: {len(history)} iterations in {wall:.1f} s, final loss {history[-1]:.6g}")
    comm_bytes = meter.bytes_per_iteration if meter is not None else []
    comm_times = meter.seconds_per_iteration if meter is not None else []
    if comm_times:
        log.line(f"communication: {sum(comm_bytes) / len(comm_bytes) / 2**20:.2f} MiB all-reduced per iteration, "
                 f"{sum(comm_times) / sum(iteration_times[-len(comm_times):]):.0%} of the iteration time")
    accelerator.wait_for_everyone()
    return Reconstruction(results=results, model=bare, data=data, loss=history, iteration_times_s=iteration_times,
                          wall_time_s=wall, output_dir=out_dir if write else None, world_size=world,
                          poisson_deviance=deviance, comm_bytes=comm_bytes, comm_time_s=comm_times)


@torch.no_grad()
def poisson_deviance_sums(model: PtychoModel, patterns: torch.Tensor, row_of: torch.Tensor, indices: torch.Tensor,
                          chunk: int = 64) -> torch.Tensor:
    """(sum over counted pixels of the Poisson deviance terms, number of pixel values >= 1) of the
    model's prediction for ``indices`` against their patterns, in chunks (``deviance_sums``);
    divided by half the count the deviance is ~1 for a model at the noise level."""
    total = torch.zeros(2, dtype=torch.float64, device=patterns.device)
    for start in range(0, len(indices), chunk):
        part = indices[start:start + chunk]
        total += deviance_sums(model(part), patterns[row_of[part]], model.detector_mask)
    return total


def _previous_results(config: Config, data: PtychoData) -> Results:
    path = config.resolve_input(config.model.init_from)
    previous = load_results(path)
    if previous.positions_A.shape != data.positions_A.shape:
        raise ConfigError(f"model.init_from: {path} holds {len(previous.positions_A)} positions, the data "
                          f"{len(data.positions_A)}")
    if abs(previous.dx_A / data.dx_A - 1) > 1e-6:
        raise ConfigError(f"model.init_from: {path} has object pixels of {previous.dx_A:.6g} A, this data "
                          f"{data.dx_A:.6g} A")
    return previous


def start_from(model: PtychoModel, geometry: ObjectGeometry, previous: Results, name: str) -> None:
    """Copy a previous run's probe and object into the new model. The object canvas may have
    moved by whole pixels (refined positions change its extent): the overlap is copied."""
    if previous.probe.shape != tuple(model.complex_probe().shape):
        raise ConfigError(f"model.init_from: {name} has probe modes {previous.probe.shape}, this config builds "
                          f"{tuple(model.complex_probe().shape)} (model.probe_modes, detector size)")
    modes, slices = previous.object.shape[:2]
    if (modes, slices) != tuple(model.object.shape[:2]):
        raise ConfigError(f"model.init_from: {name} has {modes} object mode(s) x {slices} slice(s), this config "
                          f"{model.object.shape[0]} x {model.object.shape[1]} (model.object_modes, model.slices)")
    shift = np.round((np.asarray(previous.origin_A) - np.asarray(geometry.origin_A)) / geometry.dx_A).astype(int)
    old = torch.from_numpy(previous.object)
    with torch.no_grad():
        model.probe.copy_(torch.view_as_real(torch.from_numpy(previous.probe) / model.probe_scale))
        target = torch.view_as_complex(model.object)
        (oy, ox), (ny, nx) = shift, old.shape[-2:]
        y0, x0 = max(oy, 0), max(ox, 0)
        y1, x1 = min(oy + ny, target.shape[-2]), min(ox + nx, target.shape[-1])
        if y1 > y0 and x1 > x0:
            target[..., y0:y1, x0:x1] = old[..., y0 - oy:y1 - oy, x0 - ox:x1 - ox]


def check_output_dir(out_dir: Path, resume: bool, overwrite: bool) -> None:
    """Refuse to write over a previous run's results unless asked to."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"output.dir: {out_dir} is a file, not a folder")
    if resume or overwrite:
        return
    existing = [p.name for p in (out_dir / "results.h5", checkpoint_folder(out_dir)) if p.exists()]
    if existing:
        raise ConfigError(f"output.dir: {out_dir} already holds {' and '.join(existing)}; pass --overwrite to replace "
                          "them, --resume to continue from the newest checkpoint, or choose another output.dir")


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
    mean_intensity = data.mean_intensity if mean_intensity is None else mean_intensity
    near = (fresnel_propagator(k, data.dx_A, data.wavelength_A, data.near_field_distance_A)
            if data.near_field_distance_A is not None else None)
    detector = Detector(propagator=near, mask=data.mask.float() if data.mask is not None else None)
    if data.radiation == "electron":
        if data.semiangle_mrad is None:
            raise ConfigError("experiment.semiangle_mrad: needed to build the initial probe, and the data file "
                              "has no 'semiangle_mrad' attribute")
        probe = stem_probe(k, data.dk_invA, data.wavelength_A, data.semiangle_mrad, data.aberrations)
    else:
        probe = probe_from_patterns(data.patterns.mean(0), detector)
    try:
        probe = mixed_state_probe(probe * math.sqrt(mean_intensity / float((probe.abs() ** 2).sum())),
                                  config.model.probe_modes)
    except ValueError as exc:
        raise ConfigError(f"model.probe_modes: {exc}") from None
    slices = config.model.slices
    propagator = (fresnel_propagator(k, data.dx_A, data.wavelength_A, config.model.slice_thickness_A)
                  if slices > 1 else None)
    pixel_mean = mean_intensity / k**2
    return PtychoModel(probe, geometry, config.model.object_modes, slices, propagator,
                       refine_positions=config.optim.start.positions is not None, seed=config.runtime.seed,
                       detector=detector, fit_background=config.model.background,
                       fit_weights=config.model.intensity_weights, background_scale=pixel_mean)


def probe_from_patterns(mean_pattern: torch.Tensor, detector: Detector) -> torch.Tensor:
    """A first probe (K, K) when the optics are unknown (X-ray): the wave whose detector
    intensity is the mean pattern (model layout), with a flat phase at the detector, brought
    back to the sample plane; centred in the window for the far field."""
    amplitude = torch.sqrt(mean_pattern.clamp(min=0).to(torch.float64)).to(torch.complex128)
    if detector.propagator is None:
        return torch.fft.fftshift(torch.fft.ifft2(amplitude, norm="ortho")).to(torch.complex64)
    return detector.adjoint(amplitude.to(torch.complex64)[None])[0]


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


class _Saver:
    """Writes results, figures and checkpoints from the main process (a no-op elsewhere)."""

    def __init__(self, accelerator, config: Config, model: PtychoModel, data: PtychoData,
                 geometry: ObjectGeometry, out_dir: Path, write: bool) -> None:
        self.accelerator, self.config, self.model = accelerator, config, model
        self.data, self.geometry, self.out_dir, self.write = data, geometry, out_dir, write
        self.deviance: float | None = None

    def save(self, history: list[float], times: list[float], meter: CommMeter | None = None,
             figures: bool | None = None) -> Results:
        results = collect_results(self.config, self.model, self.data, self.geometry, history,
                                  self.accelerator.num_processes)
        results.iteration_time_s = np.asarray(times)
        if meter is not None:
            results.comm_bytes = np.asarray(meter.bytes_per_iteration)
            results.comm_time_s = np.asarray(meter.seconds_per_iteration)
        if self.deviance is not None:
            results.attrs["poisson_deviance"] = self.deviance
        if self.write and self.accelerator.is_main_process:
            results.mean_pattern_measured, results.mean_pattern_predicted = self._mean_patterns()
            save_results(self.out_dir / "results.h5", results)
            if self.config.output.figures if figures is None else figures:
                save_figures(self.out_dir, results, initial_positions_A=self.data.positions_A)
        return results

    def _mean_patterns(self, most: int = 128) -> tuple[np.ndarray, np.ndarray]:
        """Mean of up to ``most`` held patterns and of the model's prediction for them (centred)."""
        held = self.data.pattern_rows if self.data.pattern_rows is not None else np.arange(self.data.n_patterns)
        pick = np.arange(0, len(held), max(1, len(held) // most))
        device = self.accelerator.device
        with torch.no_grad():
            predicted = self.model(torch.as_tensor(held[pick], device=device)).mean(0)
        measured = self.data.patterns[torch.as_tensor(pick)].mean(0)
        if self.data.near_field_distance_A is not None:  # near-field images are stored as they are
            return measured.double().numpy(), predicted.double().cpu().numpy()
        centre = lambda t: torch.fft.fftshift(t, dim=(-2, -1)).double().cpu().numpy()  # noqa: E731
        return centre(measured), centre(predicted)

    def checkpoint(self, optimizers: list, history: list[float], times: list[float], keep: int) -> None:
        if not (self.write and self.accelerator.is_main_process):
            return
        state = {"iterations_done": len(history), "model": self.model.state_dict(),
                 "optimizers": [o.state_dict() for o in optimizers], "loss": list(history),
                 "iteration_time_s": list(times), "world_size": self.accelerator.num_processes,
                 "config": self.config.to_yaml()}
        save_checkpoint(self.out_dir, state, keep)


def _snapshot(model: PtychoModel, optimizers: list) -> tuple[dict, list]:
    """Copies of the parameters and optimizer states, to undo an iteration that diverged."""
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    return params, [copy.deepcopy(o.state_dict()) for o in optimizers]


def _restore_snapshot(model: PtychoModel, optimizers: list, snapshot: tuple[dict, list]) -> None:
    params, states = snapshot
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(params[name])
    for optimizer, state in zip(optimizers, states, strict=True):
        optimizer.load_state_dict(state)


@contextlib.contextmanager
def _collective_errors(world: int, iteration: int, out_dir: Path):
    """A collective that fails because another process died becomes one clear error."""
    try:
        yield
    except RuntimeError as exc:
        text = str(exc)
        lost = world > 1 and (isinstance(exc, getattr(torch.distributed, "DistBackendError", ())) or any(
            word in text for word in ("Connection", "connection", "gloo", "NCCL", "timed out", "Timeout")))
        if not lost:
            raise
        raise DistributedError(f"lost contact with the other processes in iteration {iteration} "
                               f"({text.splitlines()[0][:200]}): another process failed or was killed (the "
                               f"launcher's log names it); the newest checkpoint in {checkpoint_folder(out_dir)} "
                               "can be resumed with --resume") from None


def _progress(accelerator, config: Config, total: int, initial: int = 0):
    if not (accelerator.is_main_process and config.runtime.progress and sys.stderr.isatty()):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="ptyacc", unit="it", dynamic_ncols=True)


def _tell(accelerator, log: RunLog, text: str) -> None:
    """A message for the user: on the terminal and in run.log (main process)."""
    log.line(text)
    if accelerator.is_main_process:
        print(f"ptyacc: {text}", file=sys.stderr)


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
