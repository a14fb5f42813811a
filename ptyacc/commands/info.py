"""`ptyacc info`: what this machine offers, and what a config will do with its data."""

from __future__ import annotations

import dataclasses
import os
import platform
from pathlib import Path

import numpy as np


def environment_report() -> list[str]:
    """Versions, devices (MIG slices marked), the backend `auto` would pick, accelerate config."""
    import torch

    from ptyacc.reconstruction.distributed import choose_backend, resolve_device
    from ptyacc.results.h5file import versions

    lines = ["versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()),
             f"platform: {platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores, "
             f"torch threads {torch.get_num_threads()}"]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            name = torch.cuda.get_device_name(i)
            memory = torch.cuda.get_device_properties(i).total_memory / 2**30
            lines.append(f"cuda:{i}: {name}, {memory:.0f} GiB" + (" (MIG slice: one process only)" if "MIG" in name else ""))
    else:
        lines.append("cuda: no GPU visible to torch")
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    lines.append(f"mps: {'available' if mps else 'not available'}")
    device = resolve_device("auto")
    lines.append(f"runtime.device auto -> {device}; runtime.backend auto -> {choose_backend('auto', device)} "
                 "(for several processes)")
    lines.append(f"accelerate config: {_accelerate_config() or 'none found (run `accelerate config`)'}")
    return lines


def _accelerate_config() -> str | None:
    try:
        from accelerate.commands.config import default_config_file
    except ImportError:
        return None
    path = Path(default_config_file)
    return str(path) if path.is_file() else None


def file_radiation(path: Path) -> list[str]:
    """``--set`` overrides for a data file read without a config: ``experiment.radiation=xray``
    when the file says it holds X-ray data (a CXI file, or a 'radiation' attribute)."""
    from ptyacc.data.readers import inspect_patterns
    from ptyacc.errors import PtyaccError

    try:
        info = inspect_patterns(path)
    except PtyaccError:
        return []  # reading it again in data_report gives the error where it belongs
    return ["experiment.radiation=xray"] if info.format == "cxi" or info.attrs.get("radiation") == "xray" else []


def _length(*values_A: float, xray: bool) -> str:
    """Lengths for people, "a x b unit": µm for X-rays (Å would be 1e4 of them), Å for electrons."""
    unit, per_A = ("µm", 1e-4) if xray else ("A", 1.0)
    return " x ".join(f"{v * per_A:.4g}" for v in values_A) + f" {unit}"


def data_report(config, sample: int = 64, save: Path | None = None) -> list[str]:
    """Derived sampling and geometry for the config's data, with warnings where they do not fit.
    Reads all positions but only ``sample`` evenly spread patterns (for the mean counts); with
    ``save``, what the calibration measured is written there too (``save_measured``)."""
    from ptyacc.data import load_data
    from ptyacc.data.bright_field import sample_rows
    from ptyacc.data.hold import hold_report
    from ptyacc.physics.geometry import ObjectGeometry
    from ptyacc.reconstruction.distributed import resolve_device

    sampled = dataclasses.replace(config, data=dataclasses.replace(config.data, hold="device"))  # the sample in memory
    data = load_data(sampled, lambda positions: sample_rows(len(positions), sample))
    k, dx = data.detector_px, data.dx_A
    window_A = k * dx
    geometry = ObjectGeometry.around(data.positions_A, dx, k, config.model.object_padding_px)
    stored = data.stored_pattern_shape
    prepared = "" if stored is None or stored == (k, k) else f" (stored {stored[0]} x {stored[1]}, data.transform)"
    span_A = data.positions_A.max(axis=0) - data.positions_A.min(axis=0)
    xray = data.radiation == "xray"
    reciprocal = f"{data.dk_invA * 1e4:.6g} 1/µm" if xray else f"{data.dk_invA:.6g} 1/A"
    lines = [f"data: {data.source}: {data.n_patterns} patterns of {k} x {k} px{prepared}"
             + (f", scan {data.scan_shape[0]} x {data.scan_shape[1]}" if data.scan_shape else ""),
             f"wavelength {data.wavelength_A:.6g} A; dk {reciprocal}; dx {_length(dx, xray=xray)}; "
             f"probe window {k} x {k} px = {_length(window_A, xray=xray)}",
             f"object {geometry.shape[0]} x {geometry.shape[1]} px = "
             f"{_length(geometry.shape[0] * dx, geometry.shape[1] * dx, xray=xray)}",
             f"scan extent (y, x) {_length(*span_A, xray=xray)} = {span_A[0] / dx:.4g} x {span_A[1] / dx:.4g} px",
             f"mean counts per pattern {data.mean_intensity:.6g} (of {len(data.patterns)} patterns)",
             *(f"override: {text}" for text in data.overrides), *data.checks,
             *hold_report(config, data, resolve_device(config.runtime.device))]
    warnings = []
    if data.radiation == "electron" and data.semiangle_mrad:
        probe_lines, probe_warnings = _electron_probe_report(data)
        lines += probe_lines
        warnings += probe_warnings
    if data.n_patterns > 1 and (xray or data.semiangle_mrad):
        for line in _overlap_lines(config, data, geometry):
            (warnings if line.startswith("warning: ") else lines).append(line.removeprefix("warning: "))
    lines += [f"warning: {w}" for w in warnings]
    if save is not None:
        lines.append(save_measured(save, config, data, lines))
    return lines


