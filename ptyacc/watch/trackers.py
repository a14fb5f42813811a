"""A run watched live through Accelerate's experiment trackers (``output.trackers``:
TensorBoard, Weights & Biases, MLflow, ...): ``Trackers`` starts them with the resolved config
as hyperparameters, sends the scalars of an iteration every ``output.log_every`` iterations and
pictures every ``output.image_every`` iterations and after the last (main process only, through
each tracker's own call), and closes them when the run ends, fails or is interrupted.

Imported only when ``output.trackers`` names one: a run without trackers loads none of this.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Protocol

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data.dataset import PtychoData
from ptyacc.data.store import PatternStore
from ptyacc.errors import ConfigError
from ptyacc.physics.deviance import saturated_sums
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.watch.tracker_images import object_images, patterns_image, positions_image, probe_image, scanned_region


# What the trackers read of the run, as they read it: the run (``reconstruction/``) is the layer
# above and hands its objects in (its ``ParameterGroup``, ``History`` and ``Saver``).
class Group(Protocol):
    """A refined quantity's parameter group: its name, optimizer and start."""

    name: str
    optimizer: torch.optim.Optimizer

    def active(self, iteration: int) -> bool: ...


class Record(Protocol):
    """The iterations done so far: their loss, seconds, traffic and validation error."""

    iterations: int
    done: int
    loss: list[float]
    seconds: list[float]
    traffic: list[Any] | None
    validation: list[float] | None


class Saved(Protocol):
    """The run's saver: the model, the data and their geometry, the patterns' store, the left-out
    positions, the final deviance (once computed) and the mean patterns."""

    accelerator: Any
    model: torch.nn.Module
    data: PtychoData
    geometry: ObjectGeometry
    store: PatternStore
    left_out: np.ndarray
    deviance: float | None

    def mean_patterns(self) -> tuple[np.ndarray, np.ndarray]: ...


# the modules a tracker needs besides its own (named as the tracker); each tracker has a ptyacc
# extra of its name that installs them: pip install 'ptyacc[mlflow]'
MORE_MODULES = {"mlflow": ("sqlalchemy", "alembic")}  # MLflow's local database (dir/mlflow.db)
# trackers whose Accelerate wrapper has ``log_images``; MLflow takes images through mlflow.log_image
WITH_LOG_IMAGES = ("tensorboard", "wandb", "aim", "clearml", "swanlab")
LOG_IMAGES_OPTIONS = {"tensorboard": {"dataformats": "NHWC"}}


def require_packages(names: list[str]) -> None:
    """Stop with the extra to install when a configured tracker's package is missing
    (Accelerate would only drop the tracker with a debug message)."""
    missing = [name for name in names
               if any(importlib.util.find_spec(module) is None for module in (name, *MORE_MODULES.get(name, ())))]
    if missing:
        extras = ",".join(missing)
        raise ConfigError(f"output.trackers: {', '.join(missing)} configured but not installed; install with "
                          f"pip install 'ptyacc[{extras}]', or remove {'it' if len(missing) == 1 else 'them'} "
                          "from output.trackers")


def flat_config(config: Config) -> dict[str, bool | int | float | str]:
    """The resolved config as one level of ``section.key`` hyperparameters: numbers, booleans and
    strings as they are, lists and null as their YAML text (every tracker takes those)."""
    import yaml

    flat: dict[str, bool | int | float | str] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        elif isinstance(value, (bool, int, float, str)):
            flat[prefix] = value
        else:
            flat[prefix] = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()

    walk("", config.to_dict())
    return flat


def _tracker_options(names: list[str], out_dir: str) -> dict[str, dict]:
    """Accelerate's ``init_kwargs``: where the trackers that keep local files keep them."""
    import os

    options = {}
    if "mlflow" in names:
        options["mlflow"] = _mlflow_options(out_dir)
    if "wandb" in names and "WANDB_DIR" not in os.environ:  # W&B's files (offline runs) beside the results
        options["wandb"] = {"dir": out_dir}
    return options


