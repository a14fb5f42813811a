"""The initial state of a reconstruction: the model built from the data and the config (probe
from the optics or from the patterns, flat object, positions), or started from a previous run."""

from __future__ import annotations

import math

import numpy as np
import torch

from ptyacc.config import Config
from ptyacc.data import PtychoData
from ptyacc.data.aperture_edge import aperture_edge
from ptyacc.errors import ConfigError
from ptyacc.interop.foreign import read_start
from ptyacc.interop.resample import resample_object, resample_probe, resample_slices, sample_grid
from ptyacc.physics import Detector, fresnel_propagator, mixed_state_probe, stem_probe
from ptyacc.physics.footprint import footprint_overlap
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.quantities import BuildContext, attach_quantities
from ptyacc.quantities.model import PtychoModel
from ptyacc.quantities.object import ObjectTransmission
from ptyacc.quantities.probe import Probe
from ptyacc.quantities.slices import SlicePropagation
from ptyacc.reconstruction.xray_probe import check_modes, far_field_probe, probe_from_file
from ptyacc.results.h5file import Results


def previous_results(config: Config, data: PtychoData) -> Results:
    """The reconstruction that ``model.init_from`` names (ptyacc's results.h5, PtyRAD's HDF5,
    PtychoShelves' Niter*.mat, py4DSTEM's output: ``interop.foreign``), checked against this data."""
    path = config.resolve_input(config.model.init_from)
    previous = read_start(path)
    if previous.positions_A.shape != data.positions_A.shape:
        raise ConfigError(f"model.init_from: {path} holds {len(previous.positions_A)} positions, the data "
                          f"{len(data.positions_A)}")
    return previous


def start_from(model: PtychoModel, geometry: ObjectGeometry, previous: Results, name: str,
               said: list[str] | None = None) -> None:
    """Copy a previous run's probe and object into the new model, fitted to it (``interop.resample``):
    the object onto this run's pixels (its canvas may also have moved), slices and modes to this
    run's numbers (further modes keep the model's own start), the probe onto this run's window and
    pixel; another package's probe is scaled to this data's intensity. What was done is appended to
    ``said`` (run.log's lines)."""
    notes = said if said is not None else []
    source = previous.attrs.get("written_by", "ptyacc")
    probe = torch.view_as_complex(model.probe.detach()) * model.probe_scale  # (modes, K, K)
    old_probe = previous.probe[: probe.shape[0]]
    resized = old_probe.shape[-1] != probe.shape[-1] or abs(previous.dx_A / geometry.dx_A - 1) > 1e-6
    if resized:
        old_probe = resample_probe(old_probe, previous.dx_A, geometry.dx_A, probe.shape[-1])
    if source != "ptyacc":  # its own normalisation: this data's intensity, in the modes it fills
        total = float((probe[: old_probe.shape[0]].abs() ** 2).sum())
        old_probe = old_probe * np.sqrt(total / float((np.abs(old_probe) ** 2).sum()))
    notes.append(_probe_note(name, source, previous, old_probe.shape, tuple(probe.shape), resized))
    old = resample_slices(previous.object[: model.object.shape[0]], model.object.shape[1])
    origin = np.asarray(geometry.origin_A) + model.object_origin.cpu().numpy() * geometry.dx_A
    target = torch.view_as_complex(model.object.detach())
    start = (origin - np.asarray(previous.origin_A)) / previous.dx_A
    same_pixel = abs(previous.dx_A / geometry.dx_A - 1) <= 1e-6
    # on the same pixel the canvas moved by whole pixels (as refined positions moved its corner): a copy
    rows, cols = sample_grid(np.round(start) if same_pixel else start, 1.0 if same_pixel else geometry.dx_A / previous.dx_A,
                             tuple(target.shape[-2:]))
    values, inside = resample_object(old, rows, cols)
    notes.append(_object_note(previous, old.shape, tuple(target.shape), geometry.dx_A, float(inside.mean())))
    with torch.no_grad():
        device = model.probe.device
        model.probe[: old_probe.shape[0]] = torch.view_as_real(torch.from_numpy(old_probe).to(device) / model.probe_scale)
        mask, values = torch.from_numpy(inside).to(device), torch.from_numpy(values).to(device)
        target[: values.shape[0]] = torch.where(mask, values, target[: values.shape[0]])
    if model.propagation is not None:
        same_slices = previous.object.shape[1] == model.object.shape[1]
        model.propagation.start_from(previous.tilt_mrad, previous.attrs.get("slice_thickness_A") if same_slices else None)


