"""A raster scan's probe positions (``calibration.probe_positions`` chooses between a file's
positions and a raster)."""

from __future__ import annotations

import math

import numpy as np


def raster_positions_A(scan_shape: tuple[int, int], step_A: float, rotation_deg: float = 0.0) -> np.ndarray:
    """(N, 2) raster probe centres (y, x) in Å, slow axis y, row-major, starting at (0, 0),
    rotated by ``rotation_deg`` from the x axis towards the y axis."""
    ny, nx = scan_shape
    y, x = np.meshgrid(np.arange(ny) * step_A, np.arange(nx) * step_A, indexing="ij")
    theta = math.radians(rotation_deg)
    c, s = math.cos(theta), math.sin(theta)
    y, x = x.ravel() * s + y.ravel() * c, x.ravel() * c - y.ravel() * s
    return np.stack([y, x], axis=1)
