"""The calibration of a dataset, resolved once: the experiment settings (``config.experiment``,
``data.scan_shape``) merged with what the data source says about itself, by one pure function
(no I/O) that ``load_data``, ``simulate_dataset`` and so ``ptyacc info`` share.

A value in the config wins; a value it leaves out comes from the file (its attributes, or what
the reader found, in ptyacc's names: ``PatternsInfo.attrs``), else from ``defaults`` (a
simulation's), else it is needed. Where the config and the file both give a value:

- a number that differs is an override, one line in ``Calibration.overrides`` for run.log and
  the terminal, unless the two lie more than LARGE_FACTOR apart (a unit slip: eV for keV, nm
  for Å, mm for m), which is a ConfigError naming both. Defocus, whose sign and zero are both
  meaningful, and a fitted dk (``experiment.dk_from_bright_field``) are overrides at any size.
- a shape or count that differs (``data.scan_shape`` against the scan axes of 4D patterns or
  the number of patterns, positions against patterns) or the radiation is a ConfigError or
  DataError naming both; ``data.scan_shape`` against a file's ``scan_shape`` attribute (which
  can be wrong: EMPAD names, a convert with the wrong --scan-shape) is an override.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ptyacc.config import ExperimentConfig
from ptyacc.data.formats.common import scan_shape_attribute
from ptyacc.data.positions import raster_positions_A, turned_positions_A
from ptyacc.data.sampling import object_sampling
from ptyacc.errors import ConfigError, DataError
from ptyacc.physics import wavelength_A

NO_DEFAULTS: Mapping[str, float] = {}
LARGE_FACTOR = 8.0  # a correction stays below; a unit slip (10, 1000, ...) lies above
SAME = 1e-6  # relative difference below which two values are the same


@dataclass(frozen=True)
class SourceFacts:
    """What a data source says about itself, known before its patterns are read.

    name:            the file (or ``data.simulate``), for messages
    shape:           the patterns' shape as stored: (N, ky, kx) or (slow, fast, ky, kx)
    attrs:           its calibration in ptyacc's names (``PatternsInfo.attrs``)
    positions_A:     its own probe positions (N, 2) in Å (ptyacc's ``positions_A``, CXI translations)
    named_positions: the array that ``experiment.positions`` names, as read, and where it was read
                     ("file:key"); None for raster positions
    """

    name: str
    shape: tuple[int, ...]
    attrs: Mapping[str, object]
    positions_A: np.ndarray | None = None
    named_positions: tuple[str, np.ndarray] | None = None

    @property
    def n_patterns(self) -> int:
        return math.prod(self.shape[:-2])

    @property
    def scan_shape(self) -> tuple[int, int] | None:
        """(slow, fast) of 4D patterns, else of the 'scan_shape' attribute when it is one."""
        if len(self.shape) == 4:
            return int(self.shape[0]), int(self.shape[1])
        return scan_shape_attribute(self.attrs["scan_shape"]) if "scan_shape" in self.attrs else None


@dataclass(frozen=True)
class Calibration:
    """Everything about a dataset but its patterns.

    stored_dx_A:  object pixel (Å) of the patterns as stored, ``SourceFacts.shape[-1]`` wide (apply
                  ``data.transform`` with ``Preparation.object_pixel_A``); None while the
                  bright-field fit of ``experiment.dk_from_bright_field`` awaits its radius
    positions_A:  (N, 2) float64 probe centres (y, x) in Å
    sources:      where each of FILE_NUMBERS that has a value came from: "config", "file",
                  "default" (a simulation's) or "fitted" (dk of ``experiment.dk_from_bright_field``)
    """

    radiation: str
    wavelength_A: float
    semiangle_mrad: float | None
    aberrations: dict[str, float]
    stored_dx_A: float | None
    near_field_distance_A: float | None
    scan_shape: tuple[int, int] | None
    positions_A: np.ndarray
    overrides: tuple[str, ...] = ()
    values: Mapping[str, float | None] = dataclasses.field(default_factory=dict)
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    disk_radius_px: float | None = None  # the bright-field disk's radius these values predict (``Sampling``)


def calibrate(experiment: ExperimentConfig, source: SourceFacts, scan_shape: list[int] | None = None,
              bright_field_radius_px: float | None = None, defaults: Mapping[str, float] = NO_DEFAULTS) -> Calibration:
    """The calibration of ``source`` under ``experiment`` and ``data.scan_shape`` (``scan_shape``).

    bright_field_radius_px: the bright-field disk's radius in stored pixels, measured
        (``experiment.dk_from_bright_field``) or assumed (a simulation); it sets dk when neither
        the config nor the file gives dk_invA or dx_A.
    defaults: values for the keys that neither the config nor the file gives (a simulation's).
    Raises ConfigError or DataError naming the key or file for what is missing or malformed."""
    _check_radiation(experiment, source)
    values, sources = _values(experiment, source, defaults)
    if experiment.dk_from_bright_field and values["semiangle_mrad"] is None:
        raise ConfigError("experiment.semiangle_mrad: needed by experiment.dk_from_bright_field, and the data file "
                          "has no 'semiangle_mrad' attribute")
    overrides = _compared(experiment, source, scan_shape)
    positions = probe_positions(source, scan_shape, values["scan_step_A"], experiment.scan_rotation_deg)
    scan = tuple(scan_shape) if scan_shape else source.scan_shape
    aberrations = dict(experiment.aberrations)
    if values["defocus_A"] is not None:
        aberrations["C10"] = -values["defocus_A"]
    wavelength = _wavelength(experiment, source, values)
    sources["wavelength_A"] = "derived" if values["energy_eV"] is not None else "file"
    values["scan_rotation_deg"], sources["scan_rotation_deg"] = experiment.scan_rotation_deg, "config"
    stored_dx, near_distance, disk = None, None, None
    if not experiment.dk_from_bright_field or bright_field_radius_px is not None:
        sampling = object_sampling(
            source.shape[-1], wavelength, dx_A=values["dx_A"], dk_invA=values["dk_invA"],
            disk_radius_px=bright_field_radius_px, semiangle_mrad=values["semiangle_mrad"],
            radiation=experiment.radiation, geometry=experiment.geometry,
            detector_distance_m=values["detector_distance_m"], detector_pixel_m=values["detector_pixel_m"],
            focus_to_sample_m=experiment.focus_to_sample_m)
        stored_dx, near_distance, disk = sampling.dx_A, sampling.near_field_distance_A, sampling.disk_radius_px
    if experiment.dk_from_bright_field and stored_dx is not None:
        overrides += _fitted_dk_override(source, stored_dx)
        values["dk_invA"], sources["dk_invA"] = 1.0 / (source.shape[-1] * stored_dx), "fitted"
    return Calibration(
        radiation=experiment.radiation,
        wavelength_A=wavelength,
        semiangle_mrad=values["semiangle_mrad"],
        aberrations=aberrations,
        stored_dx_A=stored_dx,
        near_field_distance_A=near_distance,
        scan_shape=scan,
        positions_A=positions,
        overrides=tuple(overrides),
        values=values,
        sources=sources,
        disk_radius_px=disk,
    )


FILE_NUMBERS = ("energy_eV", "semiangle_mrad", "defocus_A", "dk_invA", "dx_A", "scan_step_A", "detector_distance_m",
                "detector_pixel_m")


def _values(experiment: ExperimentConfig, source: SourceFacts,
            defaults: Mapping[str, float]) -> tuple[dict[str, float | None], dict[str, str]]:
    """Each of FILE_NUMBERS from the config, else the file, else ``defaults``, else None, and
    where each value came from ("config", "file", "default"; none for None). The
    file's dk_invA and dx_A are left out when the config samples otherwise (dk_invA, dx_A or
    the bright-field fit), its defocus when the config gives aberrations.C10; of the file's
    dk_invA and dx_A, dk (the measured one) is taken."""
    config_samples = experiment.dk_invA is not None or experiment.dx_A is not None or experiment.dk_from_bright_field
    values: dict[str, float | None] = {}
    sources: dict[str, str] = {}
    for name in FILE_NUMBERS:
        given, where = getattr(experiment, name), "config"
        if given is None and name == "defocus_A" and "C10" in experiment.aberrations:
            given = -experiment.aberrations["C10"]
        elif given is None and name in ("dk_invA", "dx_A") and config_samples:
            values[name] = None
            continue
        if given is None and name in source.attrs:
            given, where = _file_number(source, name), "file"
        if given is None and name in defaults:
            given, where = defaults[name], "default"
        values[name] = given
        if given is not None:
            sources[name] = where
    if not config_samples and values["dk_invA"] is not None:
        values["dx_A"] = None
        sources.pop("dx_A", None)
    return values, sources


def _check_radiation(experiment: ExperimentConfig, source: SourceFacts) -> None:
    found = source.attrs.get("radiation")
    if found in ("electron", "xray") and found != experiment.radiation:
        raise ConfigError(f"experiment.radiation: {experiment.radiation}, but {source.name} holds {found} data "
                          f"(attribute radiation); set experiment.radiation: {found}")


def _compared(experiment: ExperimentConfig, source: SourceFacts, scan_shape: list[int] | None) -> list[str]:
    """Where the config and the file both give a value: the overrides, one line each; raises for
    a contradiction (see the module docstring). A fitted dk is compared once fitted
    (``_fitted_dk_override``)."""
    overrides = _scan_shape_overrides(scan_shape, source)
    found = {name: _file_value(source, name) for name in (*FILE_NUMBERS, "wavelength_A")}
    for name in ("semiangle_mrad", "scan_step_A", "detector_distance_m", "detector_pixel_m"):
        overrides += _override(f"experiment.{name}", getattr(experiment, name), found[name], name, source)
    if experiment.energy_eV is not None and found["energy_eV"] is not None:
        overrides += _override("experiment.energy_eV", experiment.energy_eV, found["energy_eV"], "energy_eV", source)
    elif experiment.energy_eV is not None and found["wavelength_A"] is not None:
        overrides += _override("experiment.energy_eV (wavelength_A)",
                               wavelength_A(experiment.energy_eV, experiment.radiation), found["wavelength_A"],
                               "wavelength_A", source)
    defocus_key = "experiment.aberrations.C10" if "C10" in experiment.aberrations else "experiment.defocus_A"
    defocus = -experiment.aberrations["C10"] if "C10" in experiment.aberrations else experiment.defocus_A
    overrides += _override(defocus_key, defocus, found["defocus_A"], "defocus_A", source, any_size=True)
    overrides += _sampling_override(experiment, source, found)
    if experiment.scan_step_A is not None and source.positions_A is not None and source.named_positions is None:
        overrides.append(f"experiment.scan_step_A {experiment.scan_step_A:g}: a raster replaces the probe positions "
                         f"of {source.name}")
    return overrides


def _fitted_dk_override(source: SourceFacts, stored_dx_A: float) -> list[str]:
    """The dk that ``experiment.dk_from_bright_field`` fitted (the sampling ``stored_dx_A``) against the file's."""
    fitted_dk = 1.0 / (source.shape[-1] * stored_dx_A)
    return _override("experiment.dk_from_bright_field: the fitted dk_invA", fitted_dk, _file_value(source, "dk_invA"),
                     "dk_invA", source, any_size=True)


def _sampling_override(experiment: ExperimentConfig, source: SourceFacts, found: dict) -> list[str]:
    """The config's dk_invA or dx_A against the file's (dk, else dx), compared as dk = 1 / (K dx)."""
    k = source.shape[-1]
    key, given = ("experiment.dk_invA", experiment.dk_invA) if experiment.dk_invA is not None else (
        "experiment.dx_A", experiment.dx_A)
    name = "dk_invA" if found["dk_invA"] is not None else "dx_A"
    if given is None or found[name] is None:
        return []
    if (key == "experiment.dk_invA") == (name == "dk_invA"):
        return _override(key, given, found[name], name, source)
    converted = 1.0 / (k * found[name])  # the file's value in the config key's quantity
    return _override(key, given, converted, f"1 / ({k} px x {name} {found[name]:g})", source)


def _scan_shape_overrides(scan_shape: list[int] | None, source: SourceFacts) -> list[str]:
    """data.scan_shape must give one position per pattern and, for 4D patterns, be their scan
    axes; against the file's 'scan_shape' attribute it is an override."""
    if not scan_shape:
        return []
    n, given = source.n_patterns, tuple(scan_shape)
    if given[0] * given[1] != n:
        raise ConfigError(f"data.scan_shape: {list(given)} gives {given[0] * given[1]} positions but the data has "
                          f"{n} patterns")
    if len(source.shape) == 4 and given != tuple(source.shape[:2]):
        raise ConfigError(f"data.scan_shape: {list(given)} against the scan axes {list(source.shape[:2])} of the 4D "
                          f"patterns in {source.name}; leave data.scan_shape out (a 4D file gives its own)")
    found = source.scan_shape
    if found is not None and found != given:
        return [f"data.scan_shape {list(given)} overrides {list(found)} from {source.name} (scan_shape)"]
    return []


def _override(key: str, given: float | None, found: float | None, what: str, source: SourceFacts,
              any_size: bool = False) -> list[str]:
    """[one line] when the config's ``given`` (for ``key``) overrides the file's ``found`` (``what``),
    [] when one is missing or both agree; a ConfigError when they lie more than LARGE_FACTOR
    apart (unless ``any_size``)."""
    if given is None or found is None or abs(given - found) <= SAME * max(abs(given), abs(found)):
        return []
    ratio = max(given / found, found / given) if given * found > 0 else math.inf
    if ratio > LARGE_FACTOR and not any_size:
        raise ConfigError(f"{key}: {given:g} against {found:g} from {source.name} ({what}), a factor {ratio:.3g} "
                          f"apart: a unit slip? Give it in the unit of the key's name, or leave it out to use the "
                          f"file's value")
    return [f"{key} {given:g} overrides {found:g} from {source.name} ({what})"]


def _file_value(source: SourceFacts, name: str) -> float | None:
    """The file's value ``name`` when it is a usable one (a finite number, > 0 but for defocus),
    else None: one the config replaces may be malformed."""
    array = np.asarray(source.attrs.get(name))
    if array.size != 1 or array.dtype.kind not in "iuf" or not np.isfinite(array).all():
        return None
    number = float(array.ravel()[0])
    return number if number > 0 or name == "defocus_A" else None


def _wavelength(experiment: ExperimentConfig, source: SourceFacts, values: dict) -> float:
    """From the energy (config, file, default), else the file's wavelength (CXI)."""
    if values["energy_eV"] is not None:
        return wavelength_A(values["energy_eV"], experiment.radiation)
    if "wavelength_A" in source.attrs:
        return _file_number(source, "wavelength_A", "energy_eV")
    raise ConfigError("experiment.energy_eV: needed, and the data file has no 'energy_eV' attribute (nor a wavelength)")


def _file_number(source: SourceFacts, name: str, key: str | None = None) -> float:
    """The file's value ``name`` as a float, held to the rule of the config key
    ``experiment.<key or name>`` it stands in for (finite; > 0 except for defocus)."""
    array = np.asarray(source.attrs[name])
    fix = f"fix the file or set experiment.{key or name}"
    if array.size != 1 or array.dtype.kind not in "iuf":
        raise DataError(f"{source.name}: attribute {name} must be a number, got {array.tolist()!r}; {fix}")
    number = float(array.ravel()[0])
    if not math.isfinite(number):
        raise DataError(f"{source.name}: attribute {name} must be a finite number, got {number}; {fix}")
    if name != "defocus_A" and number <= 0:
        raise DataError(f"{source.name}: attribute {name} must be > 0, got {number}; {fix}")
    return number


def probe_positions(source: SourceFacts, scan_shape: list[int] | None, scan_step_A: float | None,
                    rotation_deg: float = 0.0) -> np.ndarray:
    """(N, 2) probe centres (y, x) in Å of ``source``: the dataset ``experiment.positions`` names;
    the file's own positions when it has them and no scan step is given (either turned about their
    centre by ``rotation_deg``); else a raster of ``data.scan_shape`` (``scan_shape``, checked
    against the patterns by the caller) or the file's, turned by ``rotation_deg``."""
    n = source.n_patterns
    if source.named_positions is not None:
        where, positions = source.named_positions
        positions = np.asarray(positions, dtype=np.float64)
        if positions.ndim != 2 or positions.shape[1] != 2:
            raise DataError(f"{where}: positions must be (N, 2) (y, x), found shape {positions.shape}")
        if len(positions) != n:
            raise DataError(f"{where}: {len(positions)} positions for {n} patterns")
        if not np.isfinite(positions).all():
            raise DataError(f"{where}: positions contain NaN or Inf")
        return turned_positions_A(positions, rotation_deg)
    if source.positions_A is not None and scan_step_A is None:
        return turned_positions_A(np.asarray(source.positions_A, dtype=np.float64), rotation_deg)
    raster = _raster_scan_shape(source, scan_shape)
    if scan_step_A is None:
        raise ConfigError("experiment.scan_step_A: needed for raster positions, and the data file has no "
                          "'scan_step_A' attribute")
    return raster_positions_A(raster, scan_step_A, rotation_deg)


def _raster_scan_shape(source: SourceFacts, scan_shape: list[int] | None) -> tuple[int, int]:
    """[slow, fast] of a raster scan: data.scan_shape, else the 4D patterns' leading axes, else
    the file's 'scan_shape' attribute, which must account for every pattern."""
    if scan_shape:
        return int(scan_shape[0]), int(scan_shape[1])
    n, found = source.n_patterns, source.scan_shape
    if found is None and "scan_shape" in source.attrs:
        raise DataError(f"{source.name}: attribute scan_shape must be two positive integers [slow, fast], got "
                        f"{np.asarray(source.attrs['scan_shape']).tolist()!r}; fix the file or set data.scan_shape")
    if found is None:
        raise ConfigError("data.scan_shape: needed for raster positions with 3D patterns (the data file has no "
                          "'scan_shape' attribute), or read positions from a file with experiment.positions")
    if found[0] * found[1] != n:
        raise DataError(f"{source.name}: attribute scan_shape {list(found)} gives {found[0] * found[1]} positions but "
                        f"the data has {n} patterns; set data.scan_shape")
    return found