def _probe_note(name: str, source: str, previous: Results, old: tuple, new: tuple, resized: bool) -> str:
    kept = f"{old[0]} of its {previous.probe.shape[0]} probe mode(s)" + (
        f", {new[0] - old[0]} further from this config's optics" if new[0] > old[0] else "")
    how = (f"resampled (bilinear, about the window centre) from {previous.probe.shape[-1]} px of "
           f"{previous.dx_A:.4g} A to {new[-1]} px" if resized else "as saved")
    return f"model.init_from: {name} ({source}): {kept}, {how}" + ("" if source == "ptyacc" else
                                                                      ", scaled to this data's intensity")


def _object_note(previous: Results, old: tuple, new: tuple, dx_A: float, covered: float) -> str:
    slices = previous.object.shape[1]
    parts = [f"object {previous.object.shape[0]} mode(s) x {slices} slice(s) of {previous.dx_A:.4g} A px"]
    if slices != new[1]:
        parts.append(f"slices {slices} -> {new[1]} (log transmission spread over depth, summed phase kept)")
    if abs(previous.dx_A / dx_A - 1) > 1e-6:
        parts.append(f"resampled to {dx_A:.4g} A px (bilinear on amplitude and unit phasor)")
    if previous.object.shape[0] != new[0]:
        parts.append(f"modes {previous.object.shape[0]} -> {new[0]} (first kept; further ones the model's own)")
    return "model.init_from: " + "; ".join(parts) + f"; it covers {100 * covered:.0f}% of this run's object"


def build_model(config: Config, data: PtychoData, geometry: ObjectGeometry,
                mean_intensity: float | None = None, region: tuple[int, int, int, int] | None = None,
                mean_pattern: torch.Tensor | None = None, said: list[str] | None = None,
                scans: list | None = None, aperture: torch.Tensor | None = None,
                amplitude_floor: float | None = None) -> PtychoModel:
    """The initial model: a probe from the experiment's optics, its ``aperture`` (K, K) the one
    ``autos.resolve_autos`` read from the data (``model.probe_aperture_edge``: measured) if given, the
    ramp's if not (other scans' probes read theirs from ``mean_pattern``, model layout, if given; an X-ray probe
    starts from it, the mean of every pattern, where given), scaled to the
    data's mean intensity (total counts per pattern; computed from the held patterns if None),
    split into modes (``quantities/probe.py``); a flat object (only its ``region`` (y0, y1, x0, x1) under
    ``runtime.shard_object``; ``quantities/object.py``); positions from the data; the refined quantities of their own modules
    (``attach_quantities``: a varying probe; with several ``scans``, the data their combination, the
    probes of scans 1..). ``amplitude_floor``: what the amplitude loss adds to the model intensity, or None: the
    bare ``chain.EPS``. What it chose is appended to ``said``, if given (run.log's lines)."""
    k = data.detector_px
    if geometry.shape[0] < k or geometry.shape[1] < k:
        raise ConfigError(f"data: the object ({geometry.shape[0]} x {geometry.shape[1]} px) is smaller than the "
                          f"probe window ({k} x {k} px)")
    mean_intensity = data.mean_intensity if mean_intensity is None else mean_intensity
    propagation = slice_propagation(config, data, len(geometry.positions_px))
    movable = config.model.recenter.probe or holds_probe(config, near_field=data.near_field_distance_A is not None)
    if config.model.recenter.probe and data.near_field_distance_A is not None:
        raise ConfigError("model.recenter.probe: moving the probe and the positions together leaves far-field "
                          "patterns unchanged, not near-field images; set it false for near-field data")
    near = (fresnel_propagator(k, data.dx_A, data.wavelength_A, data.near_field_distance_A)
            if data.near_field_distance_A is not None else None)
    detector = Detector(propagator=near, mask=data.mask.float() if data.mask is not None else None)
    said = said if said is not None else []
    # X-rays start from the mean of every pattern (``mean_pattern``: ``store.held_mean_over_processes``'s)
    probe = probe_modes(config, data, detector, mean_pattern if data.radiation == "xray" else None, mean_intensity,
                        said, aperture)
    said.append(footprint_overlap(probe, geometry.positions_px).line(near_field=near is not None))
    slices = config.model.slices
    propagator = (fresnel_propagator(k, data.dx_A, data.wavelength_A, config.model.slice_thickness_A)
                  if slices > 1 else None)
    model = PtychoModel(ObjectTransmission(geometry.shape, config.model.object_modes, slices, region,
                                           seed=config.runtime.seed), Probe(probe), geometry, propagator,
                        refine_positions=config.optim.start.positions is not None
                        or config.optim.start.scan_affine is not None,
                        detector=detector, propagation=propagation, movable_scan=movable)
    model.amplitude_floor = amplitude_floor
    # another scan's probe from its own optics, at its own counts
    make_probe = lambda c, d: probe_modes(c, d, detector, None if d.radiation == "xray" else mean_pattern,  # noqa: E731
                                          d.mean_intensity, said)
    attach_quantities(config, model, BuildContext(data, geometry, scans, make_probe, said, mean_intensity))
    return model


