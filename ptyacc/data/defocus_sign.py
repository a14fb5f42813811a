"""The sign of the defocus, read from the parallax of the bright-field disk.

Under a defocused probe, the image formed by one detector pixel of the bright-field disk is the
image of the axial pixel shifted by defocus x scattering angle: two small regions of the disk at
+q and -q give images shifted against each other by 2 * defocus * wavelength * q (in Å, along
q). The shift is measured by least squares on the images' gradient (exact for small shifts, and
blind to a crystal's period, which a cross-correlation peak is not), with q chosen so that the
predicted shift is about SHIFT_STEPS scan steps. Measured shifts against those the configured
defocus predicts give a ratio near +1 when the sign is right and near -1 when it is flipped
(a scan rotated by 180 degrees gives -1 too). Only a clear negative ratio is said, as a warning:
the run goes on. On the demo (abTEM, +120 Å) the ratio is 1.13 at 1e5 electrons per pattern,
1.05 at 5e3, 0.77 at 1e3 and 0.30 at 200, and the negative of each with the sign flipped.
"""

from __future__ import annotations

import numpy as np

SHIFT_STEPS = 1.5  # predicted shift between the two regions' images, scan steps
MIN_SHIFT_STEPS = 0.5  # below this even at the largest q the defocus is too small to tell
MAX_SHIFT_STEPS = 4.0  # above this at a one-pixel q the gradient's linear regime is left
FLIPPED = (-4.0, -0.5)  # ratios of measured to predicted shifts that say the sign disagrees (the size within 4x)
MAX_SPREAD = 0.5  # the measured shifts' distance from ratio x predicted, relative, beyond which nothing is said


def scan_grid_steps(positions_A: np.ndarray, scan_shape: tuple[int, int]) -> np.ndarray | None:
    """The (2, 2) step vectors (Å; columns: one step along the slow and the fast scan axis, rows
    y and x) of positions (N, 2) laid out on a raster of ``scan_shape``, or None when they are
    not on one (residual above a quarter step)."""
    ny, nx = scan_shape
    if ny * nx != len(positions_A) or min(ny, nx) < 4:
        return None
    i, j = np.indices((ny, nx)).reshape(2, -1)
    design = np.stack([np.ones_like(i), i, j], 1).astype(np.float64)
    fit, *_ = np.linalg.lstsq(design, positions_A, rcond=None)
    steps = fit[1:].T
    residual = np.sqrt(np.mean((design @ fit - positions_A) ** 2))
    return steps if residual <= 0.25 * np.linalg.norm(steps, axis=0).min() else None


def image_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Shift s (scan steps, slow and fast) with b(R) ~ a(R - s), for small shifts: least squares
    of b - a = -s . grad((a + b) / 2) over the inner grid."""
    a, b = _smoothed(a), _smoothed(b)  # the same blur on both keeps their shift and quiets the noise
    gradients = np.gradient((a + b) / 2)
    design = np.stack([g[1:-1, 1:-1].ravel() for g in gradients], 1)
    shift, *_ = np.linalg.lstsq(design, -(b - a)[1:-1, 1:-1].ravel(), rcond=None)
    return shift


def _smoothed(image: np.ndarray) -> np.ndarray:
    """``image`` blurred by a [1, 2, 1] / 4 kernel along both axes (edges repeated)."""
    for axis in (0, 1):
        padded = np.pad(image, [(1, 1) if a == axis else (0, 0) for a in (0, 1)], mode="edge")
        ahead, behind = np.take(padded, range(2, padded.shape[axis]), axis), np.take(padded, range(padded.shape[axis] - 2), axis)
        image = (ahead + behind + 2 * image) / 4
    return image


def defocus_sign_check(patterns: np.ndarray, scan_shape: tuple[int, int], positions_A: np.ndarray,
                       defocus_A: float, wavelength_A: float, dk_invA: float, radius_px: float) -> float | None:
    """The ratio of the measured parallax to the one ``defocus_A`` predicts (+1: agrees, -1: the
    opposite sign), or None when it cannot be told (positions off a raster, defocus too small or
    too large for the scan step, no contrast). ``patterns``: (N, K, K) with zero frequency at
    [0, 0] (ptyacc's prepared patterns), N = prod(scan_shape) in raster order; ``radius_px``: the
    bright-field disk's radius in their pixels, of ``dk_invA``."""
    steps = scan_grid_steps(positions_A, scan_shape)
    if steps is None or defocus_A == 0:
        return None
    step_A = float(np.linalg.norm(steps, axis=0).mean())
    shift_per_px = 2 * abs(defocus_A) * wavelength_A * dk_invA / step_A  # scan steps per pixel of q
    q_px = float(np.clip(SHIFT_STEPS / shift_per_px, 1.0, 0.6 * radius_px))
    if shift_per_px * q_px < MIN_SHIFT_STEPS or shift_per_px > MAX_SHIFT_STEPS:
        return None
    k = patterns.shape[-1]
    y, x = np.indices((k, k)) - k // 2
    centred = np.fft.fftshift(patterns, axes=(-2, -1)).reshape(*scan_shape, k, k)
    region_px = max(1.0, 0.25 * radius_px)
    measured = []
    for qy, qx in ((q_px, 0.0), (0.0, q_px)):
        plus = centred[..., np.hypot(y - qy, x - qx) <= region_px].sum(-1, dtype=np.float64)
        minus = centred[..., np.hypot(y + qy, x + qx) <= region_px].sum(-1, dtype=np.float64)
        if not (np.ptp(plus) > 0 and np.ptp(minus) > 0):
            return None
        measured.append(steps @ image_shift(minus, plus))
    measured = np.stack(measured, 1)  # (y, x) in Å, columns: the pair along y, along x
    predicted = 2 * defocus_A * wavelength_A * dk_invA * q_px * np.eye(2)
    ratio = float((measured * predicted).sum() / (predicted ** 2).sum())
    spread = np.linalg.norm(measured - ratio * predicted) / max(np.linalg.norm(ratio * predicted), 1e-12)
    return ratio if spread <= MAX_SPREAD else None
