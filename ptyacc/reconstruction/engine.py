"""The reconstruction: one code path for one process and for many, in three phases.

``build`` turns the config into the state (data and shard plan, geometry, model, parameter
groups, pattern store, loader, all prepared by Accelerate, and the gradient exchange),
``run`` is the loop, ``finish`` computes the Poisson deviance and saves. What happens after
an iteration lives in ``ptyacc/reconstruction/hooks.py``, each group's update in ``ptyacc/optim/``, the
exchange between processes in ``ptyacc/reconstruction/exchange.py``.

Everything that changes parameters (steps, projections) runs identically on every process;
everything that writes (files, figures, progress) runs on the main process only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from ptyacc.config import Config
from ptyacc.data import PtychoData
from ptyacc.data.aperture_edge import may_read_edge
from ptyacc.data.hold import hold_lines, peak_memory_lines
from ptyacc.data.store import (
    held_mean_over_processes,
    load_planned,
    over_processes,
    pattern_store,
    poisson_deviance_sums,
    sample_statistics,
)
from ptyacc.data.trouble import (
    advanced_phase_warning,
    astigmatism_said,
    conjugate_warning,
    deviance_warning,
    pair_member_said,
    refocused_probe_said,
    turned_scan_said,
    unsure_conjugate_warning,
    warnings_said,
)
from ptyacc.errors import ConfigError, DistributedError
from ptyacc.optim.autos import STRONG_SCATTERING, floor_measured
from ptyacc.optim.groups import lr_factor
from ptyacc.physics.chain import AMPLITUDE_FLOOR_SHARE, EPS
from ptyacc.physics.fused import CompiledTerms, compile_wanted
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.quantities.model import PtychoModel
from ptyacc.quantities.probe_variation import variation_check
from ptyacc.quantities.scans import load_scans
from ptyacc.reconstruction.autos import resolve_autos, runtime_values
from ptyacc.reconstruction.batch_auto import BatchChoice, auto_batch
from ptyacc.reconstruction.checkpoint import checkpoint_folder, latest_checkpoint, restore
from ptyacc.reconstruction.convergence import Convergence
from ptyacc.reconstruction.distributed import make_accelerator, prepare, unwrap, wait_for_everyone
from ptyacc.reconstruction.exchange import GradientExchange, Traffic
from ptyacc.reconstruction.groups import build_groups
from ptyacc.reconstruction.guard import NanGuard
from ptyacc.reconstruction.heap import keep_freed_memory
from ptyacc.reconstruction.history import History
from ptyacc.reconstruction.hooks import iteration_hooks
from ptyacc.reconstruction.initial import build_model, previous_results, start_from
from ptyacc.reconstruction.interrupt import Interrupt, Interrupted, keep_work
from ptyacc.reconstruction.recenter import attach_recentring
from ptyacc.reconstruction.saving import Saver, check_output_dir, run_texts
from ptyacc.reconstruction.threads import set_threads
from ptyacc.reconstruction.tiles import object_tiles
from ptyacc.reconstruction.trials import OrientationTrials, trial_iterations
from ptyacc.reconstruction.validation import ValidationHook, validation_positions
from ptyacc.results.h5file import Results
from ptyacc.results.outdir import hold_output_dir
from ptyacc.results.quality import results_phase_absorption
from ptyacc.results.runlog import RunLog, data_lines

__all__ = ["Reconstruction", "Reconstructor", "build_model", "check_output_dir", "lr_factor", "reconstruct"]


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
    poisson_deviance: float | None = None  # per counted pixel, for Poisson runs and runs on counts
    # multi-process runs, per iteration of this launch: bytes this process exchanged and the
    # seconds spent in those exchanges (``traffic`` splits them by kind of parameter)
    comm_bytes: list[int] = field(default_factory=list)
    comm_time_s: list[float] = field(default_factory=list)
    traffic: list[Traffic] = field(default_factory=list)
    config: Config | None = None  # the config the run took: every auto resolved (``reconstruction/autos.py``)


def reconstruct(config: Config, accelerator=None, data: PtychoData | None = None, write: bool = True,
                on_step=None, resume: bool = False, overwrite: bool = False, quiet: bool = False) -> Reconstruction:
    """Run the reconstruction described by ``config``.

    accelerator: an existing ``accelerate.Accelerator``; made from ``config.runtime`` if None.
    data: an already loaded dataset; read from ``config.data`` if None.
    write: write results.h5, figures, run.log and checkpoints to ``config.output.dir``
        (main process only). An output folder that already holds results or checkpoints is
        refused unless ``overwrite`` (start again) or ``resume`` (continue from the newest
        complete checkpoint) is given; one that another live run uses is always refused.
    on_step: optional callback(iteration, indices) called on every process for every step.
    quiet: nothing said, on the terminal or to ptyacc's logger (a trial inside another run, ``trials.py``).
    """
    main = accelerator.is_main_process if accelerator is not None else None
    with hold_output_dir(Path(config.output.dir), main) if write else contextlib.nullcontext():
        reconstructor = Reconstructor(config, accelerator, write, on_step, resume, overwrite, quiet)
        with reconstructor.closing:  # run.log and the trackers are closed even when the run fails or is interrupted
            reconstructor.build(data)
            reconstructor.run()
            return reconstructor.finish()


class Reconstructor:
    """One reconstruction: ``build``, then ``run``, then ``finish``."""

    def __init__(self, config: Config, accelerator=None, write: bool = True, on_step=None, resume: bool = False,
                 overwrite: bool = False, quiet: bool = False) -> None:
        self.started = time.perf_counter()
        self.ran_until: float | None = None  # when ``run`` ended: finish's run.log line counts from there
        self.config, self.write, self.on_step, self.resume = config, write, on_step, resume
        self.texts = run_texts(config)  # the config, auto's values and the versions, as results.h5 keeps them
        self.pair_said: list[tuple[str, bool]] = []  # X-ray far field: what chose the conjugate pair's member
        self.out_dir = Path(config.output.dir)
        if write:
            check_output_dir(self.out_dir, resume, overwrite)
        self.threads_said = set_threads(config.runtime.threads)
        if write and config.output.trackers:
            from ptyacc.watch.trackers import require_packages  # imported only for a run with trackers

            require_packages(config.output.trackers)
        self.accelerator = accelerator or make_accelerator(config.runtime, config.output)
        self.world = self.accelerator.num_processes
        # Accelerate's backward only divides by 1 without gradient accumulation, a loss scaler or DeepSpeed: then a
        # step starts autograd itself from the factor world / B, a tensor per batch size (five operators fewer)
        self.direct_backward = (self.accelerator.gradient_accumulation_steps == 1 and self.accelerator.scaler is None
                                and self.accelerator.distributed_type.name not in ("DEEPSPEED", "MEGATRON_LM"))
        self.loss_scales: dict[int, torch.Tensor] = {}
        self.interrupt = Interrupt(self.accelerator)  # listens during run() only
        main = write and self.accelerator.is_main_process
        self.closing = contextlib.ExitStack()  # what the run holds open
        self.log = RunLog(self.out_dir / "run.log" if main else None, append=resume,
                          terminal=self.accelerator.is_main_process and not quiet, silent=quiet)
        self.closing.callback(self.log.close)
        try:
            self.log.header(config, self.accelerator)
        except BaseException:  # reconstruct's `with self.closing` is not entered yet
            self.closing.close()
            raise

    # ------------------------------------------------------------------ build
    def build(self, data: PtychoData | None = None) -> None:
        """The state of the run, from the config (and ``data``, if already loaded). What it chose is said at the
        end, so that a config error found while building stays the one line a user sees."""
        from accelerate.utils import set_seed

        config, accelerator = self.config, self.accelerator
        set_seed(config.runtime.seed)  # Python's, NumPy's, torch's and CUDA's generators
        # several scans of one object are one dataset (quantities/scans.py)
        data, scans = load_scans(config, accelerator.device) if data is None and config.scans else (data, None)
        # where the data leave the orientation open, short reconstructions choose it (trials.py)
        judge = (OrientationTrials(config, accelerator, reconstruct) if data is None and trial_iterations(config) > 0
                 and not self.resume and config.model.init_from is None else None)
        self.data, self.plan = load_planned(config, self.world, accelerator.process_index, data, accelerator.device,
                                            judge)
        self.left_out = validation_positions(self.data.positions_A, config.optim.validation_fraction, config.runtime.seed)
        previous = previous_results(config, self.data) if config.model.init_from else None
        if previous is not None:
            self.data = dataclasses.replace(self.data, positions_A=previous.positions_A.copy())
        self.geometry = ObjectGeometry.around(self.data.positions_A, self.data.dx_A, self.data.detector_px,
                                              config.model.object_padding_px)
        self.store = pattern_store(self.data, self.plan, accelerator.device, config.data.hold)
        config, sized = self._sized(config) if config.optim.batch_size == "auto" else (config, None)
        batches = self.plan.batches(self.geometry.positions_px, config.optim.batch_size, config.optim.grouping,
                                    config.runtime.seed, self.store, self.left_out)
        drawn = len(batches.members)  # EpochBatches takes at most these in a step
        clamped = [f"optim.batch_size: {config.optim.batch_size} is more than the {drawn} positions drawn each "
                   f"iteration; using {drawn} (one step per iteration)"] if config.optim.batch_size > drawn else []
        # for optim.loss: auto, and the aperture edge the patterns show (model.probe_aperture_edge:
        # data/aperture_edge.py's rule), from a sample agreed by all processes (one collective where each holds
        # its own share)
        mean_counts, not_counts, peak, mean_pattern = over_processes(
            self.data, sample_statistics(self.store, self.data.mask, n_positions=self.data.n_patterns),
            self.plan.shards is not None, accelerator,
            with_pattern=may_read_edge(config, self.data) or floor_measured(config, self.data))
        self.tiles, tiles_said = object_tiles(config, self.plan, self.geometry, self.data.detector_px,
                                              batches.n_steps, accelerator.process_index, self.world)
        # every auto key, resolved once before the model is built (reconstruction/autos.py; the batch, which the
        # batches needed, above): the run's config has numbers in their place (the model gets the aperture read)
        autos = resolve_autos(config, self.data, self.geometry.positions_px,
                              runtime_values(config, accelerator, self.data, self.store), sized,
                              not_counts == 0, peak, mean_counts, mean_pattern)
        self.counts = not_counts == 0  # the patterns are counts: the final deviance is computed whatever the loss
        # a strongly scattering sample: the deviance's warning names model.slices on one slice
        self.strong_share = autos.scattering if autos.scattering is not None and autos.scattering > STRONG_SCATTERING else None
        self.config = config = autos.config
        self.texts["auto_values"] = autos.values_text()
        built_said: list[str] = []
        # the same on every process (over_processes); never under the bare EPS (patterns all dark or below zero)
        amplitude_floor = max(AMPLITUDE_FLOOR_SHARE * peak, EPS)
        if self.data.radiation == "xray":  # its probe starts from the mean of every pattern, whoever holds them
            mean_pattern = held_mean_over_processes(self.data, self.plan.shards is not None, accelerator)
        self.model = build_model(config, self.data, self.geometry, mean_intensity=mean_counts,
                                 region=self.tiles.region if self.tiles is not None else None,
                                 mean_pattern=mean_pattern if config.model.probe_aperture_edge == "measured"
                                 or self.data.radiation == "xray" else None,
                                 said=built_said, scans=scans, aperture=autos.aperture, amplitude_floor=amplitude_floor)
        if config.optim.loss == "amplitude":
            self.log.line(f"the amplitude loss's floor: {self.model.amplitude_floor:.6g} added to the model's intensity (a "
                          f"millionth of the mean pattern's brightest pixel, {peak:.6g}, in the patterns' units)")
        if previous is not None:
            start_from(self.model, self.geometry, previous, config.model.init_from, built_said)
        # patterns read from a file had their place chosen (on the terminal); given in memory, run.log only
        held = [(text, self.data.hold is not None) for text in hold_lines(
            self.data, self.store, accelerator.device, -(-config.optim.batch_size // self.world))]
        self.groups = build_groups(config, self.model, accelerator.device, autos.priors)
        recentred = attach_recentring(self.groups, config, self.model, self.data.dx_A, self.data.wavelength_A)
        if self.tiles is not None:
            self.tiles.take_over(self.model, self.groups)
        self.wrapped, self.loader = prepare(accelerator, self.model, self.groups, batches)
        self.model = unwrap(self.wrapped)
        self.variation_check = variation_check(config, self.model, self.groups)
        if compile_wanted(config.runtime.compile, accelerator.device):
            compiled = self.model.loss_terms = CompiledTerms(report=self.log.tell)
            self.model.field_terms = compiled.field
        self.exchange = GradientExchange.attach(self.wrapped, self.model, self.world,
                                                footprint=config.runtime.object_exchange == "footprint"
                                                and self.tiles is None)
        if self.tiles is not None:
            self.tiles.connect(lambda nbytes, wait_s: self.exchange.count("object", nbytes, wait_s))
        self.saver = Saver(accelerator, config, self.model, self.data, self.geometry, self.store, self.out_dir,
                           self.write, self.tiles, tell=self.log.tell, left_out=self.left_out,
                           texts=self.texts)
        history = History(config.optim.iterations, traffic=[] if self.exchange is not None else None,
                          validation=[] if len(self.left_out) else None)
        self.history = self._resumed(history) if self.resume else history
        self.convergence = Convergence.of(config, [g.start for g in self.groups if g.start is not None],
                                          self.groups[0].schedule, self.model.depth_blur)  # one schedule serves every group
        self.guard = NanGuard(self.model, self.groups, config.optim.on_nan, self.saver, self.log)
        self.hooks = iteration_hooks(config, accelerator, self.log, self.saver, self.groups, self.wrapped,
                                     self.history, self.data, self.started, self.closing if self.write else None)
        if len(self.left_out):  # first, so that the run.log line and the other hooks see it
            self.hooks.insert(0, ValidationHook(self.model, self.store, self.plan, self.left_out, config.optim.loss,
                                                accelerator))
        self.warnings = [text for text in (*self.data.checks, *autos.notes, *built_said) if text.startswith("warning:")]
        self.texts["warnings"] = yaml.safe_dump(self.warnings)  # results.h5's list, the deviance's added at the end
        self.log.say([self.threads_said, *((text, False) for text in tiles_said),
                      *data_lines(self.data, self.geometry.shape), *held,
                      *((text, True) for text in autos.notes + clamped),
                      *((text, False) for text in autos.log_notes + recentred),
                      *((text, text.startswith("warning:")) for text in built_said)])

    def _sized(self, config: Config) -> tuple[Config, BatchChoice]:
        """``config`` with ``optim.batch_size: auto`` resolved from the data (``batch_auto.auto_batch``,
        the fitted positions: all less those left out for validation), and that choice (called only for auto)."""
        choice = auto_batch(self.data, len(self.data.positions_A) - len(self.left_out))
        self.config = config = dataclasses.replace(config, optim=dataclasses.replace(config.optim, batch_size=choice.size))
        return config, choice

    def _resumed(self, history: History) -> History:
        """``history`` (empty) given the iterations of the newest checkpoint (``--resume``), whose
        state is restored into the model and the optimizers."""
        found = latest_checkpoint(self.out_dir)
        if found is None:
            raise ConfigError(f"output.dir: --resume given but {checkpoint_folder(self.out_dir)} holds no complete "
                              "checkpoint (set output.checkpoint_every or output.checkpoint_minutes, or run without --resume)")
        path, state = found
        if self.tiles is not None:
            state = self.tiles.localize(state)
        restore(self.model, [(g.name, g.optimizer) for g in self.groups], state, path)
        self.model.depth_blur.eased_after = state.get("depth_blur_eased_after")
        history.resume(state["loss"], state["iteration_time_s"])
        self.log.line(f"resumed from {path} after iteration {state['iterations_done']}")
        return history

    # ------------------------------------------------------------------ run
    def run(self) -> None:
        """The iterations, each followed by the hooks; an iteration with a non-finite loss is undone
        (and maybe retried, ``guard.NanGuard``); a SIGINT or SIGTERM stops in the current step,
        keeping the work (``ptyacc.reconstruction.interrupt``)."""
        # the waves are the host's: no page faults for them at every step (heap.py); not where the patterns stay on the
        # host or on disk, whose point is memory: there freed memory is given back (its peak held in tests/test_hold.py)
        if self.accelerator.device.type == "cpu" and self.store.holds_on_device:
            keep_freed_memory()
        with self.interrupt:
            self._ease_depth_blur()
            while self.history.done < self.history.iterations:  # optim.iterations, or fewer once converged
                loss, seconds = self._iteration(self.history.done)
                traffic = self.exchange.take() if self.exchange is not None else None
                if not self.guard.accept(loss, self.history):
                    continue
                self.history.record(loss, seconds, traffic)
                if self.convergence is not None and (said := self.convergence(self.history)):
                    self.log.tell(said)
                    if said.startswith("warning:"):
                        self.warnings.append(said)
                    if self.convergence.converged_after is not None:
                        self.saver.attrs["converged_after_iterations"] = self.convergence.converged_after
                self._ease_depth_blur()
                for hook in self.hooks:
                    hook(self.history)
        self.ran_until = time.perf_counter()

    def _ease_depth_blur(self) -> None:
        """Without a stop rule, the object's depth blur ends its first stage after half the iterations
        (``DepthBlurStages``; the rule ends it where there is one)."""
        depth = self.model.depth_blur
        if self.convergence is None and depth.staged and self.history.done >= depth.half_of(self.history.iterations):
            self.log.tell(depth.ease(self.history.done))

    def _iteration(self, iteration: int) -> tuple[float, float]:
        """One pass over all positions: the mean loss per pattern over all processes, and the
        seconds. Each step: loss, gradient, exchange and update; its loss is this process's
        patterns' sum."""
        self.loader.set_epoch(iteration)
        total = torch.zeros((), dtype=torch.float64, device=self.accelerator.device)
        tick = time.perf_counter()
        try:
            steps = len(self.loader)
            for number, step in enumerate(self.loader):
                if self.on_step is not None:
                    self.on_step(iteration, step.indices)
                if self.exchange is not None:
                    self.exchange.begin_step(step.batch)
                if self.tiles is not None:
                    self.tiles.check_windows(self.model, step.indices)
                losses = self.wrapped(step.indices, step.measured, self.config.optim.loss)
                if number == 0 and self.variation_check is not None and (said := self.variation_check(
                        self.model, self.accelerator, iteration, step.indices, step.measured, self.config.optim.loss,
                        losses)):  # the varying probe dropped: this step with the mean probe
                    self.log.tell(said)
                    losses = self.wrapped(step.indices, step.measured, self.config.optim.loss)
                # DDP averages gradients over processes; x world makes that average the global sum / B.
                if not self.direct_backward:
                    self.accelerator.backward(losses * (self.world / len(step.batch)))
                else:  # the same bits: autograd's ones times the factor, divided by 1
                    if (scale := self.loss_scales.get(len(step.batch))) is None:
                        scale = self.loss_scales[len(step.batch)] = torch.full(
                            (), self.world / len(step.batch), dtype=losses.dtype, device=losses.device)
                    losses.backward(scale)
                if signum := self.interrupt.requested(number, last=number == steps - 1):  # a stop undoes this iteration
                    raise keep_work(signum, self.saver, self.guard, self.groups, self.history)
                for group in self.groups:
                    group.step(iteration, step.batch)
                for group in self.groups:
                    if group.after_step is not None:
                        group.after_step()
                total += losses.detach()
            for group in self.groups:
                group.end_iteration()
            loss = float(self.accelerator.reduce(total, reduction="sum")) / (self.data.n_patterns - len(self.left_out))
        except RuntimeError as exc:
            lost = _lost_contact(exc, self.world, iteration, self.out_dir)
            if lost is None:
                raise
            raise lost from None
        return loss, time.perf_counter() - tick

    # ------------------------------------------------------------------ finish
    def finish(self) -> Reconstruction:
        """Compute the deviance (Poisson runs and any run on counts), save, hand over the results; or, where a signal
        came after the last step asked, raise Interrupted once saved, so that no caller (``reconstruct``,
        a tune trial) drops it. (That the processes agree was checked after the last iteration,
        ``hooks.SyncCheck``; run.log's summary was written then too, ``runlog.LogLine``.)"""
        config, history = self.config, self.history
        poisson = config.optim.loss == "poisson"
        self.saver.deviance = self._deviance(poisson) if poisson or self.counts else None
        late = [] if self.saver.deviance is None else deviance_warning(
            self.saver.deviance, self.saver.deviance_scale.get("counts_per_counted_pixel"),
            electron=self.data.radiation == "electron", slices=config.model.slices, scattering=self.strong_share,
            converged="converged_after_iterations" in self.saver.attrs)
        self.warnings += late
        self.texts["warnings"] = yaml.safe_dump(self.warnings)
        xray_far_field = self.data.radiation == "xray" and self.data.near_field_distance_A is None
        results = self.saver.save(history, figures=config.output.figures,
                                  checks=self._conjugate_checked if xray_far_field else None)
        late += self.saver.late_warnings
        self.warnings += self.saver.late_warnings
        said = [] if self.saver.deviance is None else [f"Poisson deviance per counted pixel: {self.saver.deviance:.6g}"]
        if "detector_blur_px" in results.attrs:
            said.append(f"detector blur: sigma {results.attrs['detector_blur_px']:.3f} px"
                        + (f" (refined from {config.model.detector_blur_px:g} px)"
                           if config.optim.start.detector_blur is not None else ""))
        if self.ran_until is not None:
            said.append(f"finish: {time.perf_counter() - self.ran_until:.2f} s from the last iteration's end to the "
                        "results saved (the deviance, results.h5, figures)")
        for text in said + peak_memory_lines(self.accelerator):
            self.log.line(text)
        self.log.say(turned_scan_said(results) + refocused_probe_said(results) + astigmatism_said(results)
                     + self.pair_said)
        for text in late + warnings_said(self.warnings):
            self.log.tell(text)
        wall = time.perf_counter() - self.started
        traffic = history.traffic or []
        wait_for_everyone(self.accelerator)
        if self.interrupt.signum:  # received after the last step asked: the work is complete and kept
            raise Interrupted(f"{signal.Signals(self.interrupt.signum).name} received after the last iteration's "
                              "last step: the run finished and saved its results first", self.interrupt.signum)
        return Reconstruction(results=results, model=self.model, data=self.data, loss=history.loss,
                              iteration_times_s=history.seconds, wall_time_s=wall,
                              output_dir=self.out_dir if self.write else None, world_size=self.world,
                              poisson_deviance=self.saver.deviance, comm_bytes=[t.total_bytes for t in traffic],
                              comm_time_s=[t.wait_s for t in traffic], traffic=traffic, config=self.config)

    def _conjugate_checked(self, results) -> list[str]:
        """X-ray far field: the object's phase against its log amplitude and its phase's skew over the scanned region
        (results.h5's ``phase_absorption_correlation``, ``phase_skew``), and the warning where the object reads as its
        own conjugate (``trouble.conjugate_warning``; where it absorbs too little to say and the flags or the rotation
        were auto, ``trouble.advanced_phase_warning`` by the skew, else ``unsure_conjugate_warning`` where trials chose
        the flags and the skew does not say the phase is delayed). Where none spoke and the flags or the rotation were
        auto, ``pair_said`` keeps the line on what chose the pair's member (``trouble.pair_member_said``)."""
        correlation, skew = results_phase_absorption(results)
        results.attrs["phase_absorption_correlation"], results.attrs["phase_skew"] = correlation, skew
        transform, autos = self.config.data.transform, self.data.autos
        flags = tuple(bool(autos.get(f"data.transform.{key}", getattr(transform, key)))
                      for key in ("transpose", "flip_y", "flip_x"))
        experiment = self.config.experiment
        side = None if experiment.focus_to_sample_m is not None else experiment.sample_side
        said = conjugate_warning(correlation, flags, side)
        chose = any(key in autos for key in ("data.transform.flip_y", "experiment.scan_rotation_deg"))
        if not said and chose:
            said = advanced_phase_warning(correlation, skew, flags, side)
        chosen_side = autos.get("experiment.sample_side")  # the side's trials chose it
        if not said and chosen_side is not None and self.data.detector.get("orientation_by_trials", False):
            said = unsure_conjugate_warning(correlation, flags, chosen_side, skew)
        if not said and chose:
            self.pair_said = pair_member_said(correlation, skew, flags, side)
        return said

    def _deviance(self, poisson: bool = True) -> float:
        """Poisson deviance per counted pixel over all positions, each evaluated by one process; with the
        terms that turn a ``poisson`` run's loss history into deviances (results.h5), the counts per pixel alone
        for another loss on counts."""
        mine = torch.as_tensor(self.plan.evaluation_share(self.data.n_patterns), device=self.accelerator.device)
        # in chunks of a step's patterns on this process (at least 64): memory a step already takes
        sums = poisson_deviance_sums(self.model, self.store, mine, max(64, -(-self.config.optim.batch_size
                                                                              // self.world)))
        if self.world > 1:
            sums = self.accelerator.reduce(sums, reduction="sum")
        deviance = float(sums[0] / (0.5 * sums[1]))
        # what turns the loss history into the deviance per counted pixel (ptyacc.results.figures.plot_loss)
        counts = {"counts_per_counted_pixel": float(sums[3] / sums[1]) if sums[1] > 0 else 0.0}
        self.saver.deviance_scale = {"poisson_data_nll_per_pattern": float(sums[2]) / self.data.n_patterns,
                                     "counted_pixel_values_per_pattern": float(sums[1]) / self.data.n_patterns,
                                     **counts} if poisson else counts
        return deviance


def _lost_contact(exc: RuntimeError, world: int, iteration: int, out_dir: Path) -> DistributedError | None:
    """A collective that failed because another process died, as one clear error; None for any
    other error (raised as it is)."""
    text = str(exc)
    lost = world > 1 and (isinstance(exc, getattr(torch.distributed, "DistBackendError", ())) or any(
        word in text for word in ("Connection", "connection", "gloo", "NCCL", "timed out", "Timeout")))
    if not lost:
        return None
    return DistributedError(f"lost contact with the other processes in iteration {iteration} "
                            f"({text.splitlines()[0][:200]}): another process failed or was killed (the "
                            f"launcher's log names it); the newest checkpoint in {checkpoint_folder(out_dir)} "
                            "can be resumed with --resume")