def _mlflow_options(out_dir: str) -> dict:
    """MLflow's settings for Accelerate's MLflowTracker: without MLFLOW_TRACKING_URI, the run is
    recorded in the run's folder like TensorBoard's files, in MLflow's own local database
    (``dir/mlflow.db``) with the artifacts (images) in ``dir/mlartifacts``; a tracking server
    that the environment names is used as it is."""
    import os
    from pathlib import Path

    if "MLFLOW_TRACKING_URI" in os.environ:
        return {}
    import mlflow

    folder = Path(out_dir).resolve()
    mlflow.set_tracking_uri(f"sqlite:///{folder / 'mlflow.db'}")
    return {"logging_dir": (folder / "mlartifacts").as_uri()}


class Trackers:
    """The trackers of one run, as an iteration hook and a context manager that closes them.

    Scalars per logged iteration (``step`` = iterations done, as in run.log): ``loss``,
    ``validation_error`` (with validation positions), ``lr/<group>`` (the rate the group stepped
    with, 0 before its start), ``seconds_per_iteration``, several processes: ``exchange/<kind>_bytes``
    and ``exchange/waiting_fraction``; ``positions/rms_correction_px`` (refined positions),
    ``probe/mode_<m>_power_fraction``, Poisson runs: ``poisson_deviance``, the deviance per counted
    pixel of the iteration's loss (the model moves during the iteration; the final model's
    exact deviance is ``poisson_deviance_final``, logged when the run closes)."""

    def __init__(self, config: Config, accelerator, saver: Saved, groups: list[Group]) -> None:
        self.config, self.accelerator, self.saver, self.groups = config, accelerator, saver, groups
        output = config.output
        self.main = accelerator.is_main_process
        self.deviance_terms = _saturated_sums(saver) if config.optim.loss == "poisson" else None
        if not accelerator.log_with:  # an accelerator made by the caller, without trackers
            from accelerate.tracking import filter_trackers

            accelerator.project_configuration.set_directories(output.dir)
            accelerator.log_with = filter_trackers(output.trackers, output.dir)
        self.open, self.step = True, 0
        self.initial_px = saver.geometry.positions_px  # (N, 2) px, where the positions started
        options = _tracker_options(output.trackers, output.dir) if self.main else {}
        try:
            accelerator.init_trackers(output.project, config=flat_config(config), init_kwargs=options)
        except BaseException:  # one that failed to start (a W&B login, say): close those that did
            self.close()
            raise

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close every tracker (what ``Accelerator.end_training`` does for them), leaving the
        process group to its owner: a caller of ``ptyacc.reconstruct`` may go on using it."""
        if not self.open:
            return
        self.open = False
        if self.saver.deviance is not None and self.main:  # computed after the last iteration's hooks
            self.accelerator.log({"poisson_deviance_final": self.saver.deviance}, step=self.step)
        for tracker in self.accelerator.trackers:
            tracker.finish()
        self.accelerator.trackers.clear()

    def __call__(self, history: Record) -> None:
        if not self.main:
            return
        output, done = self.config.output, history.done
        self.step = done
        last = done == history.iterations
        if done % output.log_every == 0 or last:
            self.accelerator.log(self.scalars(history), step=done)
        if (output.image_every and done % output.image_every == 0) or last:
            self.log_images(self.images(), done)

    # ------------------------------------------------------------------ what is logged
    def scalars(self, history: Record) -> dict[str, float]:
        """The logged numbers of the newest iteration (see the class docstring)."""
        iteration, model = history.done - 1, self.saver.model
        values = {"loss": history.loss[-1], "seconds_per_iteration": history.seconds[-1]}
        # optim.validation_fraction (another change) adds History.validation
        validation = history.validation
        if validation:
            values["validation_error"] = validation[-1]
        for group in self.groups:
            values[f"lr/{group.name}"] = group.optimizer.param_groups[0]["lr"] if group.active(iteration) else 0.0
        if history.traffic:
            traffic = history.traffic[-1]
            for kind, count in traffic.bytes.items():
                values[f"exchange/{kind}_bytes"] = count
            values["exchange/waiting_fraction"] = traffic.wait_s / max(history.seconds[-1], 1e-12)
        with torch.no_grad():
            if model.refine_positions:
                # less the common move of model.recenter (an object shift, as results.h5's positions_A)
                moved = model.positions() - model.scan_shift_px
                shift = moved.double().cpu().numpy() - self.initial_px
                values["positions/rms_correction_px"] = float(np.sqrt((shift ** 2).sum(axis=1).mean()))
            power = model.complex_probe().abs().square().sum(dim=(-2, -1)).double().cpu().numpy()
        for m, fraction in enumerate(power / power.sum()):
            values[f"probe/mode_{m}_power_fraction"] = float(fraction)
        if self.deviance_terms is not None:
            saturated, counted = self.deviance_terms
            fitted = self.saver.data.n_patterns - len(self.saver.left_out)
            values["poisson_deviance"] = (history.loss[-1] * fitted - saturated) / (0.5 * counted)
        return values

    def images(self) -> dict[str, np.ndarray]:
        """The pictures of the model now (uint8 RGB (H, W, 3)): object phase and amplitude,
        probe modes with the colour wheel, positions, measured against predicted mean pattern."""
        model = self.saver.model
        with torch.no_grad():
            obj = model.complex_object().cpu().numpy()
            probe = model.complex_probe().cpu().numpy()
            now_px = model.positions().double().cpu().numpy()
        # the object this process holds: the whole, or its tile from object_origin (runtime.shard_object)
        region = scanned_region(now_px - model.object_origin.cpu().numpy(), obj.shape[-2:])
        images = object_images(obj, region)
        images["probe/modes"] = probe_image(probe)
        images["positions"] = positions_image(self.initial_px, now_px)
        measured, predicted = self.saver.mean_patterns()
        images["mean_pattern/measured_vs_predicted"] = patterns_image(measured, predicted)
        return images

    def log_images(self, images: dict[str, np.ndarray], step: int) -> None:
        """``images`` through each tracker's own image call: ``log_images`` where Accelerate's
        wrapper has it, ``mlflow.log_image`` for MLflow; trackers with neither get scalars only."""
        for tracker in self.accelerator.trackers:
            if tracker.name in WITH_LOG_IMAGES:
                batches = {name: image[None] for name, image in images.items()}  # (1, H, W, 3)
                tracker.log_images(batches, step=step, **LOG_IMAGES_OPTIONS.get(tracker.name, {}))
            elif tracker.name == "mlflow":
                import mlflow

                for name, image in images.items():
                    mlflow.log_image(image, key=name.replace("/", "_"), step=step)


def _saturated_sums(saver: Saved) -> tuple[float, float]:
    """(sum over the detector mask of the Poisson loss of the measured patterns predicting
    themselves, number of pixel values >= 1) over the fitted positions: a Poisson loss summed over
    them minus the first, over half the second, is the deviance per counted pixel
    (``physics.deviance.deviance_sums``). Read through the store, whatever ``data.hold`` chose;
    every process takes part when each holds only its share of the patterns."""
    store, mask = saver.store, saver.model.detector_mask
    fitted = torch.as_tensor(np.setdiff1d(store.held, saver.left_out), dtype=torch.long, device=store.device)
    sums = torch.zeros(2, dtype=torch.float64, device=store.device)
    for start in range(0, len(fitted), 256):
        sums += saturated_sums(store.measured(fitted[start:start + 256]), mask)
    if len(store.held) < saver.data.n_patterns:
        sums = saver.accelerator.reduce(sums, reduction="sum")
    return float(sums[0]), float(sums[1])
