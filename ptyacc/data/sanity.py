"""Physical sanity checks of a calibration against the data, before the first iteration.

A unit slip (80 for 80 keV, 0.025 for 25 mrad, dk in 1/nm) runs to the end and gives noise.
These checks catch it while the run can still say which key is wrong:

- electrons, far field: the bright-field disk predicted from the energy (wavelength), the
  semi-angle and dk (radius = semiangle / wavelength / dk pixels; the calibration's
  ``disk_radius_px``) against the disk measured in the mean pattern; more than TOLERANCE apart
  stops the run, naming the slip that explains the data (each candidate of SLIPS is tried) or,
  when none does, every value that sets the radius (``check_bright_field``, which lives with the
  measurement in bright_field.py). A mean pattern without a disk skips the check, on the terminal;
  but when the scan axes of 4D data show a disk instead (the array stored as (ky, kx, scan_y,
  scan_x)), the run stops naming the transpose (``check_axis_order``).
- X-rays: the scan against the probe window (raster steps larger than the window, or a scan
  that spans less than a pixel, mean a wrong pixel size) and, in the near field, the Fresnel
  number of the window (K dx)^2 / (wavelength z), which must lie in the near-field regime.
- electrons, the defocus's sign against the parallax of the bright-field disk
  (``defocus_sign_check``): a warning on the terminal when the data say the opposite sign.

``experiment.check_calibration: false`` skips them all.

The parallax: under a defocused probe, the image formed by one detector pixel of the bright-field disk is the
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

from ptyacc.data.bright_field import (
    SKIP,
    bright_field_radius_px,
    check_bright_field,
    measured_radius_px,
)
from ptyacc.errors import ConfigError, DataError
from ptyacc.physics.footprint import median_neighbour_distance


def calibration_checks(experiment, calibration, dx_A: float, source, prepare, bin_px: int, prepared_px: int,
                       every: np.ndarray | None) -> tuple[str, ...]:
    """The checks of ``calibration`` (a ``calibration.Calibration`` under ``experiment``) against
    the data: their lines for run.log, or a ConfigError naming the likely slip. Electrons in the
    far field with a semi-angle: the bright-field disk (skipped, with a line saying why, when the
    mean pattern shows no single disk), measured on ``every`` (all the prepared patterns (N, K, K)
    when the load holds them) or on a sample read from ``source`` through ``prepare``, binned by
    ``bin_px``; X-rays: the scan and the near-field Fresnel number, for the object pixel ``dx_A``
    and the prepared patterns' width ``prepared_px``."""
    k = source.info.shape[-1]
    if experiment.radiation == "xray":
        return tuple(check_xray(calibration.positions_A, dx_A, prepared_px, calibration.wavelength_A,
                                calibration.near_field_distance_A))
    if calibration.semiangle_mrad is None or experiment.dk_from_bright_field or calibration.values.get(
            "energy_eV") is None:
        return ()
    values = dict(calibration.values, dx_A=calibration.stored_dx_A)
    # the defocus's lines first, on the predicted disk; kept only when the measured disk agrees with it
    defocus = check_defocus_sign(calibration, source.info.shape, every, calibration.disk_radius_px, bin_px, dx_A)
    try:
        radius_px = measured_radius_px(source, len(calibration.positions_A), prepare, every) * bin_px
    except DataError as exc:
        check_axis_order(source, prepare, every)
        return (f"calibration check skipped (energy, semi-angle and dk are not checked against the data): "
                f"{str(exc).split('; ')[0]}",)
    line = check_bright_field(values, calibration.sources, k, radius_px, str(source.path), calibration.disk_radius_px)
    return (line, *defocus)


def check_defocus_sign(calibration, stored_shape: tuple[int, ...], every: np.ndarray | None,
                       stored_radius_px: float | None, bin_px: int, dx_A: float) -> tuple[str, ...]:
    """The defocus sign against the parallax of the bright-field disk (``defocus_sign_check``) of the
    prepared patterns ``every`` (N, K, K), whose disk has ``stored_radius_px`` in stored pixels
    (binned by ``bin_px``), on the scan grid of 4D data (``stored_shape``) or of the calibration:
    a line for run.log, and a warning for the terminal when the data say the opposite sign."""
    scan_shape = tuple(stored_shape[:2]) if len(stored_shape) == 4 else calibration.scan_shape
    defocus_A = -calibration.aberrations.get("C10", 0.0)
    if every is None or scan_shape is None or stored_radius_px is None:
        return ("defocus check skipped: it needs every pattern in memory, on a raster scan",)
    ratio = defocus_sign_check(every, scan_shape, calibration.positions_A, defocus_A, calibration.wavelength_A,
                               1.0 / (every.shape[-1] * dx_A), stored_radius_px / bin_px)
    if ratio is None:
        return ("defocus check: the bright-field parallax cannot tell the sign (defocus too small or too large for "
                "the scan step, positions off a raster, or no contrast)",)
    line = f"defocus check: bright-field parallax {ratio:.2f} x the one defocus {defocus_A:g} A predicts"
    if not FLIPPED[0] <= ratio <= FLIPPED[1]:
        return (line,)
    where = {"file": "the file's attribute", "config": "the config"}.get(calibration.sources.get("defocus_A", ""),
                                                                         "the calibration")
    return (line, f"warning: the data's bright-field parallax says the defocus has the opposite sign to {defocus_A:g} "
                  f"A (from {where}): try experiment.defocus_A: {-defocus_A:g} (or, if the defocus is right, a scan rotated by "
                  "180 degrees: experiment.scan_rotation_deg); experiment.check_calibration: false skips this check")


