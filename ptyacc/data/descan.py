"""Descan: the bright-field disk's centre wandering across the scan, measured and taken out of the
patterns as they are prepared (``data.transform.descan: auto``).

Measured on an evenly spread sample of up to SAMPLE prepared patterns (the same on every
process): each pattern's disk is weighed pixel by pixel as in ``bright_field_radius_px``,
w = clip((value - dark) / (plateau - dark), 0, 1) with the dark level and plateau of the sample's
mean pattern, near the mean disk only, its bad pixels (the detector mask) read from the mean
pattern; the disk's centre is the centroid of w, which the sample's scattering, redistributing
intensity inside the disk, hardly moves. The centres are fitted by a plane in the nominal probe
positions, c(p) = c0 + G (p - mean position), in prepared pixels (after crop, bin and
orientation); zero frequency belongs at (K // 2, K // 2) of the centred pattern, so each pattern
at p is shifted by (K // 2, K // 2) - c(p) (a sub-pixel Fourier shift, values below zero set to 0,
the bad pixels first filled from the mean pattern so that the shift does not smear them). The
plane's residual says how well a plane describes the descan; run.log reports it, results.h5
keeps the shifts (/detector/descan_px) and the plane (/detector/descan_plane).

A part of the plane (per axis: the offset, the gradient) that lies within ``SIGNIFICANCE`` standard
errors of zero (from the residual, as if independent) is left out: on a thick crystal the sample
itself moves the disk by pixels from column to column (40 Å of SrTiO3 at 300 kV: 2.3 px rms), and a
plane through that over a scan of a few unit cells is noise (0.11 px/Å, up to 0.3 px across the scan,
about one standard error), which the shift would write into the patterns. Where nothing is left,
the patterns are read as they are (``Descan.moves``: False).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from ptyacc.data.bright_field import DARK_PERCENTILE, repaired, sample_rows

SAMPLE = 1024
MARGIN_PX = 4  # how far beyond the mean disk's half-maximum radius a pattern's disk may wander
SIGNIFICANCE = 5.0  # standard errors a part of the plane must reach to be taken out (module docstring)


@dataclass(frozen=True)
class Descan:
    """A plane of disk centres: ``plane`` (2, 3), per axis (y, x) of the centred pattern
    [centre at the mean position, per Å of y, per Å of x]; ``origin_A`` the mean position;
    ``centre_px`` where zero frequency belongs; ``residual_px`` the rms distance of the measured
    centres from the plane; ``patterns`` how many were measured."""

    plane: np.ndarray
    origin_A: np.ndarray
    centre_px: float
    residual_px: float
    patterns: int
    fill: np.ndarray  # (K, K) centred mean pattern of the sample, summing to 1 (bad pixels read from it)
    left_out: tuple[str, ...] = ()  # the parts of the plane within SIGNIFICANCE standard errors of zero

    @property
    def moves(self) -> bool:
        """Whether any pattern is shifted (False where every part of the plane was left out)."""
        return bool(np.any(self.plane[:, 0] != self.centre_px) or np.any(self.plane[:, 1:]))

    def shifts_px(self, positions_A: np.ndarray) -> np.ndarray:
        """(N, 2) shift (dy, dx) px of the disk at each probe position from where it belongs."""
        offset = np.column_stack([np.ones(len(positions_A)), positions_A - self.origin_A])
        return offset @ self.plane.T - self.centre_px

    def line(self, positions_A: np.ndarray, seconds: float) -> str:
        shifts = self.shifts_px(positions_A)
        c0, g = self.plane[:, 0] - self.centre_px, self.plane[:, 1:]
        left_out = (f"; left out, within {SIGNIFICANCE:g} standard errors of zero: {', '.join(self.left_out)}"
                    if self.left_out else "")
        moved = "each pattern shifted back" if self.moves else "the patterns left as they are"
        return (f"descan (data.transform.descan: auto): disk centre off by ({c0[0]:+.3f}, {c0[1]:+.3f}) px (y, x) at "
                f"the scan's middle, gradient [[{g[0, 0]:+.4f}, {g[0, 1]:+.4f}], [{g[1, 0]:+.4f}, {g[1, 1]:+.4f}]] px/A, "
                f"up to {np.abs(shifts).max():.3f} px across the scan; a plane leaves {self.residual_px:.3f} px rms in "
                f"{self.patterns} patterns{left_out}; {moved} ({seconds:.2g} s)")


def disk_centres(patterns: np.ndarray, good: np.ndarray | None, mean: np.ndarray) -> np.ndarray:
    """(n, 2) (y, x) disk centres in px of (n, K, K) centred patterns (module docstring); ``good``
    (K, K) bool centred, True = pixel counts; ``mean`` their mean pattern, bad pixels repaired."""
    dark, peak = float(np.percentile(mean, DARK_PERCENTILE)), float(mean.max())
    bright = mean > dark + (peak - dark) / 2
    plateau = float(np.median(mean[bright]))
    y, x = np.indices(mean.shape)
    rows, cols = np.nonzero(bright)
    near = np.hypot(y - rows.mean(), x - cols.mean()) <= np.sqrt(bright.sum() / np.pi) + MARGIN_PX
    totals = patterns.sum(axis=(-2, -1), dtype=np.float64)
    values = patterns[:, near].astype(np.float64)
    if good is not None:
        fill = mean[near] * (totals / mean.sum())[:, None]
        values = np.where(good[near], values, fill)
    level = (values - dark * totals[:, None] / mean.sum()) / ((plateau - dark) * totals[:, None] / mean.sum())
    w = np.clip(level, 0.0, 1.0)
    return np.column_stack([w @ y[near], w @ x[near]]) / w.sum(1)[:, None]


def fit_plane(positions_A: np.ndarray, centres_px: np.ndarray, centre_px: float, fill: np.ndarray) -> Descan:
    """The least-squares plane through ``centres_px`` (n, 2) at ``positions_A`` (n, 2), its parts
    within ``SIGNIFICANCE`` standard errors of zero left out (per axis: the offset from ``centre_px``,
    and the gradient's two terms together, by their chi-square)."""
    origin = positions_A.mean(0)
    design = np.column_stack([np.ones(len(positions_A)), positions_A - origin])
    plane, *_ = np.linalg.lstsq(design, centres_px, rcond=None)
    residual = centres_px - design @ plane
    variance = (residual ** 2).sum(0) / max(len(positions_A) - 3, 1)  # (2,) per axis
    inverse = np.linalg.pinv(design.T @ design)
    left_out = []
    for axis, name in enumerate("yx"):
        offset = plane[0, axis] - centre_px
        if offset**2 < SIGNIFICANCE**2 * variance[axis] * inverse[0, 0]:
            plane[0, axis] = centre_px
            left_out.append(f"{name} offset")
        gradient = plane[1:, axis]
        chi2 = gradient @ np.linalg.pinv(variance[axis] * inverse[1:, 1:]) @ gradient if variance[axis] > 0 else np.inf
        if chi2 < SIGNIFICANCE**2:
            plane[1:, axis] = 0.0
            left_out.append(f"{name} gradient")
    return Descan(plane.T, origin, centre_px, float(np.sqrt((residual ** 2).sum(1).mean())), len(positions_A), fill,
                  tuple(left_out))


def measure_descan(source, prepare, positions_A: np.ndarray, good: np.ndarray | None) -> tuple[Descan, str]:
    """The descan of the pattern file ``source`` (a ``readers.PatternFile``) at the nominal
    ``positions_A`` (N, 2), from a sample prepared by ``prepare`` (model layout), ``good`` the
    prepared detector mask (model layout) or None; and its run.log line."""
    started = time.perf_counter()
    rows = sample_rows(len(positions_A), SAMPLE)
    patterns = np.fft.fftshift(source.read(rows, prepare).patterns, axes=(-2, -1))
    centred_good = None if good is None else np.fft.fftshift(good)
    mean = repaired(patterns.mean(0, dtype=np.float64))
    descan = fit_plane(positions_A[rows], disk_centres(patterns, centred_good, mean), patterns.shape[-1] // 2,
                       mean / mean.sum())
    return descan, descan.line(positions_A, time.perf_counter() - started)


def shifted_back(patterns: np.ndarray, shifts_px: np.ndarray, good: np.ndarray | None = None,
                 fill: np.ndarray | None = None) -> np.ndarray:
    """(n, K, K) patterns (any layout) moved by -``shifts_px`` (n, 2) px, a Fourier shift, float32,
    none below 0; bad pixels (``good`` False) first filled with ``fill`` (K, K, summing to 1) times
    each pattern's total, the same whatever else is read with it."""
    if good is not None and not good.all():
        patterns = np.where(good, patterns, fill * patterns.sum(axis=(-2, -1), keepdims=True))
    q = np.fft.fftfreq(patterns.shape[-1])
    ramp = np.exp(2j * np.pi * (shifts_px[:, 0, None, None] * q[:, None] + shifts_px[:, 1, None, None] * q[None, :]))
    moved = np.fft.ifft2(np.fft.fft2(patterns) * ramp).real
    return np.maximum(moved, 0.0).astype(np.float32)


class Descanned:
    """A pattern file (``readers.PatternFile``) whose ``read`` gives the patterns shifted back by
    the ``descan`` at ``positions_A``; everything else is the file's."""

    def __init__(self, source, descan: Descan, positions_A: np.ndarray, good: np.ndarray | None) -> None:
        self._source, self._good, self._fill = source, good, np.fft.ifftshift(descan.fill)
        self._shifts = descan.shifts_px(positions_A)

    def __getattr__(self, name):
        return getattr(self._source, name)

    def read(self, rows: np.ndarray | None = None, prepare=None):
        raw = self._source.read(rows, prepare)
        shifts = self._shifts if rows is None else self._shifts[np.asarray(rows, dtype=np.int64)]
        return dataclasses.replace(raw, patterns=shifted_back(raw.patterns, shifts, self._good, self._fill))

