"""Descan: the bright-field disk's centre wandering across the scan, measured and taken out of the
patterns as they are prepared (``data.transform.descan: auto``).

Measured on an evenly spread sample of up to SAMPLE prepared patterns (the same on every
process): each pattern's disk is weighed pixel by pixel, w = clip(1/2 + EDGE_GAIN (level - 1/2), 0, 1)
with level = (value - dark) / (plateau - dark), the dark level and plateau of the sample's mean
pattern, near the mean disk only, its bad pixels (the detector mask) read from the mean pattern;
the disk's centre is the centroid of w, which the disk's edge sets and the sample's scattering,
redistributing intensity inside the disk, hardly moves. The centres are fitted by a plane in the nominal probe
positions, c(p) = c0 + G (p - mean position), in prepared pixels (after crop, bin and
orientation); zero frequency belongs at (K // 2, K // 2) of the centred pattern, so each pattern
at p is shifted by (K // 2, K // 2) - c(p) (a sub-pixel Fourier shift, values below zero set to 0,
the bad pixels first filled from the mean pattern so that the shift does not smear them); a
pattern whose shift is under STILL_PX is left as it is.

Where the plane fits poorly, the descan is kept per position instead: the plane's rms residual is
compared with the centres' own noise, each measured centre's distance from the median of its
NEAREST - 1 nearest measured neighbours (a robust rms, less the median's own share), which a jump
or a slow wave in the descan hardly moves; beyond POOR times the noise, each position's centre is
the median of the NEAREST measured centres nearest to it (on a raster: the 3 x 3 block about it),
which keeps a jump sharp and leaves a ninth of the noise's variance or so. A plane that leaves under
POOR_PX rms is used whatever the noise: the sample's own pull on the disk, alike over neighbouring
positions, can leave over POOR times a small noise, and following it per position writes the sample's
contrast into the descan. run.log says which was used with both rms.

A part of the plane (per axis: the offset, the gradient) that lies within SIGNIFICANCE standard
errors of zero (from the residual, as if independent) is left out: on a thick crystal the sample
itself moves the disk by pixels from column to column (40 Å of SrTiO3 at 300 kV: 2.3 px rms), and a
plane through that over a scan of a few unit cells is noise, which the shift would write into the
patterns. Where the centres' own noise exceeds NOISY_PX, the sample, not a descan, moves the disk
(that crystal: 1.1 px between neighbouring positions; thin samples 0.04-0.05 px), and nothing is
kept per position either. Where no pattern would move, the patterns are read as stored (counts stay
counts) and run.log says so.
results.h5 keeps the shifts applied (/detector/descan_px), the plane
(/detector/descan_plane), whether they are kept per position (/detector/descan_per_position)
and the plane's residual and the noise (/detector/descan_rms_px).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from ptyacc.data.bright_field import half_way_bright, repaired, sample_rows

SAMPLE = 1024
MARGIN_PX = 4  # how far beyond the mean disk's half-maximum radius a pattern's disk may wander
EDGE_GAIN = 3.0  # a pixel weighs 1 from a sixth above half the plateau: the sample's scattering inside the disk hardly
# moves the centre, the edge places it (on the independent simulator at 80 A defocus, 0.05 px rms from the truth, 0.1 at 1)
POOR = 3.0  # the plane's rms residual over the centres' own noise beyond which the descan is kept per position: on the
# independent simulator a plane reads 1.2-2.3 times the noise out of focus (the sample's pull, alike over neighbouring
# positions, escapes the noise), 3.1 in focus; a jump of 1 px or a wave of 0.6 px 4-5 times
POOR_PX = 0.15  # px: the least rms a plane must leave to be replaced per position. On the calibration matrix's fresh draws
# (every descan a plane, 617 runs) a plane that left over twice the noise (the sample's pull) left at most 0.091 px,
# 2.9-3.7 times the noise on 16 runs (far more where the noise was near 0 at 1e6 counts), and a 64 x 64 raster of random
# atoms followed per position scored 0.72 against 0.84 with the plane; the independent simulator's jump of 1 px and
# wave of 0.6 px leave 0.25-0.28 px
NEAREST = 9  # measured centres (the position's own among them) whose median gives a position's centre
NOISY_PX = 0.3  # the centres' noise beyond which the sample, not the descan, moves the disk (module docstring): on
# the independent simulator's thin samples (the descan tests) 0.04-0.05 px; 40 A of SrTiO3 (abTEM) 1.1 px
SIGNIFICANCE = 5.0  # standard errors a part of the plane must reach to be taken out (module docstring)
STILL_PX = 0.01  # a shift below which a pattern is not moved: a hundredth of the edge's step, far under its noise
CHUNK = 4096  # positions whose distances to the measured ones are held at a time


@dataclass(frozen=True)
class Descan:
    """A plane of disk centres: ``plane`` (2, 3), per axis (y, x) of the centred pattern
    [centre at the mean position, per Å of y, per Å of x]; ``origin_A`` the mean position;
    ``centre_px`` where zero frequency belongs; ``residual_px`` the rms distance of the measured
    centres from the plane; ``patterns`` how many were measured; ``noise_px`` the rms noise of one
    measured centre; ``kept_px`` (N, 2) the shift of each position's disk where the descan is
    kept per position (the plane fits poorly), None where the plane is used."""

    plane: np.ndarray
    origin_A: np.ndarray
    centre_px: float
    residual_px: float
    patterns: int
    fill: np.ndarray  # (K, K) centred mean pattern of the sample, summing to 1 (bad pixels read from it)
    noise_px: float = math.nan
    kept_px: np.ndarray | None = None
    left_out: tuple[str, ...] = ()  # the parts of the plane within SIGNIFICANCE standard errors of zero

    def applied_px(self, positions_A: np.ndarray) -> np.ndarray:
        """(N, 2) shift (dy, dx) px by which each pattern is moved back: kept per position, or the plane's."""
        return self.shifts_px(positions_A) if self.kept_px is None else self.kept_px

    def shifts_px(self, positions_A: np.ndarray) -> np.ndarray:
        """(N, 2) shift (dy, dx) px of the disk at each probe position from where it belongs."""
        offset = np.column_stack([np.ones(len(positions_A)), positions_A - self.origin_A])
        return offset @ self.plane.T - self.centre_px

    def arrays(self, shifts_px: np.ndarray) -> dict[str, np.ndarray]:
        """For results.h5 /detector (module docstring), ``shifts_px`` (N, 2) its ``applied_px``."""
        return {"descan_px": shifts_px, "descan_plane": self.plane,
                "descan_per_position": np.bool_(self.kept_px is not None),
                "descan_rms_px": np.array([self.residual_px, self.noise_px])}

    def line(self, shifts: np.ndarray, positions_A: np.ndarray, seconds: float) -> str:
        """run.log's line, ``shifts`` (N, 2) its ``applied_px`` at ``positions_A``."""
        c0, g = self.plane[:, 0] - self.centre_px, self.plane[:, 1:]
        if self.kept_px is not None:
            off = self.kept_px - self.shifts_px(positions_A)
            used = (f"the plane fits poorly (over {POOR:g} times the noise): kept per position, each the median of the "
                    f"{NEAREST} nearest measured centres, {np.sqrt((off ** 2).sum(1).mean()):.3f} px rms from the plane")
        elif self.noise_px > NOISY_PX:
            used = (f"the noise is over {NOISY_PX:g} px (the sample's own scattering moves the disk: a thick or "
                    "strongly scattering sample?): nothing kept per position")
        elif self.residual_px > max(POOR * self.noise_px, STILL_PX):  # said where the pull reaches a hundredth of a px
            used = (f"the plane is used (it leaves over {POOR:g} times the noise but under {POOR_PX:g} px: the sample's "
                    "own pull, not a descan to follow per position)")
        else:
            used = "the plane is used"
        if self.left_out:
            used += f"; left out of the plane, within {SIGNIFICANCE:g} standard errors of zero: {', '.join(self.left_out)}"
        moved = int((np.abs(shifts).max(1) >= STILL_PX).sum())
        return (f"descan (data.transform.descan: auto): disk centre off by ({c0[0]:+.3f}, {c0[1]:+.3f}) px (y, x) at "
                f"the scan's middle, gradient [[{g[0, 0]:+.4f}, {g[0, 1]:+.4f}], [{g[1, 0]:+.4f}, {g[1, 1]:+.4f}]] px/A; "
                f"a plane leaves {self.residual_px:.3f} px rms in {self.patterns} patterns, the centres' own noise "
                f"{self.noise_px:.3f} px rms: {used}; up to {np.abs(shifts).max():.3f} px across the scan, {moved} of "
                f"{len(shifts)} patterns shifted back (the others by under {STILL_PX:g} px)"
                f"{'' if moved else ': the patterns left as they are'} ({seconds:.2g} s)")