SCAN_SAMPLE = 64  # scan rows and columns summed by check_axis_order, at most
MIN_CONTRAST = 0.5  # (peak - dark) / peak of a disk in the scan axes: a right scan's summed counts are nearly flat


def check_axis_order(source, prepare, every: np.ndarray | None) -> None:
    """Raise DataError when 4D data look stored as (ky, kx, scan_y, scan_x): their mean pattern
    shows no disk (the caller found none), while the counts of each pattern, laid out on the scan
    grid, do (on a grid of up to SCAN_SAMPLE x SCAN_SAMPLE evenly spread scan points, read from
    ``every`` (all prepared patterns) or from ``source`` through ``prepare``). Patterns of a right
    scan hold nearly the same counts everywhere, so their grid is flat and no disk is found."""
    shape = source.info.shape
    if len(shape) != 4:
        return
    grid = [np.unique(np.linspace(0, n - 1, min(n, SCAN_SAMPLE)).round().astype(np.int64)) for n in shape[:2]]
    rows = (grid[0][:, None] * shape[1] + grid[1][None, :]).ravel()
    sample = source.read(rows, prepare).patterns if every is None else every[rows]
    counts = sample.sum(axis=(-2, -1), dtype=np.float64).reshape(len(grid[0]), len(grid[1]))
    try:
        radius_px = bright_field_radius_px(counts, str(source.path))
    except DataError:
        return
    if np.ptp(counts) < MIN_CONTRAST * counts.max():
        return
    raise DataError(f"{source.path}: the patterns' axes look swapped with the scan's: the mean pattern shows no "
                    f"bright-field disk, but the counts over the scan ({shape[0]} x {shape[1]}) form one of radius "
                    f"{radius_px * (shape[0] - 1) / max(len(grid[0]) - 1, 1):.3g} px, so the array is likely stored as "
                    f"(ky, kx, scan_y, scan_x); write it as (scan_y, scan_x, ky, kx), e.g. numpy's "
                    f"array.transpose(2, 3, 0, 1) ({SKIP})")


def check_xray(positions_A: np.ndarray, dx_A: float, k: int, wavelength: float,
               near_field_distance_A: float | None) -> list[str]:
    """The X-ray checks (see the module docstring) for probe centres ``positions_A`` (N, 2) and
    an object pixel ``dx_A`` of a ``k`` px window; the lines for run.log, or a ConfigError."""
    lines = []
    if len(positions_A) > 1:
        span_px = float(np.ptp(positions_A, axis=0).max()) / dx_A
        step_px = median_neighbour_distance(positions_A, at_most=512) / dx_A  # not the next position's: interleaved scans
        lines.append(f"calibration check: scan spans {span_px:.4g} px, nearest-neighbour spacing {step_px:.3g} px "
                     f"(median), window {k} px")
        if span_px < 1 or step_px > k:
            raise ConfigError(f"experiment: with an object pixel of {dx_A * 1e-10:.4g} m the scan spans "
                              f"{span_px:.3g} px in steps of {step_px:.3g} px against a probe window of {k} px: the "
                              "probes do not overlap as a ptychographic scan must; check the pixel size "
                              "(experiment.detector_pixel_m, detector_distance_m, dx_A in Å) and the positions' "
                              f"unit (m in CXI files, Å in ptyacc's) ({SKIP})")
    if near_field_distance_A is not None:
        pixel_fresnel = dx_A ** 2 / (wavelength * near_field_distance_A)
        lines.append(f"calibration check: Fresnel number of the window {pixel_fresnel * k * k:.4g}, of a pixel "
                     f"{pixel_fresnel:.3g}")
        if not pixel_fresnel * k * k > 1 > pixel_fresnel:
            raise ConfigError(f"experiment: the near-field Fresnel numbers dx^2 / (wavelength z) are {pixel_fresnel:.3g} "
                              f"for a pixel and {pixel_fresnel * k * k:.3g} for the window; a near-field measurement "
                              "has fringes wider than a pixel (< 1) in a window of many of them (> 1): check "
                              "experiment.detector_distance_m, focus_to_sample_m and detector_pixel_m (metres) "
                              f"({SKIP})")
    return lines


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
