"""The formats detectors and microscopes write, through RosettaSciIO (``rsciio``, the maintained
readers of HyperSpy; the optional extra ``ptyacc[formats]``): Quantum Detectors Merlin ``.mib``,
Gatan DigitalMicrograph ``.dm3``/``.dm4``, Velox and NCEM ``.emd``, NanoMegas ``.blo``,
HyperSpy ``.hspy``/``.zspy``.

Read lazily (rsciio gives a dask array): only the rows asked for are read from disk. The patterns
are the last two axes (the only ones that do not navigate, where the format says which do), as
rsciio orients them (it flips Merlin frames upside down, as Merlin stores them); the scan axes
before them, (slow, fast). The calibration the
file carries goes into ``PatternsInfo.attrs`` in ptyacc's names: ``energy_eV`` (beam energy),
``semiangle_mrad`` (convergence angle), ``camera_length_m``, ``dk_invA`` (detector axes per
length, e.g. 1/nm, 1/Å, 1 / µm, or in mrad with the energy) and ``scan_step_A`` (scan axes in pm,
Å, nm, µm, mm or m); the instrument's values from rsciio's metadata, or from its original
metadata through the ``mapping`` rsciio gives for HyperSpy to apply (DigitalMicrograph, Velox).
"""

from __future__ import annotations

import importlib
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np

from ptyacc.data.formats.chunks import copy_rows
from ptyacc.data.formats.common import (
    PatternsInfo,
    Prepare,
    RawPatterns,
    ReadOptions,
    check_patterns,
    no_datasets,
    no_key,
    scan_shape_4d,
)
from ptyacc.errors import DataError
from ptyacc.physics import wavelength_A

KIND = "a file read by RosettaSciIO"
PLUGINS = {".mib": "quantumdetector", ".dm3": "digitalmicrograph", ".dm4": "digitalmicrograph", ".emd": "emd",
           ".blo": "blockfile", ".hspy": "hspy", ".zspy": "zspy"}
EXTENSIONS = tuple(PLUGINS)
MAGIC = None
INSTRUMENT = (("energy_eV", "beam_energy", 1e3), ("semiangle_mrad", "convergence_angle", 1.0),
              ("camera_length_m", "camera_length", 1e-3))  # ptyacc's name, rsciio's (keV, mrad, mm), factor
LENGTH_IN_A = {"pm": 0.01, "Å": 1.0, "A": 1.0, "nm": 10.0, "µm": 1e4, "um": 1e4, "mm": 1e7, "m": 1e10}
# "1/nm" (DM, HyperSpy), "1 / µm" or "1 / nm" (Velox: rsciio picks the prefix by the detector's size)
RECIPROCAL_PER_A = {f"1{space}/{space}{unit}": 1 / length for unit, length in LENGTH_IN_A.items() for space in ("", " ")}
RECIPROCAL_PER_A |= {"nm^-1": 0.1, "Å^-1": 1.0}


class Lazy:
    """A dask array that gives NumPy arrays when sliced (what ``copy_rows`` reads from)."""

    def __init__(self, array) -> None:
        self.array, self.shape, self.dtype = array, tuple(array.shape), np.dtype(array.dtype)

    def __getitem__(self, index) -> np.ndarray:
        return np.asarray(self.array[index])


def open_file(path: Path, options: ReadOptions) -> AbstractContextManager[dict]:
    """The signal of the file that holds the patterns (rsciio's dictionary, data lazy)."""
    if not path.is_file():
        raise DataError(f"{path}: data file not found")
    plugin = PLUGINS.get(path.suffix.lower())
    if plugin is None:
        raise DataError(f"{path}: RosettaSciIO reads {', '.join(EXTENSIONS)} here; rename the file or convert it")
    try:
        reader = importlib.import_module(f"rsciio.{plugin}").file_reader
    except ImportError as exc:
        raise DataError(f"{path}: reading {path.suffix} files needs RosettaSciIO's {plugin} reader, which cannot be "
                        f"imported (no module {exc.name!r}): pip install 'ptyacc[formats]'"
                        + ("" if exc.name.startswith("rsciio") else f" and {exc.name}")) from None
    kwargs = {"navigation_shape": options.scan_shape[::-1]} if plugin == "quantumdetector" and options.scan_shape else {}
    try:
        signals = reader(str(path), lazy=True, **kwargs)
    except Exception as exc:  # rsciio raises many kinds for a file it cannot parse
        raise DataError(f"{path}: RosettaSciIO ({plugin}) cannot read it: {type(exc).__name__}: {exc}") from None
    patterns = [s for s in signals if len(s["data"].shape) in (3, 4) and _detector_last(s)]
    if not patterns:
        shapes = ", ".join(str(tuple(s["data"].shape)) for s in signals) or "none"
        raise DataError(f"{path}: no 3D or 4D patterns (scan axes then two detector axes) among its signals, "
                        f"found shapes {shapes}")
    return nullcontext(max(patterns, key=lambda s: int(np.prod(s["data"].shape))))


