"""How well a reconstruction matches a known phase: the figure the low-dose benchmark and the
demo test report (docs/user-guide.md, 'Convergence and low-dose data')."""

from __future__ import annotations

import numpy as np


def scanned_region_ncc(phase: np.ndarray, origin_A, dx_A: float, positions_A: np.ndarray,
                       truth: np.ndarray) -> float:
    """Zero-shift normalised cross-correlation of a reconstructed phase (Ny, Nx), whose pixel
    [a, b] sits at ``origin_A`` + (a, b) dx, with a true phase whose pixel [i, j] sits at
    (i, j) dx, over the scanned region: the bounding box of the probe centres, rows
    ceil(min y / dx) .. floor(max y / dx), columns likewise. No shift is searched: it is what a
    user sees. 1 = identical up to a constant and a positive scale; -1 = the phase reversed."""
    offset = np.round(-np.asarray(origin_A, dtype=float) / dx_A).astype(int)
    px = np.asarray(positions_A, dtype=float) / dx_A
    (r0, c0), (r1, c1) = np.ceil(px.min(0)).astype(int), np.floor(px.max(0)).astype(int) + 1
    true = np.asarray(truth)[r0:r1, c0:c1]
    found = np.asarray(phase)[r0 + offset[0]:r1 + offset[0], c0 + offset[1]:c1 + offset[1]]
    if true.shape != found.shape or true.size == 0:
        raise ValueError(f"the scanned region {true.shape} is not inside the reconstruction {np.shape(phase)}")
    return float(np.corrcoef(true.ravel(), found.ravel())[0, 1])
