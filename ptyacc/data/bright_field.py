"""The reciprocal pixel from the patterns themselves: the radius of the bright-field disk."""

from __future__ import annotations

import math

import numpy as np

from ptyacc.errors import DataError

DARK_PERCENTILE = 5
MIN_RADIUS_PX = 1.5
STRAY_FRACTION = 0.1  # bright pixels away from the disk, as a fraction of the disk's, before it is not one disk


def bright_field_radius_px(mean_pattern: np.ndarray, source: str) -> float:
    """Radius in pixels of the bright-field disk of a (K, K) mean pattern (zero frequency
    anywhere inside the detector).

    The dark level is the pattern's 5th percentile; pixels above half way from
    it to the maximum form the disk, whose plateau is their median. The area is then counted
    with sub-pixel weights, each pixel near the disk adding (value - dark) / (plateau - dark)
    clipped to [0, 1], so an edge pixel half covered adds one half: radius = sqrt(area / pi).
    Raises DataError naming ``source`` when no single disk inside the detector is found."""
    m = np.asarray(mean_pattern, dtype=np.float64)
    hint = "set experiment.dk_invA (or dx_A) instead of experiment.dk_from_bright_field"
    dark, peak = float(np.percentile(m, DARK_PERCENTILE)), float(m.max())
    if not (math.isfinite(peak) and math.isfinite(dark)) or peak <= dark:
        raise DataError(f"{source}: no bright-field disk in the mean pattern: it is flat or the disk fills the "
                        f"detector (maximum {peak:g}, {DARK_PERCENTILE}th percentile {dark:g}); {hint}")
    bright = m > dark + (peak - dark) / 2
    rough_radius = math.sqrt(bright.sum() / math.pi)
    if rough_radius < MIN_RADIUS_PX:
        raise DataError(f"{source}: no bright-field disk in the mean pattern: expected a disk of radius >= "
                        f"{MIN_RADIUS_PX} px above half maximum, found {int(bright.sum())} bright pixel(s); {hint}")
    if bright[0].any() or bright[-1].any() or bright[:, 0].any() or bright[:, -1].any():
        raise DataError(f"{source}: no bright-field disk inside the detector: the bright region of the mean "
                        f"pattern reaches the detector edge (crop less or bin less); {hint}")
    rows, cols = np.nonzero(bright)
    centre = rows.mean(), cols.mean()
    y, x = np.indices(m.shape)
    near = np.hypot(y - centre[0], x - centre[1]) <= rough_radius + 3
    stray = int((bright & ~near).sum())
    if stray > STRAY_FRACTION * bright.sum():
        raise DataError(f"{source}: no single bright-field disk in the mean pattern: {stray} of its "
                        f"{int(bright.sum())} bright pixels lie away from the brightest region; {hint}")
    plateau = float(np.median(m[bright]))
    weights = np.clip((m[near] - dark) / (plateau - dark), 0.0, 1.0)
    return math.sqrt(weights.sum() / math.pi)


def sample_rows(n_patterns: int, count: int = 256) -> np.ndarray:
    """Up to ``count`` evenly spread pattern indices, the same for every process."""
    return np.unique(np.linspace(0, n_patterns - 1, min(n_patterns, count)).round().astype(np.int64))


def measured_radius_px(source, n_patterns: int, prepare, every: np.ndarray | None = None) -> float:
    """Radius (prepared pixels) of the bright-field disk in the mean of an evenly spread sample of
    the ``n_patterns`` prepared patterns (the same on every process), taken from ``every`` (all of
    them, as held) or read from ``source`` (a ``readers.PatternFile``, through ``prepare``): the
    same values either way."""
    rows = sample_rows(n_patterns)
    sample = source.read(rows, prepare).patterns if every is None else every[rows]
    return bright_field_radius_px(np.fft.fftshift(sample.mean(axis=0, dtype=np.float64)), str(source.path))
