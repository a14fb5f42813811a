"""Defocus and two-fold astigmatism from the parallax of the bright-field disk
(``experiment.defocus_A: auto``), and the tilt-corrected bright-field image.

Each detector pixel inside the bright-field disk, at spatial frequency k (1/Å, from the disk's
centre), sees the sample through the rays of the probe that reach it. For a probe whose phase is
chi(k) = pi lambda (C10 |k|^2 + C12a (kx^2 - ky^2) + 2 C12b kx ky) (``physics.probe``), the ray
reaching k crossed the sample at grad chi / (2 pi) from the probe's centre, so that pixel's virtual
bright-field image of the scan is the common bright-field image moved by s(k) = M k (Å), with

    M / lambda = [[defocus + C12a, -C12b], [-C12b, defocus - C12a]]   (rows and columns y, x)

and defocus = -C10 (positive: underfocus). For a weak object this holds exactly for the pixels whose
neighbourhood of the scan's frequencies stays inside the disk; near the disk's edge the image turns
into a differential phase contrast image, so the edge is left out.

Measured on the middle block of up to 64 x 64 raster positions (``orientation.middle_block``, the
same on every process): the pixels within INNER of the disk's radius are binned into about GROUPS square groups,
each a virtual image (patterns normalised to their total counts, the image to its mean). Each
image's shift against a reference is found to a small fraction of a scan step by Gauss-Newton on
c T(n - d) + b (T sampled by cubic convolution, as products of banded matrices, so no window or
wrap biases it; all groups at once), started from a cross-correlation's peak, then from the linear
fit; the reference is first the image of the group nearest the disk's centre, then the mean of all
images moved back (three rounds). No group's error is taken below ERROR_FLOOR of the median. The shifts,
turned into Å by the raster's step vectors, are fitted by s = s0 + M k, each group weighted by how
well its shift was measured. M is then scaled by the factor that fits the pixels' images in Fourier
space region by region (``overlap_focus``: the real-space shifts of a crystal come out short by a common
factor, a fifth on MoS2); the fit's scatter and the shifts' errors, the difference between the inner
and the outer pixels' scaled defocus and SYSTEMATIC of it give the uncertainty. M's antisymmetric part
is a rotation of the scan left unaccounted for (``rotation_left_deg``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ptyacc.data.bright_field import bright_field_radius_px, repaired
from ptyacc.data.orientation import middle_block
from ptyacc.data.overlap_focus import Scale, refined_scale
from ptyacc.errors import DataError

MIN_SIDE = 16  # raster positions per side below which the parallax is not measured
MAX_SHIFT_SHARE = 1 / 3  # of the raster's side: the largest shift whose images still overlap enough to trust
INNER = 0.8  # groups from the pixels within this share of the disk's radius
GROUPS = 48  # about this many groups of pixels
ROUNDS = 3  # reference rebuilt from the aligned images this many times
MIN_GROUPS = 8
ERROR_FLOOR = 0.1  # of the median error: the least a shift's error is taken to be (the reference group, matched
# against itself in the first round, would otherwise outweigh every other)
MAX_REL_ERROR = 0.1  # the defocus trusted when its uncertainty is at most this share of it
MIN_EDGE_PHASE = 1.2  # rad: the defocus's phase at the disk's edge, pi defocus alpha^2 / lambda, below which the
# parallax is not trusted (the independent simulator, 80 kV, 25 mrad, 3e4 counts: within 2 % from 30 Å, 1.4 rad;
# 20 Å, 0.9 rad, read 18.9-19.8 Å; 10 Å found no scale in the Fourier regions)
SYSTEMATIC = 0.03  # share of |defocus| added to its and C12's errors: the spread between samples on the simulator
MAX_MISFIT = 0.5  # the shifts' rms misfit to the linear model, as a share of their rms, beyond which it is not trusted


@dataclass(frozen=True)
class Parallax:
    """What the parallax measured: ``defocus_A`` (= -C10, positive underfocus) with its standard
    error ``defocus_error_A``; ``c12a_A``, ``c12b_A`` (Krivanek, Å) with ``c12_error_A``;
    ``rotation_left_deg`` the scan rotation M's antisymmetric part says is left (0 when the scan
    rotation is right); per group ``k_invA`` (G, 2) and ``shifts_A`` (G, 2) the measured shifts
    (y, x) with ``errors_A`` (G,) and ``used`` (G,) bool; ``image`` (ny, nx) the tilt-corrected
    bright-field image on the raster block (NaN where no image covers it); ``misfit`` the shifts'
    rms distance from the fit over their rms; ``reliable`` and ``reason`` whether to use it."""

    defocus_A: float
    defocus_error_A: float
    c12a_A: float
    c12b_A: float
    c12_error_A: float
    rotation_left_deg: float
    k_invA: np.ndarray
    shifts_A: np.ndarray
    errors_A: np.ndarray
    used: np.ndarray
    image: np.ndarray
    misfit: float
    positions: int
    reliable: bool
    reason: str = ""
    halves_A: tuple[float, float] = (math.nan, math.nan)
    fit_A: np.ndarray | None = None  # (2, 3) per axis (y, x): [s0, M[:, 0], M[:, 1]], Å and Å per 1/Å
    fit_covariance: np.ndarray | None = None  # (4, 4) M's, row-major (M[0, 0], M[0, 1], M[1, 0], M[1, 1])

    def summary(self) -> str:
        return (f"defocus {self.defocus_A:.1f} +- {self.defocus_error_A:.1f} A (inner and outer pixels "
                f"{self.halves_A[0]:.1f}, {self.halves_A[1]:.1f}), C12a {self.c12a_A:+.1f} C12b "
                f"{self.c12b_A:+.1f} (+- {self.c12_error_A:.1f}) A, scan rotation left {self.rotation_left_deg:+.2f} "
                f"deg, {int(self.used.sum())} pixel groups, misfit {self.misfit:.2f}, {self.positions} positions")


class NoParallax(Exception):
    """The data cannot tell the defocus (the reason in the message)."""


def cubic_weights(t: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution weights (a = -1/2) (..., 4) of the samples at -1, 0, 1, 2 for points
    t (...) in [0, 1)."""
    a = -0.5
    d = np.stack([1 + t, t, 1 - t, 2 - t], axis=-1)
    near = (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
    far = a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a
    return np.where(d <= 1, near, far)


def cubic_matrices(d: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(..., n, n) matrices A with (A @ v)[i] = v sampled at i - d (...) by cubic convolution, and
    (..., n) whether row i's samples (those of nonzero weight) all lie inside 0 .. n - 1."""
    start = np.floor(-d)
    weights = cubic_weights(-d - start)  # (..., 4)
    lead = d.shape
    matrices = np.zeros((int(np.prod(lead)), n, n))
    inside = np.ones((int(np.prod(lead)), n), dtype=bool)
    rows = np.arange(n)
    which = np.arange(len(matrices))[:, None]
    for tap in range(4):
        columns = rows + (start.reshape(-1, 1) + tap - 1).astype(np.int64)  # (L, n)
        weight = weights.reshape(-1, 4)[:, tap, None]
        within = (columns >= 0) & (columns < n)
        inside &= within | (weight == 0)
        matrices[which, rows, np.clip(columns, 0, n - 1)] += np.where(within, weight, 0.0)
    return matrices.reshape(lead + (n, n)), inside.reshape(lead + (n,))


def shifted(images: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Images (..., ny, nx) sampled at (i - d[..., 0], j - d[..., 1]) by cubic convolution: each
    image moved by its d (..., 2) (raster steps; the leading dimensions broadcast); NaN where the
    samples would leave the image or meet its NaN, and for a NaN d."""
    d = np.asarray(d, dtype=np.float64)
    images = np.asarray(images, dtype=np.float64)
    lost = ~np.isfinite(d).all(-1)
    d = np.where(lost[..., None], 0.0, d)
    (rows, rows_in), (columns, columns_in) = (cubic_matrices(d[..., axis], images.shape[axis - 2]) for axis in (0, 1))
    known = np.isfinite(images)
    out = rows @ np.where(known, images, 0.0) @ np.swapaxes(columns, -1, -2)
    valid = rows_in[..., :, None] & columns_in[..., None, :] & ~lost[..., None, None]
    if not known.all():  # the samples that meet a NaN
        reach = (rows != 0).astype(np.float32) @ (~known).astype(np.float32) @ np.swapaxes(columns != 0, -1, -2)
        valid = valid & (reach == 0)
    return np.where(valid, out, np.nan)


def aligned_shifts(images: np.ndarray, reference: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shifts d (G, 2) raster steps with ``images`` (G, ny, nx) ~ c reference(n - d) + b, each
    by Gauss-Newton from its ``start`` (G, 2), all groups at once, and their covariances (G, 2, 2);
    NaN where it fails."""
    template = np.stack([reference, *np.gradient(reference)])  # (3, ny, nx)
    d = np.array(start, dtype=np.float64)
    covariance = np.full((len(d), 2, 2), np.nan)
    active = np.isfinite(d).all(1)
    for _ in range(8):
        if not active.any():
            break
        rows = np.nonzero(active)[0]
        t, gy, gx = shifted(template, d[rows, None, :]).transpose(1, 0, 2, 3)  # each (g, ny, nx)
        valid = np.isfinite(t) & np.isfinite(gy) & np.isfinite(gx)
        design = np.where(valid[..., None], np.stack([t, np.ones_like(t), -gy, -gx], axis=-1), 0.0)
        design = design.reshape(len(rows), -1, 4)  # (g, pixels, 4)
        target = np.where(valid, images[rows], 0.0).reshape(len(rows), -1)
        inverse = np.linalg.pinv(np.swapaxes(design, 1, 2) @ design)
        solution = (inverse @ (np.swapaxes(design, 1, 2) @ target[..., None]))[..., 0]  # (g, 4)
        c, count = solution[:, 0], valid.sum(axis=(1, 2))
        residual = target - (design @ solution[..., None])[..., 0]
        noise = (residual ** 2).sum(1) / np.maximum(count - 4, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.clip(solution[:, 2:] / c[:, None], -1.0, 1.0)
            covariance[rows] = inverse[:, 2:, 2:] * (noise / c ** 2)[:, None, None]
        failed = (count < 16) | ~(c > 0)
        d[rows] = np.where(failed[:, None], np.nan, d[rows] + step)
        covariance[rows[failed]] = np.nan
        active[rows] = ~failed & (np.abs(step).max(1) >= 1e-3)
    return d, covariance


def correlation_peaks(images: np.ndarray, reference: np.ndarray, max_shift: float) -> np.ndarray:
    """The integer shifts d (G, 2) with images[g](n) ~ reference(n - d), |d| <= max_shift, from the
    peaks of their cross-correlations (all zero-mean, Hann-windowed, zero-padded)."""
    ny, nx = reference.shape
    window = np.hanning(ny)[:, None] * np.hanning(nx)[None, :]
    a = np.nan_to_num(images - np.nanmean(images, axis=(1, 2), keepdims=True)) * window
    b = np.nan_to_num(reference - np.nanmean(reference)) * window
    size = (2 * ny, 2 * nx)
    xc = np.fft.irfft2(np.fft.rfft2(a, size) * np.conj(np.fft.rfft2(b, size)), size)
    dy = np.fft.fftfreq(size[0]) * size[0]
    dx = np.fft.fftfreq(size[1]) * size[1]
    xc[:, np.hypot(dy[:, None], dx[None, :]) > max_shift] = -np.inf
    i, j = np.unravel_index(np.argmax(xc.reshape(len(xc), -1), axis=1), size)
    return np.column_stack([dy[i], dx[j]])


def disk_centre(mean: np.ndarray) -> np.ndarray:
    """The centroid (y, x) px of the bright-field disk of a centred mean pattern, its level clipped at the
    disk's median so that the dark field and a few bright pixels do not pull it."""
    level = np.clip(mean / np.median(mean[mean > 0.5 * mean.max()]), 0.0, 1.0)
    y, x = np.indices(mean.shape)
    return np.array([(level * y).sum(), (level * x).sum()]) / level.sum()


def pixel_groups(mean: np.ndarray, radius_px: float, good: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Groups of the pixels of centred (K, K) patterns within INNER of the disk of ``radius_px``
    about the ``mean`` pattern's disk centroid: (G, K*K) membership (0/1) and (G, 2) their
    intensity-weighted mean position (y, x) in px from that centre."""
    k = mean.shape[-1]
    y, x = np.indices(mean.shape)
    centre = disk_centre(mean)
    width = max(1, round(INNER * radius_px * math.sqrt(math.pi / GROUPS)))
    inside = np.hypot(y - centre[0], x - centre[1]) <= INNER * radius_px
    if good is not None:
        inside &= good
    tiles = np.floor((y - centre[0]) / width + 0.5).astype(int) * (2 * k) + np.floor((x - centre[1]) / width + 0.5).astype(int)
    members, places = [], []
    for tile in np.unique(tiles[inside]):
        pick = inside & (tiles == tile)
        if pick.sum() < max(1, width * width // 2):
            continue
        members.append(pick.ravel())
        w = mean[pick]
        places.append([(w * y[pick]).sum() / w.sum() - centre[0], (w * x[pick]).sum() / w.sum() - centre[1]])
    if not members:
        return np.zeros((0, k * k)), np.zeros((0, 2))
    return np.array(members, dtype=np.float64), np.array(places)


def virtual_images(patterns: np.ndarray, membership: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """(G, ny, nx) virtual bright-field images of centred patterns (n, K, K), each pattern divided by
    its total counts, each image by its mean, less 1."""
    flat = patterns.reshape(len(patterns), -1)
    totals = np.maximum(flat.sum(1, dtype=np.float64), 1e-30)
    inside = membership.any(0)  # only the pixels of a group are read
    images = (flat[:, inside].astype(np.float64) @ membership[:, inside].T / totals[:, None]).T.reshape(
        len(membership), *shape)
    return images / np.maximum(images.mean(axis=(1, 2), keepdims=True), 1e-30) - 1.0


def fit_shifts(k_invA: np.ndarray, shifts_A: np.ndarray, errors_A: np.ndarray, used: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The weighted least-squares fit s = s0 + M k of the used groups: (s0 (2,), M (2, 2),
    M's covariance (4, 4) in row-major order, the weighted rms misfit over the shifts' rms)."""
    k, s, w = k_invA[used], shifts_A[used], 1.0 / errors_A[used] ** 2
    design = np.column_stack([np.ones(len(k)), k])
    normal = np.linalg.pinv(design.T @ (design * w[:, None]))
    solution = normal @ (design.T @ (s * w[:, None]))  # (3, 2): rows 1, ky, kx; columns y, x
    residual = s - design @ solution
    chi2 = float((w[:, None] * residual ** 2).sum() / max(2 * len(k) - 6, 1))
    scale = max(chi2, 1.0)
    cov = np.zeros((4, 4))
    cov[:2, :2] = normal[1:, 1:] * scale  # M[0, :] (the y shift against ky, kx)
    cov[2:, 2:] = normal[1:, 1:] * scale
    spread = s - np.average(s, axis=0, weights=w)
    misfit = math.sqrt((w[:, None] * residual ** 2).sum() / max((w[:, None] * spread ** 2).sum(), 1e-30))
    return solution[0], solution[1:].T, cov, misfit


def measure(patterns: np.ndarray, scan_shape: tuple[int, int], steps_A: np.ndarray, wavelength_A: float,
            dk_invA: float, good: np.ndarray | None = None, zero_at_centre: bool = False) -> Parallax:
    """The parallax of (ny * nx, K, K) patterns (zero frequency at [0, 0], ptyacc's prepared layout; at
    [K // 2, K // 2], as stored, with ``zero_at_centre``) on a raster ``scan_shape`` (row-major, rows the slow
    axis) whose step vectors are the columns of ``steps_A`` (2, 2) (rows y, x in Å); ``good`` (K, K) the
    detector mask in the same layout. Raises NoParallax when the data cannot tell."""
    ny, nx = scan_shape
    if min(ny, nx) < MIN_SIDE:
        raise NoParallax(f"a raster of at least {MIN_SIDE} x {MIN_SIDE} positions is needed, found {ny} x {nx}")
    # centred patterns are taken as they are: a copy of 64 x 64 patterns of 64 x 64 px is 64 MiB (a load in disk
    # mode holds little else)
    centred = patterns if zero_at_centre else np.fft.fftshift(patterns, axes=(-2, -1))
    del patterns  # a caller that read them for this alone holds no other reference: one copy held, not two
    centred_good = None if good is None else (np.asarray(good, dtype=bool) if zero_at_centre
                                              else np.fft.fftshift(np.asarray(good, dtype=bool)))
    mean = repaired(centred.mean(0, dtype=np.float64))
    try:
        radius = bright_field_radius_px(mean, "the patterns")
    except DataError as exc:
        raise NoParallax(str(exc).split(";")[0]) from None
    membership, places = pixel_groups(mean, radius, centred_good)
    if len(membership) < MIN_GROUPS:
        raise NoParallax(f"only {len(membership)} groups of pixels inside the bright-field disk")
    images = virtual_images(centred, membership, (ny, nx))
    k_invA = places * dk_invA
    to_steps = np.linalg.inv(steps_A)
    reference = images[int(np.argmin(np.hypot(*places.T)))]
    d = correlation_peaks(images, reference, 0.45 * min(ny, nx))
    for round_ in range(ROUNDS + 1):
        d, covariances = aligned_shifts(images, reference, d)
        shifts_A = d @ steps_A.T
        errors_A = np.sqrt(np.abs(np.einsum("ij,gjk,ik->g", steps_A, covariances, steps_A)) / 2)
        used = np.isfinite(errors_A) & np.isfinite(shifts_A).all(1) & (errors_A > 0)
        if used.sum() < MIN_GROUPS:
            raise NoParallax(f"the shifts of only {int(used.sum())} pixel groups could be measured")
        errors_A = np.maximum(errors_A, ERROR_FLOOR * np.median(errors_A[used]))
        used &= errors_A < 10 * np.median(errors_A[used])
        s0, m, cov, misfit = fit_shifts(k_invA, shifts_A, errors_A, used)
        offset = s0 @ to_steps.T
        if round_ < ROUNDS:
            predicted = (s0 + k_invA @ m.T) @ to_steps.T
            reference = aligned_mean(images, d - offset, used)
            d = np.where(np.isfinite(d) & (np.abs(d - predicted) < 1.0), d, predicted) - offset
    image = aligned_mean(images, d - offset, used, reach=0.25)
    fitted = refined_scale(centred, (ny, nx), steps_A, m, dk_invA, disk_centre(mean), radius, centred_good)
    if fitted.found:
        halves = [defocus_of(m * part, wavelength_A) for part in (fitted.inner, fitted.outer)]
        m, cov = m * fitted.scale, cov * fitted.scale ** 2
    else:
        radial = np.hypot(*k_invA.T)
        inner = used & (radial <= np.median(radial[used]))
        halves = [defocus_of(fit_shifts(k_invA, shifts_A, errors_A, part)[1], wavelength_A)
                  for part in (inner, used & ~inner)]
    overlap = float(np.abs(d[used] - offset).max()) / min(ny, nx)
    return result(s0, m, cov, misfit, wavelength_A, k_invA, shifts_A, errors_A, used, image, (ny, nx), halves,
                  radius * dk_invA * wavelength_A, overlap, fitted)


def aligned_mean(images: np.ndarray, d: np.ndarray, used: np.ndarray, reach: float = 0.5) -> np.ndarray:
    """The mean of the used images moved back by their shifts d (G, 2), each to unit variance;
    NaN where fewer than ``reach`` of them reach (the reference: half, so that its every pixel is
    averaged over many; the image shown: a quarter)."""
    chosen = images[used]
    back = shifted(chosen / np.maximum(chosen.std(axis=(1, 2), keepdims=True), 1e-30), -d[used])
    seen = np.isfinite(back)
    total, count = np.where(seen, back, 0.0).sum(0), seen.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count >= reach * used.sum(), total / count, np.nan)


def defocus_of(m: np.ndarray, wavelength_A: float) -> float:
    """The defocus (Å) of the fitted M (2, 2): its part a I + b J (J antisymmetric) is lambda defocus
    R(phi) for a scan turned by phi from the one assumed, so defocus = sign(a) |(a, b)| / lambda,
    whatever rotation is left."""
    a, b = (m[0, 0] + m[1, 1]) / 2, (m[1, 0] - m[0, 1]) / 2
    return float(math.copysign(math.hypot(a, b), a) / wavelength_A)


def result(s0: np.ndarray, m: np.ndarray, cov: np.ndarray, misfit: float, wavelength_A: float, k_invA, shifts_A, errors_A, used,
           image, shape: tuple[int, int], halves: list[float], semiangle_rad: float, overlap: float,
           fitted: Scale) -> Parallax:
    """The Parallax of the fitted s0 (2,), M (2, 2) and M's covariance (4, 4), judged; ``halves`` the
    defocus fitted to the inner and the outer half of the groups, whose difference (the model's
    failure towards the disk's edge) and SYSTEMATIC of the defocus are added to the statistical
    error; ``semiangle_rad`` the disk's; ``overlap`` the largest shift as a share of the raster's side;
    ``fitted`` the Fourier regions' scale of M (``overlap_focus``)."""
    defocus = defocus_of(m, wavelength_A)
    statistical = math.sqrt(max(cov[0, 0] + cov[3, 3], 0.0)) / (2 * wavelength_A)
    defocus_error = math.hypot(statistical, (halves[0] - halves[1]) / 2, SYSTEMATIC * defocus)
    c12a = (m[0, 0] - m[1, 1]) / (2 * wavelength_A)
    c12b = -(m[0, 1] + m[1, 0]) / (2 * wavelength_A)
    c12_error = defocus_error
    rotation_left = math.degrees(math.atan((m[1, 0] - m[0, 1]) / (m[0, 0] + m[1, 1]))) if m[0, 0] + m[1, 1] else 0.0
    reason = ""
    if not fitted.found:
        reason = (f"the Fourier regions fit the shifts best at {fitted.scale:.2f} of their size, the end of the range "
                  "searched: no defocus fits the pixels' images")
    elif misfit > MAX_MISFIT:
        reason = (f"the pixel groups' shifts do not follow one defocus (misfit {misfit:.2f} of their spread): a thick "
                  "or strongly scattering sample, or too little contrast")
    elif overlap > MAX_SHIFT_SHARE:
        reason = (f"the largest shift is {overlap:.2f} of the {shape[0]} x {shape[1]} raster's side (over "
                  f"{MAX_SHIFT_SHARE:.2f}): too little overlap between the images for this defocus")
    elif math.pi * abs(defocus) * semiangle_rad ** 2 / wavelength_A < MIN_EDGE_PHASE:
        reason = (f"the defocus is too small for the parallax to measure well (its phase at the disk's edge "
                  f"{math.pi * abs(defocus) * semiangle_rad ** 2 / wavelength_A:.2g} rad, below {MIN_EDGE_PHASE:g})")
    elif defocus_error > MAX_REL_ERROR * abs(defocus):
        reason = f"the defocus is uncertain by {defocus_error:.3g} A"
    return Parallax(float(defocus), float(defocus_error), float(c12a), float(c12b), float(c12_error),
                    float(rotation_left), k_invA, shifts_A, errors_A, used, image, float(misfit), shape[0] * shape[1],
                    reliable=not reason, reason=reason, halves_A=tuple(halves),
                    fit_A=np.column_stack([s0, m]), fit_covariance=cov)


def measure_parallax(source, scan_shape: tuple[int, int], steps_A: np.ndarray, wavelength_A: float, dk_invA: float,
                     prepare, good: np.ndarray | None) -> tuple[Parallax | None, str, float]:
    """The parallax of the middle block of up to 64 x 64 positions (``middle_block``) of the pattern file
    ``source`` (a ``readers.PatternFile``, prepared by ``prepare``; ``good`` its prepared mask):
    (the Parallax or None, why it is not to be used ("" if it is), seconds taken)."""
    started = time.perf_counter()
    rows, shape = middle_block(tuple(scan_shape))
    try:
        found = measure(source.read(rows, prepare).patterns, shape, steps_A, wavelength_A, dk_invA, good)
    except NoParallax as exc:
        return None, str(exc), time.perf_counter() - started
    return found, found.reason, time.perf_counter() - started


def stored_parallax(source, scan_shape: tuple[int, int], steps_A: np.ndarray, wavelength_A: float, dk_invA: float,
                    flags: tuple[bool, bool, bool], good: np.ndarray | None, background: np.ndarray | None
                    ) -> Parallax | None:
    """The parallax of the stored patterns (centred, pixels of ``dk_invA``) turned by the
    transpose/flip ``flags`` as ``data.transform`` would, less ``background``, ``good`` the stored
    detector mask; None where it cannot be told. Settles the orientation before the patterns are
    prepared: patterns turned by 180 degrees reverse the defocus's sign."""
    rows, shape = middle_block(tuple(scan_shape))
    subtract = None if background is None else (lambda chunk: chunk - background)
    patterns = source.read(rows, subtract).patterns
    mask = None if good is None else np.asarray(good, dtype=bool)
    if flags[0]:
        patterns, mask = np.swapaxes(patterns, -1, -2), None if mask is None else mask.T
    if flags[1]:
        patterns, mask = patterns[..., ::-1, :], None if mask is None else mask[::-1]
    if flags[2]:
        patterns, mask = patterns[..., ::-1], None if mask is None else mask[:, ::-1]
    try:
        found = measure(patterns, shape, steps_A, wavelength_A, dk_invA, mask, zero_at_centre=True)
    except NoParallax:
        return None
    return found if found.reliable else None
