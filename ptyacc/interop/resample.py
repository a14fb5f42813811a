"""A previous reconstruction fitted to this run: the object onto this run's pixel grid, its slices
and modes to this run's numbers, the probe onto this run's window (NumPy; ``reconstruction.initial``
applies them and says what was done in run.log).

Interpolation (stated, and measured in tests/test_init_from_foreign.py): the object bilinearly on
its amplitude and, apart, on its unit phasor (the phase is never unwrapped, so 2 pi jumps do not
smear); the probe bilinearly on its real and imaginary parts (smooth), about the window's centre
(K/2, K/2). Where the new grid's points fall on old pixels (the same pixel size, whole-pixel
shifts) the values come back exactly. Slices: each new slice takes the old slices' log
transmission (log amplitude + i phase) over the same fraction of the stack's depth, so the summed
phase and amplitude are kept whatever the number of slices.
"""

from __future__ import annotations

import numpy as np


def sample_grid(start_px: np.ndarray, step_px: float, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Row and column coordinates (in old pixels) of a new grid of ``shape`` starting at ``start_px``
    (y, x) with ``step_px`` old pixels between new pixels."""
    return start_px[0] + step_px * np.arange(shape[0]), start_px[1] + step_px * np.arange(shape[1])


def bilinear(values: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` (..., H, W) at the points rows x cols (old pixel coordinates), and a (len(rows),
    len(cols)) bool mask of the points inside the old grid (outside: the nearest edge value)."""
    h, w = values.shape[-2:]
    inside = ((rows >= 0) & (rows <= h - 1))[:, None] & ((cols >= 0) & (cols <= w - 1))[None, :]
    r, c = np.clip(rows, 0, h - 1), np.clip(cols, 0, w - 1)
    r0, c0 = np.minimum(np.floor(r).astype(int), max(h - 2, 0)), np.minimum(np.floor(c).astype(int), max(w - 2, 0))
    r1, c1 = np.minimum(r0 + 1, h - 1), np.minimum(c0 + 1, w - 1)
    fr, fc = (r - r0)[:, None], (c - c0)[None, :]
    top = values[..., r0[:, None], c0[None, :]] * (1 - fc) + values[..., r0[:, None], c1[None, :]] * fc
    bottom = values[..., r1[:, None], c0[None, :]] * (1 - fc) + values[..., r1[:, None], c1[None, :]] * fc
    return top * (1 - fr) + bottom * fr, inside


def resample_object(obj: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The complex object (..., H, W) at rows x cols (``bilinear``): amplitude and unit phasor
    interpolated apart. Returns (values (..., len(rows), len(cols)) complex64, inside mask)."""
    amplitude = np.abs(obj)
    phasor = np.where(amplitude > 0, obj / np.where(amplitude > 0, amplitude, 1), 1)
    new_amplitude, inside = bilinear(amplitude, rows, cols)
    new_phasor, _ = bilinear(phasor, rows, cols)
    size = np.abs(new_phasor)
    new_phasor = np.where(size > 0, new_phasor / np.where(size > 0, size, 1), 1)
    return (new_amplitude * new_phasor).astype(np.complex64), inside


def resample_slices(obj: np.ndarray, n_slices: int) -> np.ndarray:
    """(modes, S, H, W) complex made (modes, n_slices, H, W): new slice j holds the old slices' log
    transmission over depth fraction [j / n, (j + 1) / n) of the stack (overlap-weighted sum)."""
    old = obj.shape[1]
    if old == n_slices:
        return obj
    log = np.log(np.maximum(np.abs(obj), 1e-12)) + 1j * np.angle(obj)  # (modes, S, H, W)
    edges_old, edges_new = np.linspace(0, 1, old + 1), np.linspace(0, 1, n_slices + 1)
    weights = np.clip(np.minimum(edges_new[1:, None], edges_old[None, 1:])
                      - np.maximum(edges_new[:-1, None], edges_old[None, :-1]), 0, None) * old  # (new, old)
    return np.exp(np.einsum("no,mohw->mnhw", weights, log)).astype(np.complex64)


def resample_probe(probe: np.ndarray, old_dx: float, new_dx: float, window: int) -> np.ndarray:
    """(modes, K, K) complex on pixels of ``old_dx`` made (modes, window, window) on ``new_dx``
    about the window centre; each mode keeps its total intensity (the patterns' total counts)."""
    old_k = probe.shape[-1]
    centre = old_k // 2 - (window // 2) * new_dx / old_dx
    rows, cols = sample_grid(np.array([centre, centre]), new_dx / old_dx, (window, window))
    values, inside = bilinear(probe, rows, cols)
    values = values * inside  # no probe outside the old window
    before = (np.abs(probe) ** 2).sum(axis=(-2, -1))
    after = (np.abs(values) ** 2).sum(axis=(-2, -1))
    scale = np.sqrt(np.divide(before, after, out=np.zeros_like(before), where=after > 0))
    return (values * scale[:, None, None]).astype(np.complex64)
