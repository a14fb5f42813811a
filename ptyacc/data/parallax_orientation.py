"""The patterns' transpose/flip against the scan, and the scan's rotation, from the parallax of the
bright-field disk (``data.transform.orientation: auto`` with ``experiment.defocus_A: auto``), where
the centre of mass cannot tell them.

The centre of mass of a crystal seen through a defocused probe wider than its lattice, or of any
sample through a partly coherent beam, can be nearly all noise: its curl then hardly depends on the
angle or the handedness (``orientation.py``'s curl left near 1). The parallax is not so weak: the
virtual bright-field image of the stored pixel k_s moves by s = M k_s (``parallax.py``), and for
stored patterns the preparation turns by the flags F (``orientation.flag_matrix``), on a raster
turned by theta from the nominal one (positions R(theta) n), measured on the nominal raster,

    M = lambda defocus R(theta)^T F   (plus the two-fold astigmatism, a symmetric traceless part).

So the sign of det M tells the handedness (F with or without a transpose), the nominal defocus's
sign tells F from -F (the patterns turned by 180 degrees), and of the four flags of that
handedness the one whose theta lies nearest 0 is taken (the centre of mass's rule, orientation.py),
with that theta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ptyacc.data.orientation import FLAGS, flag_matrix
from ptyacc.data.parallax import MAX_MISFIT, MIN_EDGE_PHASE, NoParallax, measure

SURE = 2.0  # the handedness is told when its conformal part of M is this many times the other's


@dataclass(frozen=True)
class ParallaxOrientation:
    """The ``flags`` (transpose, flip_y, flip_x) and ``rotation_deg`` the parallax gives, ``defocus_A``
    its |defocus| with the nominal sign, ``ratio`` how much the chosen handedness's part of M
    outweighs the other's."""

    flags: tuple[bool, bool, bool]
    rotation_deg: float
    defocus_A: float
    ratio: float
    rotation_error_deg: float = math.nan  # the rotation's standard error (``rotation_error_deg``)

    def line(self) -> str:
        t, fy, fx = self.flags
        error = f" +- {self.rotation_error_deg:.2f}" if math.isfinite(self.rotation_error_deg) else ""
        return (f"the bright-field parallax gives transpose {t}, flip_y {fy}, flip_x {fx} and a scan rotation of "
                f"{self.rotation_deg:.2f}{error} deg (defocus {self.defocus_A:.1f} A, handedness {self.ratio:.1f} "
                "times the other's)")


def conformal_parts(m: np.ndarray) -> tuple[float, float]:
    """|the part a I + b J| and |the part c D + d K| of a (2, 2) matrix, J = [[0, -1], [1, 0]], D =
    diag(1, -1), K = [[0, 1], [1, 0]]: a rotation times a scale, and a reflection times a scale;
    det m = first^2 - second^2."""
    return (math.hypot(m[0, 0] + m[1, 1], m[1, 0] - m[0, 1]) / 2,
            math.hypot(m[0, 0] - m[1, 1], m[1, 0] + m[0, 1]) / 2)


def rotation_error_deg(m: np.ndarray, covariance: np.ndarray, flags: tuple[bool, bool, bool]) -> float:
    """The standard error (degrees) of the rotation taken from M (2, 2) with ``flags``, from M's covariance (4, 4,
    row-major): theta is the angle of M F^T = |lambda defocus| R(theta)^T (up to the sign), so it moves by the error
    of that matrix's antisymmetric part, a linear function of M's entries, over the size of its conformal part."""
    f = flag_matrix(*flags)
    turned = m @ f.T
    basis = np.eye(4).reshape(4, 2, 2) @ f.T  # each of M's entries' share of M F^T
    weights = (basis[:, 1, 0] - basis[:, 0, 1]) / 2
    size = math.hypot((turned[0, 0] + turned[1, 1]) / 2, (turned[1, 0] - turned[0, 1]) / 2)
    return math.degrees(math.sqrt(max(float(weights @ covariance @ weights), 0.0)) / max(size, 1e-30))


def orientation_of_shifts(m: np.ndarray, nominal_defocus_A: float, wavelength_A: float
                          ) -> ParallaxOrientation | None:
    """The flags and rotation of the parallax's M (2, 2), Å per 1/Å, measured on the stored
    patterns along the nominal raster (no flags, no rotation), the defocus's sign that of
    ``nominal_defocus_A``; None where M's two handednesses are within SURE of each other."""
    rotating, reflecting = conformal_parts(m)
    if max(rotating, reflecting) < SURE * min(rotating, reflecting):
        return None
    best = None
    for flags in FLAGS:
        f = flag_matrix(*flags)
        if np.linalg.det(f) * (rotating - reflecting) < 0:
            continue
        turned = math.copysign(1.0, nominal_defocus_A) * m @ f.T  # = |lambda defocus| R(theta)^T, F^-1 = F^T
        theta = math.degrees(math.atan2(turned[1, 0] - turned[0, 1], turned[0, 0] + turned[1, 1]))
        if best is None or abs(theta) < abs(best[1]):
            best = (flags, theta)
    defocus = math.copysign(max(rotating, reflecting), nominal_defocus_A) / wavelength_A
    return ParallaxOrientation(best[0], best[1], defocus, max(rotating, reflecting) / min(rotating, reflecting))


def parallax_orientation(patterns: np.ndarray, scan_shape: tuple[int, int], nominal_steps_A: np.ndarray,
                         wavelength_A: float, dk_invA: float, nominal_defocus_A: float, semiangle_rad: float,
                         good: np.ndarray | None = None) -> ParallaxOrientation | None:
    """The orientation the parallax of (ny * nx, K, K) stored patterns (centred, as read) of a raster
    ``scan_shape`` gives on the nominal raster (step vectors ``nominal_steps_A``, columns, Å), ``good``
    the stored mask; None where the parallax cannot be measured, its shifts do not follow one linear
    map, the defocus is too small to measure well or the handedness is unclear."""
    try:
        found = measure(patterns, scan_shape, nominal_steps_A, wavelength_A, dk_invA, good, zero_at_centre=True)
    except NoParallax:
        return None
    if found.misfit > MAX_MISFIT or found.fit_A is None:
        return None
    chosen = orientation_of_shifts(found.fit_A[:, 1:], nominal_defocus_A, wavelength_A)
    if chosen is None or math.pi * abs(chosen.defocus_A) * semiangle_rad ** 2 / wavelength_A < MIN_EDGE_PHASE:
        return None
    if found.fit_covariance is None:
        return chosen
    return replace(chosen, rotation_error_deg=rotation_error_deg(found.fit_A[:, 1:], found.fit_covariance, chosen.flags))