def inspect(signal: dict, path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    no_key(path, key, KIND)
    no_datasets(path, options, KIND)
    shape, dtype = tuple(int(n) for n in signal["data"].shape), np.dtype(signal["data"].dtype)
    check_patterns(path, "", shape, dtype)
    scan_shape = scan_shape_4d(shape)
    attrs = calibration_attrs(signal)
    if scan_shape is not None:
        attrs["scan_shape"] = scan_shape
    return PatternsInfo("", shape, scan_shape, attrs, "rsciio")


def read(signal: dict, path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
         rows: np.ndarray | None) -> RawPatterns:
    patterns = copy_rows(Lazy(signal["data"]), info.shape[-2:], rows, prepare)
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), format="rsciio")


def calibration_attrs(signal: dict) -> dict[str, float]:
    """The calibration in rsciio's metadata and axes, in ptyacc's names (module docstring)."""
    tem = _instrument(signal)
    attrs: dict[str, float] = {}
    for name, key, factor in INSTRUMENT:
        if _positive(tem.get(key)):
            attrs[name] = float(tem[key]) * factor
    axes = signal.get("axes") or []
    detector, scan = axes[-2:], axes[:-2]  # rsciio lists the axes in array order
    dk = _common_scale(detector, RECIPROCAL_PER_A)
    if dk is None and "energy_eV" in attrs:
        mrad = _common_scale(detector, {"mrad": 1e-3})  # radians per pixel
        dk = None if mrad is None else mrad / wavelength_A(attrs["energy_eV"], "electron")
    if dk is not None:
        attrs["dk_invA"] = dk
    step = _common_scale(scan, LENGTH_IN_A)
    if step is not None:
        attrs["scan_step_A"] = step
    return attrs


def _instrument(signal: dict) -> dict:
    """The signal's ``Acquisition_instrument.TEM`` metadata, completed from its original metadata by
    rsciio's ``mapping``: the DigitalMicrograph and Velox readers leave that step to HyperSpy, so
    their beam energy and camera length are only there."""
    tem = dict(((signal.get("metadata") or {}).get("Acquisition_instrument") or {}).get("TEM") or {})
    wanted = {key for _, key, _ in INSTRUMENT} - set(tem)
    for source, (target, convert) in (signal.get("mapping") or {}).items():
        prefix, _, key = target.rpartition(".")
        if prefix != "Acquisition_instrument.TEM" or key not in wanted:
            continue
        value = _find(signal.get("original_metadata") or {}, source.split("."))
        if value is not None:
            try:
                tem[key] = convert(value) if convert else value
            except (TypeError, ValueError):  # a tag that is not a number: no calibration from it
                pass
    return tem


def _find(tree: dict, path: list[str]) -> object:
    """The value at ``path`` in nested dicts, a space and an underscore in a name being the same
    (rsciio's mappings spell DM's "Microscope Info" both ways); None when absent."""
    for name in path:
        if not isinstance(tree, dict):
            return None
        keys = {str(key).replace(" ", "_"): key for key in tree}
        tree = tree.get(keys.get(name.replace(" ", "_")))
    return tree


def _detector_last(signal: dict) -> bool:
    """Whether the last two axes are the detector's: the only ones that do not navigate, or, in
    formats that do not say (NCEM EMD), no axis navigates."""
    navigates = [bool(a.get("navigate", False)) for a in signal.get("axes") or []]
    return len(navigates) == len(signal["data"].shape) and (navigates[-2:] == [False, False] and
                                                           (all(navigates[:-2]) or not any(navigates)))


def _common_scale(axes: list[dict], units: dict[str, float]) -> float | None:
    """The scale of ``axes`` in ptyacc's unit (``units``: the factor of each unit name) when
    they all share one known unit and scale; else None."""
    found = {(a.get("units"), a.get("scale")) for a in axes}
    if len(axes) < 2 or len(found) != 1:
        return None
    unit, scale = found.pop()
    return float(scale) * units[unit] if unit in units and _positive(scale) else None


def _positive(value: object) -> bool:
    return isinstance(value, (int, float, np.number)) and np.isfinite(value) and value > 0
