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

``experiment.check_calibration: false`` skips them all.
"""

from __future__ import annotations

import numpy as np

from ptyacc.data.bright_field import (  # noqa: F401 (the bright-field check's names, also offered here)
    SKIP,
    SLIPS,
    TOLERANCE,
    Slip,
    bright_field_radius_px,
    check_bright_field,
    measured_radius_px,
    predicted_disk_radius_px,
)
from ptyacc.data.defocus_sign import FLIPPED, defocus_sign_check
from ptyacc.errors import ConfigError, DataError


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
    try:
        radius_px = measured_radius_px(source, len(calibration.positions_A), prepare, every) * bin_px
    except DataError as exc:
        check_axis_order(source, prepare, every)
        return (f"calibration check skipped (energy, semi-angle and dk are not checked against the data): "
                f"{str(exc).split('; ')[0]}",)
    line = check_bright_field(values, calibration.sources, k, radius_px, str(source.path), calibration.disk_radius_px)
    return (line, *check_defocus_sign(calibration, source.info.shape, every, radius_px / bin_px, dx_A))


def check_defocus_sign(calibration, stored_shape: tuple[int, ...], every: np.ndarray | None, radius_px: float,
                       dx_A: float) -> tuple[str, ...]:
    """The defocus sign against the parallax of the bright-field disk (``defocus_sign``) of the
    prepared patterns ``every`` (N, K, K), whose disk has ``radius_px``, on the scan grid of 4D
    data (``stored_shape``) or of the calibration: a line for run.log, and a warning for the
    terminal when the data say the opposite sign."""
    scan_shape = tuple(stored_shape[:2]) if len(stored_shape) == 4 else calibration.scan_shape
    defocus_A = -calibration.aberrations.get("C10", 0.0)
    if every is None or scan_shape is None:
        return ("defocus check skipped: it needs every pattern in memory, on a raster scan",)
    ratio = defocus_sign_check(every, scan_shape, calibration.positions_A, defocus_A, calibration.wavelength_A,
                               1.0 / (every.shape[-1] * dx_A), radius_px)
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
        step_px = float(np.median(np.linalg.norm(np.diff(positions_A, axis=0), axis=1))) / dx_A
        lines.append(f"calibration check: scan spans {span_px:.4g} px, median step {step_px:.3g} px, window {k} px")
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