def any_moved(shifts_px: np.ndarray) -> bool:
    """Whether any of the shifts (N, 2) px moves its pattern: by STILL_PX or more."""
    return bool((np.abs(shifts_px) >= STILL_PX).any())


def disk_centres(patterns: np.ndarray, good: np.ndarray | None, mean: np.ndarray) -> np.ndarray:
    """(n, 2) (y, x) disk centres in px of (n, K, K) centred patterns (module docstring); ``good``
    (K, K) bool centred, True = pixel counts; ``mean`` their mean pattern, bad pixels repaired."""
    dark, _, bright = half_way_bright(mean)
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
    w = np.clip(0.5 + EDGE_GAIN * (level - 0.5), 0.0, 1.0)
    return np.column_stack([w @ y[near], w @ x[near]]) / w.sum(1)[:, None]


def disk_offset_px(mean: np.ndarray, good: np.ndarray | None) -> tuple[float, float]:
    """(y, x) px from the zero frequency (pixel [K // 2, K // 2]) of the bright-field disk's (or the beam's cone's)
    centre in the centred mean pattern ``mean`` (ky, kx; ``good`` its detector mask, True = counts, or None), its bad
    pixels repaired and its masked ones filled first (``repaired``: a module gap's zeros across the cone moved it by
    one to four pixels)."""
    mean = repaired(np.asarray(mean, dtype=np.float64), good)
    centre = disk_centres(mean[None], good, mean)[0]
    return float(centre[0] - mean.shape[0] // 2), float(centre[1] - mean.shape[1] // 2)


def beam_axis_px(mean: np.ndarray, good: np.ndarray | None) -> tuple[float, float]:
    """(y, x) frequency pixels from the zero frequency of the beam's cone's centre in the mean pattern ``mean`` (K, K,
    the model's layout: unshifted; ``good`` True where a pixel counts, the same layout, or None): the beam's axis
    (X-ray far field: a cone off the detector's middle pixel is a beam tilted against it); (0, 0) where there is no
    cone to read (an empty mean)."""
    axis = disk_offset_px(np.fft.fftshift(mean), None if good is None else np.fft.fftshift(good))
    return axis if all(np.isfinite(axis)) else (0.0, 0.0)


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
                  left_out=tuple(left_out))