ORIENTATION_KEYS = ("data.transform.transpose", "data.transform.flip_y", "data.transform.flip_x",
                    "data.transform.flip_about_zero")


def save_measured(path: Path, config, data, lines: list[str]) -> str:
    """Write what the calibration measured in the config's data to the HDF5 file ``path``: the group
    ``detector`` as results.h5 has it (bad pixels, the orientation's and the parallax's measurements,
    the descan, ...), ``calibration`` (each value and, beside it as ``<name>_source``, where it came
    from), and the attributes ``auto_values`` (YAML: {key: value} of the calibration autos as measured,
    the values to give the config to fix them), ``report`` (these lines) and ``config`` (YAML of the
    config measured with). Returns the line that says so."""
    import h5py
    import yaml

    from ptyacc.data.autocalibration import MEASURED_ONLY
    from ptyacc.results.h5file import versions, write_calibration_groups
    from ptyacc.results.outdir import atomic_write

    values = {key: value.item() if isinstance(value, np.generic) else value for key, value in data.autos.items()}
    with atomic_write(Path(path), 1 << 20, "free space and run again") as tmp, h5py.File(tmp, "w") as f:
        write_calibration_groups(f, data.detector, data.calibration)
        f.attrs["auto_values"] = yaml.safe_dump(values, sort_keys=True)
        f.attrs["report"] = "\n".join(lines)
        f.attrs["config"] = config.to_yaml()
        f.attrs["source"] = str(data.source)
        f.attrs["versions"] = yaml.safe_dump(versions(), sort_keys=True)
    given = {key: value for key, value in values.items() if key not in MEASURED_ONLY}
    if any(key in given for key in ORIENTATION_KEYS):
        given["data.transform.orientation"] = "manual"  # the flags given are used only so
    fixed = " ".join(_set_option(key, value) for key, value in given.items())
    return (f"measured: written to {path} ({len(data.detector)} detector arrays, {len(values)} auto values)"
            + (f"; to fix these autos at these values: {fixed}" if fixed else ""))


def _set_option(key: str, value) -> str:
    """``--set key=value`` with ``value`` in YAML's flow style (a list as ``[true, false]``), the word
    quoted where a shell would split or expand it."""
    import shlex

    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 20).removesuffix("...\n").strip()
    return f"--set {shlex.quote(f'{key}={text}')}"


def _overlap_lines(config, data, geometry) -> list[str]:
    """The aperture edge the run would decide (``data/aperture_edge.py``'s rule, a refusal as a warning) and
    ``footprint.Overlap``'s line for the probe the run would start from (both from info's sample of
    patterns), after the warnings of the probe's making."""
    from ptyacc.data.aperture_edge import aperture_edge
    from ptyacc.errors import ConfigError
    from ptyacc.physics import Detector, fresnel_propagator
    from ptyacc.physics.footprint import footprint_overlap
    from ptyacc.reconstruction.initial import initial_probe

    near = data.near_field_distance_A
    propagator = None if near is None else fresnel_propagator(data.detector_px, data.dx_A, data.wavelength_A, near)
    try:
        edge = aperture_edge(config, data, data.held_mean_pattern())
        edge_said = [] if edge is None else [edge.line()]
    except ConfigError as refused:
        edge, edge_said = None, [f"warning: {refused}"]
    said: list[str] = []
    probe = initial_probe(config, data, Detector(propagator=propagator), None, said,
                          None if edge is None else edge.aperture)
    return [*edge_said, *(line for line in said if line.startswith("warning: ")),
            footprint_overlap(probe, geometry.positions_px).line(near_field=near is not None)]


def _scattering_lines(data) -> list[str]:
    """The dark field's floor (a dark offset left in the counts, where flat), and how much of the sampled patterns'
    counts, that floor taken off, lies beyond the bright-field disk, and what a strong share means."""
    from ptyacc.optim.autos import STRONG_SCATTERING, read_dark_field

    floor, share = read_dark_field(data.patterns.mean(0), data)
    flat = floor is not None and floor.flat
    lines = [] if floor is None else [floor.line() + ("; model.background: auto fits it" if flat else "")]
    line = (f"scattering: {100 * share:.1f}% of the counts beyond the bright-field disk"
            + (" (the floor taken off)" if flat else ""))
    if share <= STRONG_SCATTERING:
        return [*lines, line]
    return [*lines, line + f" (over {100 * STRONG_SCATTERING:g}%: strong; a thick sample? give it model.slices and "
            "model.slice_thickness_A; on several slices the defaults then take a depth blur in two stages (three "
            "quarters of the slices, then one), a longer step with the amplitude loss, and a tilt the object's finer pixel "
            "(data.transform.upsample: auto); docs/how-to/tilt-thickness-distortion.md)"]


