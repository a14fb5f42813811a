"""What a run writes: results.h5 with its figures, and checkpoints. Main process only; the
other processes take part in nothing here but computing the same Results record."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import yaml

from ptyacc.config import Config
from ptyacc.data import PtychoData
from ptyacc.data.store import PatternStore
from ptyacc.data.stream import centred_means
from ptyacc.errors import ConfigError, OutputError
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.quantities.model import PtychoModel
from ptyacc.quantities.registry import ROOT
from ptyacc.reconstruction.checkpoint import checkpoint_folder, save_checkpoint
from ptyacc.reconstruction.exchange import KINDS, Traffic
from ptyacc.reconstruction.tiles import ObjectTiles
from ptyacc.results.figures import save_figures
from ptyacc.results.h5file import Results, save_results, versions

if TYPE_CHECKING:
    from ptyacc.reconstruction.history import History


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


def run_texts(config: Config) -> dict[str, str]:
    """The attributes of results.h5 that describe the run, as text (YAML), made once when it
    starts: the config as given and the versions of ptyacc and its libraries. (The run's build adds
    ``auto_values``, every key it resolved: ``autos.ResolvedAutos.values_text``.)"""
    import yaml

    return {"config": config.to_yaml(), "versions": yaml.safe_dump(versions())}


def collect_results(config: Config, model: PtychoModel, data: PtychoData, geometry: ObjectGeometry,
                    history: list[float], world_size: int, tiles: ObjectTiles | None = None,
                    texts: dict[str, str] | None = None) -> Results:
    """The model's state as a Results record (CPU, NumPy): what each of ``model.quantities`` saves, in
    its ``results_group`` (``ROOT``, the top level: the object's ``object`` and the probe's ``probe``;
    ``fitted``: the detector background in counts and the intensity weights, and the refined scan affine
    M (2, 2); ``probe_variation``, ``scans``...; a quantity that saves nothing adds no group), and the
    positions. With the object split over the processes (``tiles``; every process must call this then)
    the main process's record holds the whole object, the others' the region they hold (with its own
    origin_A). ``texts``: the run's ``run_texts``, made here when not given."""
    hooked = model.quantities_with()  # the model's calls first, then the quantities': one visit each
    # positions moved against the object (``model.recenter.probe``) move the object in the data's frame
    shift_px = model.scan_shift_px.double().cpu().numpy()
    groups: dict[str, dict[str, np.ndarray]] = {}
    with torch.no_grad():
        positions_px = model.positions().double().cpu().numpy() - shift_px
        for quantity in hooked["saved"]:
            if saved := quantity.saved(model):
                groups.setdefault(quantity.results_group or quantity.name, {}).update(saved)
        top = groups.pop(ROOT)  # the object's and the probe's, with what other quantities add at the top level
        origin_A = tuple(float(v) for v in geometry.to_A(-shift_px)) if shift_px.any() else geometry.origin_A
        whole = tiles.whole_object(model) if tiles is not None else None
        if whole is not None:
            top["object"] = torch.view_as_complex(whole).numpy()
        elif tiles is not None:
            corner_px = model.object_origin.cpu().numpy().astype(float) - shift_px
            origin_A = tuple(float(v) for v in geometry.to_A(corner_px))
    positions_A = geometry.to_A(positions_px)
    attrs = {**(run_texts(config) if texts is None else texts), "world_size": world_size,
             "iterations_done": len(history), "wavelength_A": data.wavelength_A, "loss_name": config.optim.loss,
             "source": data.source}
    results = Results(**top, positions_A=positions_A, loss=np.asarray(history),
                      dx_A=geometry.dx_A, origin_A=origin_A, attrs=attrs, calibration=dict(data.calibration),
                      initial_positions_A=np.asarray(data.positions_A, dtype=np.float64),
                      detector=dict(data.detector) or None, quantities=groups or None)
    if model.propagation is not None:
        results.tilt_mrad = model.propagation.tilts().detach().double().cpu().numpy()
        attrs["slice_thickness_A"] = float(model.propagation.slice_thickness_A.detach())
    for quantity in hooked["attributes"]:  # the detector blur's sigma, ...
        attrs.update(quantity.attributes(model))
    return results


def traffic_arrays(traffic: list[Traffic]) -> dict[str, np.ndarray]:
    """The exchange's per-iteration counts as the results.h5 datasets ``comm_*``."""
    arrays = {"comm_bytes": np.array([t.total_bytes for t in traffic], dtype=np.int64),
              "comm_time_s": np.array([t.wait_s for t in traffic], dtype=np.float64),
              "comm_calls": np.array([t.calls for t in traffic], dtype=np.int64)}
    for kind in KINDS:
        arrays[f"comm_bytes_{kind}"] = np.array([t.bytes[kind] for t in traffic], dtype=np.int64)
    return arrays