def nearest(points_A: np.ndarray, measured_A: np.ndarray, count: int) -> np.ndarray:
    """(N, count) indices of the ``count`` ``measured_A`` (n, 2) positions nearest each of
    ``points_A`` (N, 2), nearest first (ties in index order)."""
    count = min(count, len(measured_A))
    found = []
    for start in range(0, len(points_A), CHUNK):
        distances = ((points_A[start:start + CHUNK, None] - measured_A[None]) ** 2).sum(-1)
        picked = np.argpartition(distances, count - 1, axis=1)[:, :count]
        order = np.lexsort((picked, np.take_along_axis(distances, picked, 1)), axis=1)
        found.append(np.take_along_axis(picked, order, 1))
    return np.concatenate(found)


def judged(descan: Descan, positions_A: np.ndarray, measured_A: np.ndarray, centres_px: np.ndarray) -> Descan:
    """``descan`` with the centres' noise, and kept per position at ``positions_A`` (N, 2) where the
    plane leaves over POOR times it (module docstring); ``centres_px`` (n, 2) measured at ``measured_A``."""
    if len(measured_A) < NEAREST:
        return descan
    off = centres_px - descan.centre_px - descan.shifts_px(measured_A)  # (n, 2) from the plane
    others = off[nearest(measured_A, measured_A, NEAREST)[:, 1:]]  # (n, NEAREST - 1, 2), itself left out
    deviation = off - np.median(others, axis=1)
    spread = 1.4826 * np.median(np.abs(deviation - np.median(deviation, axis=0)), axis=0)  # robust sigma per axis
    noise = float(np.sqrt((spread ** 2).sum() / (1 + math.pi / (2 * (NEAREST - 1)))))  # less the median's own noise
    kept = None
    if descan.residual_px > max(POOR * noise, POOR_PX) and noise <= NOISY_PX:  # over NOISY_PX the sample moves the disk
        kept = descan.shifts_px(positions_A) + np.median(off[nearest(positions_A, measured_A, NEAREST)], axis=1)
    return dataclasses.replace(descan, noise_px=noise, kept_px=kept)


