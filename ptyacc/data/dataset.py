"""The in-memory dataset: patterns, probe positions and calibration, whatever the source."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from ptyacc.data.autocalibration import AutoCalibration, ScansCalibration
    from ptyacc.data.calibration import Calibration
    from ptyacc.data.hold import HoldChoice, StreamedPatterns


@dataclass
class PtychoData:
    """Everything the model needs to know about a measurement.

    patterns:     (N, K, K) float32 intensities, unshifted FFT layout (zero frequency at [0, 0]);
                  (0, K, K) when they are not in memory (``streamed``, ``data.hold`` host or disk).
    positions_A:  (N, 2) float64 probe centres (y, x) in Å, in the patterns' order.
    n_patterns:   N, the number of positions (all of them, also when only some patterns are held).
    detector_px:  K; dk_invA: the reciprocal pixel 1 / (K dx_A) (1/Å).
    n_held:       the number of patterns held (by this process).
    counts_total: () float64, the sum of every held pattern's counts, wherever they are held (the
                  probe's scale). These five are set at construction from the fields above
                  (``dataclasses.replace`` sets them again).
    """

    patterns: torch.Tensor
    positions_A: np.ndarray
    dx_A: float
    wavelength_A: float
    semiangle_mrad: float | None
    aberrations: dict[str, float]
    scan_shape: tuple[int, int] | None = None
    source: str = ""
    pattern_rows: np.ndarray | None = None  # positions whose patterns are held; None = all
    radiation: str = "electron"
    mask: torch.Tensor | None = None  # (K, K) bool, True = pixel counts in the loss; model layout
    near_field_distance_A: float | None = None  # near field: effective (Fresnel-scaled) propagation distance
    stored_pattern_shape: tuple[int, int] | None = None  # (ky, kx) in the file, before data.transform
    ground_truth: dict[str, Any] = field(default_factory=dict)
    overrides: tuple[str, ...] = ()  # config values that replace the file's, one line each (for run.log)
    checks: tuple[str, ...] = ()  # what the calibration checks found (ptyacc.data.sanity), one line each
    # what the calibration autos found and decided (``detector`` and ``autos`` are read from it); None: none ran
    autocalibration: AutoCalibration | ScansCalibration | None = None
    # every calibration value used, {name: (value, source)} (``calibration_record``)
    calibration: dict[str, tuple[float, str]] = field(default_factory=dict)
    hold: HoldChoice | None = None  # where data.hold put the patterns read from a file, and why
    streamed: StreamedPatterns | None = None  # the held patterns when they are not in ``patterns``
    n_patterns: int = field(init=False)
    detector_px: int = field(init=False)
    dk_invA: float = field(init=False)
    n_held: int = field(init=False)
    counts_total: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.n_patterns = len(self.positions_A)
        self.n_held = self.n_patterns if self.pattern_rows is None else len(self.pattern_rows)
        self.detector_px = self.patterns.shape[-1]
        self.dk_invA = 1.0 / (self.detector_px * self.dx_A)
        self.counts_total = (self.patterns.sum(dtype=torch.float64) if self.streamed is None
                             else torch.tensor(self.streamed.counts_total, dtype=torch.float64))

    @classmethod
    def calibrated(cls, patterns: torch.Tensor, calibration: Calibration, dx_A: float, source: str,
                   **fields: Any) -> PtychoData:
        """``patterns`` with the positions and calibration of ``calibration``, object pixel ``dx_A``
        (the calibration's after ``data.transform``); ``fields``: the other fields."""
        return cls(patterns=patterns, positions_A=calibration.positions_A, dx_A=dx_A,
                   wavelength_A=calibration.wavelength_A, semiangle_mrad=calibration.semiangle_mrad,
                   aberrations=calibration.aberrations, scan_shape=calibration.scan_shape, source=source,
                   radiation=calibration.radiation, near_field_distance_A=calibration.near_field_distance_A,
                   overrides=calibration.overrides, calibration=calibration_record(calibration, dx_A, patterns.shape[-1]),
                   **fields)

    @property
    def detector(self) -> Mapping[str, np.ndarray]:
        """What the calibration autos measured in the data, {name: array}, read-only: results.h5's ``/detector``
        (``AutoCalibration.detector_arrays``; empty where none ran)."""
        return MappingProxyType({} if self.autocalibration is None else self.autocalibration.detector_arrays())

    @property
    def autos(self) -> Mapping[str, float | int | str | bool | list[bool]]:
        """The config's calibration autos as the load resolved them, {key: value}, read-only: results.h5's
        ``auto_values`` has them (``AutoCalibration.auto_values``; empty where none ran)."""
        return MappingProxyType({} if self.autocalibration is None else self.autocalibration.auto_values())

    @property
    def mean_intensity(self) -> float:
        """Mean total counts per held pattern."""
        if self.streamed is not None:
            return float(self.counts_total) / self.n_held
        return float(self.patterns.sum(dim=(-2, -1), dtype=torch.float64).mean())

    def held_counts_total(self) -> torch.Tensor:
        """() float64: the sum of every held pattern's counts, wherever they are held (``counts_total``)."""
        return self.counts_total

    def held_mean_pattern(self) -> torch.Tensor:
        """(K, K) float64 mean of the held patterns, wherever they are held (float64, so that the
        order of the sums, which differs between the two, stays far below float32 rounding)."""
        if self.streamed is None:
            return self.patterns.mean(0, dtype=torch.float64)
        return torch.from_numpy(self.streamed.pattern_sum) / self.n_held


def keep_only(data: PtychoData, keep) -> PtychoData:
    """``data`` holding only the patterns that ``keep(positions_A)`` selects."""
    if keep is None:
        return data
    rows = np.asarray(keep(data.positions_A))
    return dataclasses.replace(data, patterns=data.patterns[torch.from_numpy(rows)].clone(), pattern_rows=rows)


def calibration_record(calibration: Calibration, dx_A: float, k: int) -> dict[str, tuple[float, str]]:
    """Every calibration value used, as {name: (value, source)} for run.log and results.h5: those
    of ``calibration`` (with their ``sources``), its wavelength, and the object pixel ``dx_A`` and
    reciprocal pixel of the patterns as prepared, ``k`` px wide ("derived")."""
    record = {name: (float(value), calibration.sources.get(name, "derived"))
              for name, value in calibration.values.items() if value is not None}
    record.update({name: value for name, value in (("stored_dk_invA", record.pop("dk_invA", None)),
                                                   ("stored_dx_A", record.pop("dx_A", None))) if value is not None})
    record["wavelength_A"] = (calibration.wavelength_A, calibration.sources.get("wavelength_A", "derived"))
    record["dx_A"], record["dk_invA"] = (dx_A, "derived"), (1.0 / (k * dx_A), "derived")
    return record
