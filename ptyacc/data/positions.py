"""A raster scan's probe positions (``calibration.probe_positions`` chooses between a file's
positions and a raster), positions turned about their centre, and the raster that a file's own
positions form, if any (``raster_fit``: a converter that stores the nominal raster as
``positions_A`` leaves it to be recognised, so that the autos that need a raster apply).

A file's positions are a raster when, taken in their stored order, they advance by one step
vector along each row and by another from row to row (row-major, ``raster_positions_A``'s order;
a snake scan is none): rows are found where the next position leaves the fast step by more than
ROW_BREAK steps, and the raster o + i a + j b (i the row, j the column) is fitted by least
squares. Within EXACT of a step (rms) of it, with square steps at right angles turning the
standard way, they are that raster, turned by the fast step's angle (``RasterFit.exact``); within
NEAR, a raster with jitter, whose grid the parallax can still be measured on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ROW_BREAK = 2.0  # steps: a move this far from the fast step starts a new row
EXACT = 0.02  # rms distance from the fitted raster, in steps, within which positions are the nominal raster
NEAR = 0.25  # ... within which they are a raster with jitter (``sanity.scan_grid_steps`` takes the same)
SQUARE = 0.01  # relative: the two steps' lengths, and their angle's cosine, within this of a square raster
MIN_ROWS = 4  # rows and columns, at least


def raster_positions_A(scan_shape: tuple[int, int], step_A: float, rotation_deg: float = 0.0) -> np.ndarray:
    """(N, 2) raster probe centres (y, x) in Å, slow axis y, row-major, starting at (0, 0),
    rotated by ``rotation_deg`` from the x axis towards the y axis."""
    ny, nx = scan_shape
    y, x = np.meshgrid(np.arange(ny) * step_A, np.arange(nx) * step_A, indexing="ij")
    theta = math.radians(rotation_deg)
    c, s = math.cos(theta), math.sin(theta)
    y, x = x.ravel() * s + y.ravel() * c, x.ravel() * c - y.ravel() * s
    return np.stack([y, x], axis=1)


def turned_positions_A(positions_A: np.ndarray, rotation_deg: float) -> np.ndarray:
    """(N, 2) positions (y, x) Å turned about their mean by ``rotation_deg`` from +x towards +y (the
    sense of ``raster_positions_A``); the same array when the angle is 0."""
    if rotation_deg == 0:
        return positions_A
    theta = math.radians(rotation_deg)
    c, s = math.cos(theta), math.sin(theta)
    centre = positions_A.mean(0)
    y, x = (positions_A - centre).T
    return centre + np.stack([x * s + y * c, x * c - y * s], axis=1)


@dataclass(frozen=True)
class RasterFit:
    """The raster o + i a + j b nearest a scan's positions: ``scan_shape`` (rows, columns),
    ``steps_A`` (2, 2) whose columns are a (row to row) and b (along a row), (y, x) Å,
    ``origin_A`` (2,) and ``rms_A`` the positions' rms distance from it."""

    scan_shape: tuple[int, int]
    steps_A: np.ndarray
    origin_A: np.ndarray
    rms_A: float

    @property
    def step_A(self) -> float:
        return float(np.linalg.norm(self.steps_A, axis=0).mean())

    @property
    def rotation_deg(self) -> float:
        """The fast step's angle from +x towards +y: the rotation of ``raster_positions_A``."""
        return math.degrees(math.atan2(self.steps_A[0, 1], self.steps_A[1, 1]))

    @property
    def square(self) -> bool:
        """Steps of one length at right angles, turning the standard way (det > 0): a turned
        ``raster_positions_A``."""
        a, b = np.linalg.norm(self.steps_A, axis=0)
        cosine = abs(float(self.steps_A[:, 0] @ self.steps_A[:, 1])) / (a * b)
        return abs(a - b) <= SQUARE * max(a, b) and cosine <= SQUARE and np.linalg.det(self.steps_A) > 0

    @property
    def exact(self) -> bool:
        """The nominal raster: square, and the positions within EXACT of a step of it."""
        return self.square and self.rms_A <= EXACT * self.step_A

    def describe(self) -> str:
        kind = "a raster" if self.exact else "a raster with jitter" if self.square else "a skewed or mirrored raster"
        return (f"{kind} of {self.scan_shape[0]} x {self.scan_shape[1]} positions, step {self.step_A:.4g} A, turned "
                f"{round(self.rotation_deg, 2) + 0.0:.2f} deg, rms {self.rms_A:.2g} A off the grid")


def raster_fit(positions_A: np.ndarray, scan_shape: tuple[int, int] | None = None) -> RasterFit | None:
    """The raster (row-major) that ``positions_A`` (N, 2) (y, x) Å form within NEAR of a step (rms),
    its rows found from the positions (or ``scan_shape``, when given, tried first); None when they
    form none."""
    p = np.asarray(positions_A, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != 2 or len(p) < MIN_ROWS * MIN_ROWS or not np.isfinite(p).all():
        return None
    shapes = [tuple(int(v) for v in scan_shape)] if scan_shape is not None else []
    moves = np.diff(p, axis=0)
    fast = np.median(moves, axis=0)
    if np.linalg.norm(fast) > 0:
        breaks = np.nonzero(np.linalg.norm(moves - fast, axis=1) > ROW_BREAK * np.linalg.norm(fast))[0] + 1
        if len(breaks) and len(p) % breaks[0] == 0:
            shapes.append((len(p) // int(breaks[0]), int(breaks[0])))
    for ny, nx in shapes:
        if ny * nx != len(p) or min(ny, nx) < MIN_ROWS:
            continue
        i, j = np.divmod(np.arange(len(p)), nx)
        design = np.column_stack([np.ones(len(p)), i, j])
        solution, *_ = np.linalg.lstsq(design, p, rcond=None)
        rms = float(np.sqrt(((design @ solution - p) ** 2).sum(1).mean()))
        fit = RasterFit((ny, nx), solution[1:].T.copy(), solution[0], rms)
        if fit.step_A > 0 and rms <= NEAR * min(np.linalg.norm(fit.steps_A, axis=0)):
            return fit
    return None
