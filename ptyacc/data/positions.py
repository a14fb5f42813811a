"""A raster scan's probe positions (``calibration.probe_positions`` chooses between a file's
positions and a raster)."""

from __future__ import annotations

import math

import numpy as np
import torch


def raster_positions_A(scan_shape: tuple[int, int], step_A: float, rotation_deg: float = 0.0) -> np.ndarray:
    """(N, 2) raster probe centres (y, x) in Å, slow axis y, row-major, starting at (0, 0),
    rotated by ``rotation_deg`` from the x axis towards the y axis."""
    ny, nx = scan_shape
    y, x = np.meshgrid(np.arange(ny) * step_A, np.arange(nx) * step_A, indexing="ij")
    theta = math.radians(rotation_deg)
    c, s = math.cos(theta), math.sin(theta)
    y, x = x.ravel() * s + y.ravel() * c, x.ravel() * c - y.ravel() * s
    return np.stack([y, x], axis=1)


def median_neighbour_distance(positions_px: np.ndarray, at_most: int | None = None) -> float:
    """The median over positions (N, 2) of the distance to the nearest other position (px); with
    ``at_most``, over that many positions evenly spread through the list (every one when N is smaller),
    each against all N, in chunks that hold about 2^22 distances (32 MiB), whatever N."""
    points = torch.as_tensor(np.asarray(positions_px), dtype=torch.float64)
    if len(points) < 2:
        return 1.0
    rows = torch.arange(len(points))
    if at_most is not None and len(points) > at_most:
        rows = torch.linspace(0, len(points) - 1, at_most).round().long()
    chunk = max(1, (1 << 22) // len(points))
    nearest = []
    for start in range(0, len(rows), chunk):
        some = rows[start:start + chunk]
        distance = torch.cdist(points[some], points)
        distance[torch.arange(len(some)), some] = float("inf")
        nearest.append(distance.min(1).values)
    return float(torch.cat(nearest).median())
