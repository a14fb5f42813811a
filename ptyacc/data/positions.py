"""Probe positions: read from a file, or a raster scan."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ptyacc.errors import ConfigError, DataError

if TYPE_CHECKING:
    from ptyacc.data.calibration import SourceFacts


def raster_positions_A(scan_shape: tuple[int, int], step_A: float, rotation_deg: float = 0.0) -> np.ndarray:
    """(N, 2) raster probe centres (y, x) in Å, slow axis y, row-major, starting at (0, 0),
    rotated by ``rotation_deg`` from the x axis towards the y axis."""
    ny, nx = scan_shape
    y, x = np.meshgrid(np.arange(ny) * step_A, np.arange(nx) * step_A, indexing="ij")
    theta = math.radians(rotation_deg)
    c, s = math.cos(theta), math.sin(theta)
    y, x = x.ravel() * s + y.ravel() * c, x.ravel() * c - y.ravel() * s
    return np.stack([y, x], axis=1)


def probe_positions(source: SourceFacts, scan_shape: list[int] | None, scan_step_A: float | None,
                    rotation_deg: float = 0.0) -> np.ndarray:
    """(N, 2) probe centres (y, x) in Å of ``source``: the dataset ``experiment.positions`` names;
    the file's own positions when it has them and no scan step is given; else a raster of
    ``data.scan_shape`` (``scan_shape``, checked against the patterns by the caller) or the file's."""
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
        return positions
    if source.positions_A is not None and scan_step_A is None:
        return np.asarray(source.positions_A, dtype=np.float64)
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
