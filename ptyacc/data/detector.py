"""Bad detector pixels found from the data (``data.bad_pixels: auto``).

On an evenly spread sample of up to 256 patterns as stored (before ``data.transform``), the same
on every process, each pixel is compared with its eight neighbours (the detector reflected at its
edges):

- hot: in at least BAD_SHARE of the patterns it reads more than HOT_FACTOR times its
  second-brightest neighbour (two hot pixels side by side are both found; a pixel at the edge of
  the bright-field disk, with at least two neighbours inside the disk, is not);
- dead: summed over the sample it reads at most DEAD_LEVEL of its second-darkest neighbour's sum
  (a pixel just outside the disk's edge has darker neighbours further out), where that sum is at
  least MIN_SIGNAL quanta (the smallest positive value in the sample: one electron for counts),
  so that a live pixel is not judged dead by chance;
- dead rows and columns: a line whose sum is at most DEAD_LEVEL of the second-smallest of the
  four nearest lines' sums (at least MIN_SIGNAL quanta), so that a dead column is found also where it
  crosses a dark field too faint to judge pixel by pixel.

The bad pixels are left out of the loss through the detector mask, which ``data.transform`` then
prepares like a file's mask. A compact Bragg spot of a pixel or two present in every pattern
would read as hot: electron ptychography's disks are wider.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ptyacc.data.bright_field import DEAD_LEVEL, HOT_FACTOR, neighbours, sample_rows

BAD_SHARE = 0.9
MIN_SIGNAL = 20.0
CHUNK = 16  # patterns judged at a time (each needs eight neighbour copies)


@dataclass(frozen=True)
class BadPixels:
    """Bad pixels of a detector, stored layout (ky, kx): ``dead`` and ``hot`` (M, 2) [row, col]
    of single pixels (those of a bad line not repeated), ``rows`` and ``columns`` the bad lines."""

    shape: tuple[int, int]
    dead: np.ndarray
    hot: np.ndarray
    rows: tuple[int, ...] = ()
    columns: tuple[int, ...] = ()

    @property
    def mask(self) -> np.ndarray:
        """(ky, kx) bool, True = bad."""
        bad = np.zeros(self.shape, dtype=bool)
        for places in (self.dead, self.hot):
            bad[places[:, 0], places[:, 1]] = True
        bad[list(self.rows), :] = True
        bad[:, list(self.columns)] = True
        return bad

    @property
    def count(self) -> int:
        return int(self.mask.sum())

    def arrays(self) -> dict[str, np.ndarray]:
        """For results.h5 /detector: ``bad_pixels`` (M, 2) int64 [row, col] of every bad pixel as stored."""
        return {"bad_pixels": np.argwhere(self.mask).astype(np.int64)}

    def line(self, source: str, patterns: int) -> str:
        """One run.log line: what was found, and where."""
        def places(array: np.ndarray) -> str:
            shown = ", ".join(f"[{r}, {c}]" for r, c in array[:12].tolist())
            return shown + (f" and {len(array) - 12} more" if len(array) > 12 else "")
        parts = [f"{len(self.dead)} dead" + (f" ({places(self.dead)})" if len(self.dead) else ""),
                 f"{len(self.hot)} hot" + (f" ({places(self.hot)})" if len(self.hot) else "")]
        if self.rows:
            parts.append(f"dead rows {list(self.rows)}")
        if self.columns:
            parts.append(f"dead columns {list(self.columns)}")
        return (f"bad pixels (data.bad_pixels: auto): {self.count} of {self.shape[0] * self.shape[1]} left out of "
                f"the loss: {', '.join(parts)} [row, col] as stored, from {patterns} patterns of {source}")


def find_bad_pixels(patterns: np.ndarray) -> BadPixels:
    """The dead and hot pixels and dead lines of (n, ky, kx) patterns as stored (module docstring)."""
    n, ky, kx = patterns.shape
    total, hot = np.zeros((ky, kx)), np.zeros((ky, kx), dtype=np.int64)
    quantum = np.inf
    for start in range(0, n, CHUNK):
        chunk = np.asarray(patterns[start:start + CHUNK], dtype=np.float64)
        hot += _above_second_brightest(chunk).sum(0)
        total += chunk.sum(0)
        positive = chunk[chunk > 0]
        quantum = min(quantum, float(positive.min())) if positive.size else quantum
    floor = MIN_SIGNAL * (quantum if np.isfinite(quantum) else 1.0)
    hot_mask = hot >= BAD_SHARE * n
    around = neighbours(total[None])[0]
    total = np.where(hot_mask, around[..., 3:5].mean(-1), total)  # hot pixels read as their neighbours
    darker = neighbours(total[None])[0, ..., 1]
    dead = (darker >= floor) & (total <= DEAD_LEVEL * darker)
    rows, columns = _dead_lines(total.sum(1), floor), _dead_lines(total.sum(0), floor)
    dead[list(rows), :] = False
    dead[:, list(columns)] = False
    return BadPixels((ky, kx), np.argwhere(dead), np.argwhere(hot_mask), rows, columns)


def _above_second_brightest(chunk: np.ndarray) -> np.ndarray:
    """(n, ky, kx) bool: each pixel above HOT_FACTOR times its second-brightest neighbour (and above
    0), the detector reflected at its edges; the neighbours counted, not sorted: fewer than two
    of them at least a HOT_FACTOR-th of it."""
    padded = np.pad(chunk, ((0, 0), (1, 1), (1, 1)), mode="reflect")
    ky, kx = chunk.shape[-2:]
    brighter = np.zeros(chunk.shape, dtype=np.int8)
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            if dy or dx:
                brighter += HOT_FACTOR * padded[:, 1 + dy:1 + dy + ky, 1 + dx:1 + dx + kx] >= chunk
    return (chunk > 0) & (brighter < 2)


def _dead_lines(sums: np.ndarray, floor: float) -> tuple[int, ...]:
    """Lines whose ``sums`` are at most DEAD_LEVEL of the second-smallest of their four nearest
    lines' (reflected at the ends; a line just outside the disk has darker lines further out),
    that one at least ``floor``."""
    padded = np.pad(sums, 2, mode="reflect")
    near = np.sort(np.stack([padded[i:i + len(sums)] for i in (0, 1, 3, 4)]), axis=0)[1]
    return tuple(int(i) for i in np.nonzero((near >= floor) & (sums <= DEAD_LEVEL * near))[0])


def measure_bad_pixels(source, n_patterns: int, background: np.ndarray | None) -> tuple[BadPixels, str]:
    """The bad pixels of the pattern file ``source`` (a ``readers.PatternFile`` of ``n_patterns``)
    found on ``sample_rows`` read as stored (less the dark frame ``background``, if any), and the
    run.log line that says what was found, where, and how long it took."""
    started = time.perf_counter()
    rows = sample_rows(n_patterns)
    subtract = None if background is None else (lambda chunk: chunk - background)
    bad = find_bad_pixels(source.read(rows, subtract).patterns)
    return bad, f"{bad.line(str(source.path), len(rows))} ({time.perf_counter() - started:.2g} s)"


def good_pixels(file_mask: np.ndarray | None, bad: BadPixels) -> np.ndarray:
    """(ky, kx) bool, True = pixel counts in the loss: the file's mask (None: all good) with the
    ``bad`` pixels left out."""
    good = ~bad.mask
    return good if file_mask is None else good & np.asarray(file_mask, dtype=bool)