def _electron_probe_report(data) -> tuple[list[str], list[str]]:
    """Bright-field disk radius, the probe's size from its defocus and aperture, and how much of
    the probe built from them lies near the window's edge."""
    from ptyacc.data.sampling import aperture_invA
    from ptyacc.physics import stem_probe

    k, dx = data.detector_px, data.dx_A
    alpha = data.semiangle_mrad * 1e-3
    radius_px = aperture_invA(data.semiangle_mrad, data.wavelength_A) / data.dk_invA
    defocus_A = -data.aberrations.get("C10", 0.0)
    diameter_A = 2 * abs(defocus_A) * alpha + 1.22 * data.wavelength_A / alpha
    lines = [f"bright-field disk radius {radius_px:.2f} px (semi-angle {data.semiangle_mrad:g} mrad)",
             f"probe diameter {diameter_A:.4g} A = {diameter_A / dx:.3g} px "
             f"(2 |defocus| semi-angle + 1.22 wavelength / semi-angle, defocus {defocus_A:g} A)"]
    warnings = []
    if radius_px > k / 2:
        warnings.append(f"the bright-field disk (radius {radius_px:.1f} px) is larger than the {k} x {k} detector: "
                        "check dk_invA or semiangle_mrad, or crop less")
    probe = stem_probe(k, data.dk_invA, data.wavelength_A, data.semiangle_mrad, data.aberrations).numpy()
    c = np.arange(k) - k // 2
    outside = float((np.abs(probe) ** 2)[np.hypot(c[:, None], c[None, :]) > 0.45 * k].sum())
    lines.append(f"probe: {100 * outside:.1f}% of its intensity lies near the window edge (r > 0.45 K)")
    lines += _scattering_lines(data)
    if diameter_A > k * dx:
        warnings.append(f"the defocused probe ({diameter_A:.4g} A across) is wider than the {k} x {k} px window "
                        f"({k * dx:.4g} A): less defocus, a larger crop, or padding (data.transform.pad)")
    elif outside > 0.05:
        warnings.append("the probe does not fit in the window: more than 5% of it is near the edge "
                        "(less defocus, or a larger detector crop)")
    return lines, warnings


def parallax_figure_report(config, path: Path, sample: int = 64) -> tuple[list[str], dict[str, np.ndarray]]:
    """``ptyacc info --figure PATH``: the parallax of the config's data measured as
    ``experiment.defocus_A: auto`` measures it (whatever the config gives), drawn in ``path`` by
    ``results.figures.parallax_figure`` (the tilt-corrected bright-field image, each pixel group's
    measured and fitted shift, and the scan rotation where the config measures it); the lines to
    report and the arrays drawn (results.h5's ``/detector`` names; empty where nothing was drawn).
    Reads only ``sample`` evenly spread patterns besides the middle block the parallax needs."""
    from ptyacc.data import load_data
    from ptyacc.data.bright_field import sample_rows
    from ptyacc.errors import PtyaccError
    from ptyacc.results.figures import parallax_figure, save_figure

    head = f"figure {path}"
    if config.experiment.radiation != "electron" or config.data.simulate is not None:
        return [f"{head}: not drawn: the parallax is measured in electron data read from a file"], {}
    measured = dataclasses.replace(config, experiment=dataclasses.replace(config.experiment, defocus_A="auto"),
                                   data=dataclasses.replace(config.data, hold="device"))
    try:
        data = load_data(measured, lambda positions: sample_rows(len(positions), sample))
    except PtyaccError as exc:
        return [f"{head}: not drawn: {exc}"], {}
    said = next((line for line in data.checks if line.startswith("defocus from the bright-field parallax")), "")
    if "parallax_shifts_A" not in data.detector:
        return [f"{head}: not drawn: {said or 'no parallax measured'}"], {}
    drawn = {name: array for name, array in data.detector.items()
             if name.startswith("parallax_") or name in ("scan_rotation_deg", "orientation_flags")}
    save_figure(parallax_figure(drawn), path)
    defocus, error = drawn["parallax_defocus_A"][:2]
    return [f"{head}: the bright-field parallax, defocus {defocus:.1f} +- {error:.1f} A from "
            f"{len(drawn['parallax_k_invA'])} pixel groups (as experiment.defocus_A: auto measures it)"], drawn