class Saver:
    """Writes results, figures and checkpoints from the main process (a no-op elsewhere)."""

    def __init__(self, accelerator, config: Config, model: PtychoModel, data: PtychoData, geometry: ObjectGeometry,
                 store: PatternStore, out_dir: Path, write: bool, tiles: ObjectTiles | None = None,
                 tell: Callable[[str], None] = print, left_out: np.ndarray | None = None,
                 texts: dict[str, str] | None = None) -> None:
        self.accelerator, self.config, self.model, self.tiles = accelerator, config, model, tiles
        self.texts = run_texts(config) if texts is None else texts  # for results.h5 and the checkpoints
        # the positions left out of the fit (optim.validation_fraction): the loss is per fitted pattern
        self.left_out = np.empty(0, dtype=np.int64) if left_out is None else left_out
        self.data, self.geometry, self.store = data, geometry, store
        self.out_dir, self.write = out_dir, write
        self.writes = write and accelerator.is_main_process
        self.tell = tell  # a message for the user, on the terminal and in run.log
        self.deviance: float | None = None
        self.deviance_scale: dict[str, float] = {}  # poisson_data_nll_per_pattern, counted_pixel_values_per_pattern
        self.attrs: dict[str, float | int | str] = {}  # what the run adds to results.h5's attributes as it goes
        self.late_warnings: list[str] = []  # what ``save``'s checks found

    def save(self, history: History, figures: bool | None = None,
             checks: Callable[[Results], list[str]] | None = None) -> Results:
        """results.h5 and the figures (main process); ``checks``: warnings read from the results themselves (the
        main process's, where the object is whole), added to results.h5's and kept in ``late_warnings``."""
        results = collect_results(self.config, self.model, self.data, self.geometry, history.loss,
                                  self.accelerator.num_processes, self.tiles, self.texts)
        self.late_warnings = checks(results) if checks is not None and self.accelerator.is_main_process else []
        if self.late_warnings:
            warnings = (yaml.safe_load(self.texts.get("warnings") or "[]") or []) + self.late_warnings
            self.texts["warnings"] = results.attrs["warnings"] = yaml.safe_dump(warnings)
        near_field = self.data.near_field_distance_A is not None
        mean_patterns = centred_means(self.store, self.model, near_field) if self.writes else (None, None)
        results.iteration_time_s = np.asarray(history.seconds)
        for name, values in (traffic_arrays(history.traffic) if history.traffic is not None else {}).items():
            setattr(results, name, values)
        results.attrs.update(self.attrs)
        if self.deviance is not None:
            results.attrs["poisson_deviance"] = self.deviance
            results.attrs.update(self.deviance_scale)
        if history.validation is not None:
            results.validation_error = np.asarray(history.validation)
        results.mean_pattern_measured, results.mean_pattern_predicted = mean_patterns
        if self.writes:
            save_results(self.out_dir / "results.h5", results)
            if self.config.output.figures if figures is None else figures:
                try:
                    save_figures(self.out_dir, results, initial_positions_A=self.data.positions_A)
                except OutputError as exc:  # figures are a convenience: the results are safe
                    self.tell(f"warning: not all figures written (results.h5 is saved): {exc}")
        return results

    def mean_patterns(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean of up to 128 held patterns and of the model's prediction for them (centred)."""
        return centred_means(self.store, self.model, self.data.near_field_distance_A is not None)

    def checkpoint(self, groups: list, history: list[float], times: list[float]) -> None:
        """A checkpoint of the whole state, the optimizers of ``groups`` (``ParameterGroup``) under their
        names; with the object split (``tiles``) every process takes part in assembling it, in the
        format of a replicated run's."""
        optimizers = [group.optimizer for group in groups]
        if self.tiles is not None:
            whole = self.tiles.full_state(self.model, optimizers)
            model_state, optimizer_states = whole if whole is not None else (None, None)
        elif self.writes:
            model_state, optimizer_states = self.model.state_dict(), [o.state_dict() for o in optimizers]
        if not self.writes:
            return
        state = {"iterations_done": len(history), "model": model_state,
                 "optimizers": optimizer_states, "optimizer_names": [group.name for group in groups],
                 "loss": list(history),
                 "iteration_time_s": list(times), "world_size": self.accelerator.num_processes,
                 "depth_blur_eased_after": self.model.depth_blur.eased_after,
                 "config": self.texts["config"]}
        save_checkpoint(self.out_dir, state, self.config.output.keep_checkpoints)
