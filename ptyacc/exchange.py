"""The gradient exchange between processes: only the object region that a step touched.

Every step's windows cover a small part of the object, so summing the whole object gradient
over the processes (DDP's dense all-reduce) moves mostly zeros. Every process knows the whole
global batch (it comes from the seed), so every process can work out the same footprint, the
bounding box of the global batch's windows, without communicating, and exchange only that.
"""

from __future__ import annotations

import numpy as np


def footprint_box(corners: np.ndarray, window: int) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1): the smallest box of object pixels holding every K x K window whose
    top-left pixels are ``corners`` (B, 2) integer (y, x); rows y0:y1, columns x0:x1."""
    corners = np.asarray(corners)
    if len(corners) == 0:
        return 0, 0, 0, 0
    y0, x0 = (int(v) for v in corners.min(axis=0))
    y1, x1 = (int(v) + window for v in corners.max(axis=0))
    return y0, y1, x0, x1