def probe_modes(config: Config, data: PtychoData, detector: Detector, mean_pattern: torch.Tensor | None,
                mean_intensity: float, said: list[str], aperture: torch.Tensor | None = None) -> torch.Tensor:
    """The initial probe modes (P, K, K) of ``initial_probe``, their power scaled to the data's
    ``mean_intensity`` and split into ``model.probe_modes`` modes."""
    probe = initial_probe(config, data, detector, mean_pattern, said, aperture)
    modes = config.model.probe_modes
    first_power = 1 - config.model.further_mode_power() * (modes - 1) if modes > 1 else 1.0
    probe = probe * math.sqrt(mean_intensity / float((probe.abs() ** 2).sum()))
    if probe.dim() == 2:
        try:
            probe = mixed_state_probe(probe, modes, first_power)
        except ValueError as exc:
            raise ConfigError(f"model.probe_modes: {exc}") from None
    return probe


def initial_probe(config: Config, data: PtychoData, detector: Detector, mean_pattern: torch.Tensor | None,
                  said: list[str], aperture: torch.Tensor | None = None) -> torch.Tensor:
    """The probe (K, K), or a probe file's modes (M, K, K), before its power is scaled to the data:
    ``model.probe_init``'s file; for electrons the optics' STEM probe, its ``aperture`` (K, K) given
    or its aperture edge read from ``mean_pattern`` where given; near-field X-rays the mean image
    (``mean_pattern``, else the held patterns' mean) brought back to the sample; far-field X-rays
    ``xray_probe.far_field_probe`` of the same mean. What it chose is appended to ``said``."""
    k = data.detector_px
    if config.model.probe_init is not None:
        probe, line = probe_from_file(config, data)
        check_modes(probe, config.model.probe_modes)
        said.append(line)
        probe = probe[0] if len(probe) == 1 else probe
    elif data.radiation == "electron":
        if data.semiangle_mrad is None:
            raise ConfigError("experiment.semiangle_mrad: needed to build the initial probe, and the data file "
                              "has no 'semiangle_mrad' attribute")
        edge = aperture_edge(config, data, mean_pattern)  # another scan's optics
        probe = stem_probe(k, data.dk_invA, data.wavelength_A, data.semiangle_mrad, data.aberrations,
                           aperture_values=aperture if edge is None else edge.aperture)
    else:  # X-rays: the mean of every pattern (``store.held_mean_over_processes``: the same on every process)
        mean = data.held_mean_pattern() if mean_pattern is None else mean_pattern
        probe = (probe_from_patterns(mean, detector) if detector.propagator is not None else
                 far_field_probe(config, data, mean, said))
    return probe


def holds_probe(config: Config, near_field: bool) -> bool:
    """Whether ``model.recenter.hold_probe`` acts (``model.ProbeCentring``), which makes the
    model's scan movable: far-field data only (moving the probe and the positions together
    changes near-field images), and not when ``model.recenter.probe`` centres it."""
    recenter = config.model.recenter
    return recenter.hold_probe and not recenter.probe and not near_field


def slice_propagation(config: Config, data: PtychoData, n_positions: int) -> SlicePropagation | None:
    """The tilt and slice thickness of a multislice model, when tilted or refined (else None: the
    model keeps its constant Fresnel propagator)."""
    model, start = config.model, config.optim.start
    tilted = any(config.experiment.tilt_mrad) or model.tilt == "per_position"
    if model.slices == 1 or not (tilted or start.tilt is not None or start.slice_thickness is not None):
        return None
    return SlicePropagation(data.detector_px, data.dx_A, data.wavelength_A, model.slice_thickness_A,
                            tuple(config.experiment.tilt_mrad), n_positions, model.tilt == "per_position",
                            refine_tilt=start.tilt is not None, refine_thickness=start.slice_thickness is not None)


def probe_from_patterns(mean_pattern: torch.Tensor, detector: Detector) -> torch.Tensor:
    """A first probe (K, K) of near-field X-ray data: the wave whose detector intensity is the
    mean pattern (model layout), with a flat phase at the detector, brought back to the sample plane."""
    amplitude = torch.sqrt(mean_pattern.clamp(min=0).to(torch.float64)).to(torch.complex64)
    return detector.adjoint(amplitude[None])[0]