def measure_descan(source, prepare, positions_A: np.ndarray, good: np.ndarray | None
                   ) -> tuple[Descan, np.ndarray, str]:
    """The descan of the pattern file ``source`` (a ``readers.PatternFile``) at the nominal
    ``positions_A`` (N, 2), from a sample prepared by ``prepare`` (model layout), ``good`` the
    prepared detector mask (model layout) or None; the shift (N, 2) px of each pattern
    (``applied_px``, worked out here once); and its run.log line."""
    started = time.perf_counter()
    rows = sample_rows(len(positions_A), SAMPLE)
    patterns = np.fft.fftshift(source.read(rows, prepare).patterns, axes=(-2, -1))
    centred_good = None if good is None else np.fft.fftshift(good)
    mean = repaired(patterns.mean(0, dtype=np.float64), centred_good)
    centres = disk_centres(patterns, centred_good, mean)
    descan = judged(fit_plane(positions_A[rows], centres, patterns.shape[-1] // 2, mean / mean.sum()), positions_A,
                    positions_A[rows], centres)
    shifts = descan.applied_px(positions_A)
    return descan, shifts, descan.line(shifts, positions_A, time.perf_counter() - started)


def shifted_back(patterns: np.ndarray, shifts_px: np.ndarray, good: np.ndarray | None = None,
                 fill: np.ndarray | None = None) -> np.ndarray:
    """(n, K, K) patterns (any layout) moved by -``shifts_px`` (n, 2) px, a Fourier shift in float32,
    none below 0; bad pixels (``good`` False) first filled with ``fill`` (K, K, summing to 1) times
    each pattern's total, the same whatever else is read with it. The half-spectrum's Nyquist bins
    take the real part of their ramp (paired with their mirror): the real part of the shift of the
    full spectrum, exactly."""
    patterns = np.asarray(patterns, dtype=np.float32)
    if good is not None and not good.all():
        patterns = np.where(good, patterns, (fill * patterns.sum(axis=(-2, -1), keepdims=True)).astype(np.float32))
    ky, kx = patterns.shape[-2:]
    ramp_y = np.exp(2j * np.pi * shifts_px[:, 0, None] * np.fft.fftfreq(ky))  # (n, ky)
    ramp_x = np.exp(2j * np.pi * shifts_px[:, 1, None] * np.fft.rfftfreq(kx))  # (n, kx // 2 + 1)
    ramp = ramp_y[:, :, None] * ramp_x[:, None, :]
    if ky % 2 == 0:
        ramp[:, ky // 2] = ramp_x * np.cos(np.pi * shifts_px[:, 0, None])
    if kx % 2 == 0:
        ramp[:, :, -1] = ramp_y * np.cos(np.pi * shifts_px[:, 1, None])
    if ky % 2 == 0 and kx % 2 == 0:
        ramp[:, ky // 2, -1] = np.cos(np.pi * shifts_px.sum(1))
    spectrum = np.fft.rfft2(patterns) * ramp.astype(np.complex64)
    return np.maximum(np.fft.irfft2(spectrum, s=patterns.shape[-2:]), 0.0).astype(np.float32)


class Descanned:
    """A pattern file (``readers.PatternFile``) whose ``read`` gives the patterns shifted back by
    ``shifts_px`` (N, 2), the ``descan``'s ``applied_px`` (float32; those to move by under STILL_PX
    as read); everything else is the file's."""

    def __init__(self, source, descan: Descan, shifts_px: np.ndarray, good: np.ndarray | None) -> None:
        self._source, self._good, self._fill = source, good, np.fft.ifftshift(descan.fill)
        self._shifts = shifts_px
        self._moved = np.abs(self._shifts).max(1) >= STILL_PX

    def __getattr__(self, name):
        return getattr(self._source, name)

    def read(self, rows: np.ndarray | None = None, prepare=None):
        raw = self._source.read(rows, prepare)
        which = slice(None) if rows is None else np.asarray(rows, dtype=np.int64)
        shifts, moved = self._shifts[which], self._moved[which]
        patterns = np.asarray(raw.patterns, dtype=np.float32)
        if moved.any():
            patterns = patterns.copy() if patterns is raw.patterns else patterns
            patterns[moved] = shifted_back(patterns[moved], shifts[moved], self._good, self._fill)
        return dataclasses.replace(raw, patterns=patterns)

