"""Where the object canvas lies in the positions' frame, and where each probe window falls."""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ObjectGeometry:
    """Object pixel [i, j] sits at origin_A + (i, j) * dx_A in the positions' frame (y, x).

    positions_px: (N, 2) probe centres in object pixels; the K x K probe window of position n
    starts at round(positions_px[n] - K/2) and its centre pixel K/2 lands on the position.
    """

    dx_A: float
    origin_A: tuple[float, float]
    shape: tuple[int, int]
    positions_px: np.ndarray

    @classmethod
    def around(cls, positions_A: np.ndarray, dx_A: float, window_px: int, padding_px: int = 0) -> "ObjectGeometry":
        """The smallest canvas holding every probe window plus ``padding_px`` on each side
        (and one spare pixel for rounding and position refinement)."""
        margin = window_px // 2 + padding_px + 1
        origin = positions_A.min(axis=0) - margin * dx_A
        positions_px = (positions_A - origin) / dx_A
        extent = np.ceil(positions_px.max(axis=0) + window_px - window_px // 2 + padding_px + 1).astype(int)
        return cls(dx_A, (float(origin[0]), float(origin[1])), (int(extent[0]), int(extent[1])), positions_px)

    def to_A(self, positions_px: np.ndarray) -> np.ndarray:
        return positions_px * self.dx_A + np.asarray(self.origin_A)
