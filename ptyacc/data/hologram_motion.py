"""How the stored patterns move with the scan: near-field holograms travel with the sample, far-field patterns do not.

In the near field (Fresnel scaling, ``sampling.py``) a feature of the sample shows on the detector magnified: moved by
d at the sample, its hologram moves by d / dx detector pixels, with dx = p / M the object pixel. ptyacc's model
puts the window of probe i at r_i (object pixels; ``positions.turned_positions_A`` turns a scan by
``R(theta)``, ``orientation.rotation``), so in the prepared patterns the sample's features move by -(r_j - r_i): the
stored patterns by F^T of that, with F the transpose and flips of ``data.transform`` (``orientation.flag_matrix``).
Registering each pattern with its nearest neighbours (the patterns divided by their mean, which holds what
does not move: the beam's own structure, the flat field) and fitting the shifts against the positions' differences
gives the 2 x 2 map A (stored pixels per Å of position). Then

- the patterns move at all (``HologramMotion.moves``): a far-field pattern does not travel with the scan, so a
  file whose patterns do is near field (``ptyacc init``; a far-field run of such a file warns);
- the object pixel: dx = 1 / sqrt(|det A|), so the magnification M = p / dx and the focus-to-sample distance
  z1 = z2 / (M - 1) (``experiment.focus_to_sample_m: auto``, and the check of a given one);
- the detector against the stage: -dx F A = R(theta) for the flags F and rotation theta of the read-out,
  handedness included (``data.transform.orientation: auto``, ``experiment.scan_rotation_deg: auto``, and the check of
  the file's basis vectors); the two axes' scales differ where the focus is astigmatic (a KB mirror pair's two foci)
  or the stage's axes are calibrated differently (``anisotropy``).

Registration (``motion_from_patterns``): the patterns (binned first where wider than MAX_SIDE) divided by their mean
and each pixel by its spread; each pair's candidate shifts by phase correlation of Hann-windowed patterns at the
tapers of TAPERS, the peak refined to a fraction of a pixel by a parabola on each axis (``candidate_shifts``); the map
that most pairs agree with, from two-pair trials (``consensus``: a structured beam's speckle sends most registrations
astray on some holograms); each pair registered again from that map's shift (``guided_shifts``); then a robust fit:
pairs whose shift lies more than ``OUTLIER`` times the median residual (at least a pixel) from the fit are left out
and the fit repeated (``motion_fit``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ptyacc.data.orientation import equivalent_orientations, flag_matrix, nearest_orientation, wrapped_deg
from ptyacc.errors import DataError

MAX_POINTS = 160  # patterns registered: the scan's middle ones
NEIGHBOURS = 3  # each registered with this many of its nearest
MIN_MOTION_POSITIONS = 8  # positions the motion is measured from, at least
MAX_SIDE = 256  # patterns binned to at most this many pixels across for the registration
OUTLIER = 3.0
TAPERS = (0.15, 0.05)  # the phase correlation's Gaussian tapers, cycles per pixel: fine detail, then the coarse (a
# structured beam's speckle hides an object's fine detail on some holograms and its coarse on others)
REFINE = 2  # the registrations from the consensus's shift, each of pattern j moved back by the shift so far
CONSENSUS_TRIALS = 400
INLIER_PX, INLIER_SHARE = 1.5, 0.05  # a pair agrees with a map within the larger of these (pixels, share of the motion)
MOVES_PX = 3.0  # the fit's median motion between neighbours, in pixels, from which the patterns move with the scan
FIT_SHARE = 0.35  # and the fit's residual under this share of that motion (far-field patterns: a noisy fit of none;
# on 16 independently simulated far-field files it read 0.7-1.3 where the fit moved them 2.6 px or more, on 13
# near-field files 0.02-0.16)
KEPT_SHARE = 0.5  # and at least this share of the pairs kept

Flags = tuple[bool, bool, bool]


@dataclass(frozen=True)
class HologramMotion:
    """The fit of the stored patterns' shifts against the positions' differences: ``matrix`` (2, 2) maps a position
    difference (y, x) in Å to the stored patterns' shift (rows, columns) in stored pixels; ``pairs`` registered,
    ``kept`` in the fit, its ``residual_px`` (rms) and the median motion ``step_px`` it predicts between
    neighbours; ``bin``, the binning the registration read the patterns at (the matrix is in stored pixels)."""

    matrix: np.ndarray
    pairs: int
    kept: int
    residual_px: float
    step_px: float
    bin: int = 1

    @property
    def moves(self) -> bool:
        """The patterns travel with the scan, as near-field holograms do."""
        return (self.step_px >= MOVES_PX and self.residual_px <= FIT_SHARE * self.step_px
                and self.kept >= KEPT_SHARE * self.pairs)

    @property
    def dx_A(self) -> float:
        """The object pixel (Å) the motion says: the stored pixel at the sample."""
        determinant = abs(float(np.linalg.det(self.matrix)))
        return 1.0 / math.sqrt(determinant) if determinant > 0 else math.inf

    @property
    def anisotropy(self) -> float:
        """The ratio of the map's two scales less 1: 0 where both axes magnify alike."""
        values = np.linalg.svd(self.matrix, compute_uv=False)
        return float(values[0] / values[1] - 1.0)

    def turn(self) -> np.ndarray:
        """The nearest turn or mirror (orthogonal) to -dx A: R(theta) = F turn for the read-out's flags F."""
        u, _, vt = np.linalg.svd(-self.matrix)
        return u @ vt

    def orientation(self, near_deg: float = 0.0, fixed: Flags | None = None) -> tuple[Flags, float]:
        """The flags and rotation (deg) of the read-out: the pair of the motion's turn whose rotation lies nearest
        ``near_deg``; with ``fixed`` flags, the rotation those flags leave (its mirror shows in ``mirrored``)."""
        if fixed is not None:
            rot = flag_matrix(*fixed) @ self.turn()
            return fixed, math.degrees(math.atan2(rot[0, 1], rot[0, 0]))
        return nearest_orientation(equivalent_orientations(self.turn()), near_deg)

    def mirrored(self, flags: Flags) -> bool:
        """``flags`` read the detector in the mirror image of the motion's."""
        return bool(np.linalg.det(flag_matrix(*flags) @ self.turn()) < 0)

    def magnification(self, pixel_m: float) -> float:
        return pixel_m * 1e10 / self.dx_A

    def focus_to_sample_m(self, distance_m: float, pixel_m: float) -> float | None:
        """z1 = z2 / (M - 1) for the detector at ``distance_m`` with pixels of ``pixel_m``; None where the motion
        magnifies by 1 or less (no cone beam)."""
        magnification = self.magnification(pixel_m)
        return distance_m / (magnification - 1.0) if 1.0 < magnification < math.inf else None

    def line(self, where: str, seconds: float) -> str:
        """run.log's line."""
        if not self.moves:
            return (f"hologram motion ({where}): the patterns do not travel with the scan (a fit of {self.step_px:.2f} "
                    f"px between neighbours, residual {self.residual_px:.2f} px, {self.kept} of {self.pairs} pairs) "
                    f"({seconds:.1f} s)")
        return (f"hologram motion ({where}): {self.step_px:.1f} px between neighbours, residual {self.residual_px:.2f} "
                f"px over {self.kept} of {self.pairs} pairs: object pixel {self.dx_A:.4g} A ({seconds:.1f} s)")


def binned(patterns: np.ndarray, factor: int) -> np.ndarray:
    """(N, ky, kx) summed over ``factor`` x ``factor`` blocks (the edge that does not fill one left out)."""
    if factor == 1:
        return patterns
    n, ky, kx = patterns.shape
    ky, kx = ky // factor * factor, kx // factor * factor
    return patterns[:, :ky, :kx].reshape(n, ky // factor, factor, kx // factor, factor).sum((2, 4))


def nearest_pairs(positions_A: np.ndarray, count: int = NEIGHBOURS) -> np.ndarray:
    """(P, 2) index pairs (i, j), i < j, of each position with its ``count`` nearest others."""
    distance = np.linalg.norm(positions_A[:, None] - positions_A[None], axis=-1)
    np.fill_diagonal(distance, np.inf)
    nearest = np.argsort(distance, axis=1)[:, :count]
    pairs = {(min(i, int(j)), max(i, int(j))) for i, row in enumerate(nearest) for j in row}
    return np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)


def _peak(correlation: np.ndarray) -> np.ndarray:
    """The (rows, columns) shift of ``correlation``'s peak, to a fraction of a pixel (a parabola on each axis)."""
    ky, kx = correlation.shape
    i, j = np.unravel_index(int(np.argmax(correlation)), correlation.shape)
    shift = []
    for axis, (centre, size) in enumerate(((i, ky), (j, kx))):
        before = correlation[(i - 1) % ky, j] if axis == 0 else correlation[i, (j - 1) % kx]
        after = correlation[(i + 1) % ky, j] if axis == 0 else correlation[i, (j + 1) % kx]
        middle = correlation[i, j]
        curvature = before - 2 * middle + after
        fraction = 0.5 * (before - after) / curvature if curvature < 0 else 0.0
        shift.append((centre + fraction + size // 2) % size - size // 2)
    return np.array(shift)


def flattened(patterns: np.ndarray, good: np.ndarray | None = None) -> np.ndarray:
    """What moves in ``patterns`` (N, ky, kx): each divided by the mean pattern (bad pixels, ``good`` False, and dark
    ones set to it), less 1, divided by each pixel's spread over the patterns (a structured beam's bright and dark
    speckles weigh alike), less its mean."""
    mean = patterns.mean(0, dtype=np.float64)
    usable = mean > 1e-3 * max(float(mean.max()), 1e-30)
    if good is not None:
        usable &= good
    flat = np.where(usable, patterns / np.where(usable, mean, 1.0), 1.0) - 1.0
    spread = flat.std(0)
    flat = np.where(spread > 0, flat / np.where(spread > 0, spread, 1.0), 0.0)
    return flat - flat.mean(axis=(1, 2), keepdims=True)


def _frequencies(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    return np.meshgrid(np.fft.fftfreq(shape[0]), np.fft.fftfreq(shape[1]), indexing="ij")


def _correlated(moved: np.ndarray, fixed: np.ndarray, taper: np.ndarray) -> np.ndarray:
    """The shift of ``moved`` against ``fixed`` (both spectra) by phase correlation, ``taper`` applied."""
    cross = moved * np.conj(fixed)
    return _peak(np.fft.ifft2(cross / (np.abs(cross) + 1e-12) * taper).real)


def candidate_shifts(flat: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """(P, len(TAPERS), 2) shifts (rows, columns) of pattern j against pattern i for each pair (i, j) of ``flat``
    (``flattened``), one per taper of TAPERS: Hann-windowed, phase-correlated."""
    fy, fx = _frequencies(flat.shape[1:])
    tapers = [np.exp(-0.5 * (fy ** 2 + fx ** 2) / width ** 2) for width in TAPERS]
    spectra = np.fft.fft2(flat * np.outer(np.hanning(flat.shape[1]), np.hanning(flat.shape[2])))
    return np.array([[_correlated(spectra[j], spectra[i], taper) for taper in tapers] for i, j in pairs])


def guided_shifts(flat: np.ndarray, pairs: np.ndarray, guess: np.ndarray, width: float = TAPERS[0]) -> np.ndarray:
    """(P, 2) shifts of pattern j against pattern i for each pair, from ``guess`` (P, 2): REFINE times pattern j
    moved back by the shift so far (zero-padded: what leaves the detector does not come back on the other side) and
    the rest measured (the correlation tapered at ``width`` cycles per pixel). A window that stays put pulls a
    shift towards zero, less the nearer the patterns lie."""
    n, ky, kx = flat.shape
    fy, fx = _frequencies((2 * ky, 2 * kx))
    small = _frequencies((ky, kx))
    taper = np.exp(-0.5 * (small[0] ** 2 + small[1] ** 2) / width ** 2)
    window = np.outer(np.hanning(ky), np.hanning(kx))
    padded = np.zeros((2 * ky, 2 * kx))
    found = np.array(guess, dtype=np.float64)
    for k, (i, j) in enumerate(pairs):
        padded[:ky, :kx] = flat[j]
        whole = np.fft.fft2(padded)
        fixed = np.fft.fft2(flat[i] * window)
        for _ in range(REFINE):
            back = np.fft.ifft2(whole * np.exp(2j * math.pi * (fy * found[k, 0] + fx * found[k, 1]))).real[:ky, :kx]
            found[k] += _correlated(np.fft.fft2(back * window), fixed, taper)
    return found


def consensus(differences_A: np.ndarray, candidates: np.ndarray, rng: np.random.Generator,
              trials: int = CONSENSUS_TRIALS) -> tuple[np.ndarray, int]:
    """The map (2, 2) that the most pairs agree with (within INLIER_PX, or INLIER_SHARE of the motion, where it moves
    them by twice INLIER_PX or more: the beam's own structure, which stays, agrees with no motion): each trial
    solves it from two pairs' candidate shifts (``candidate_shifts``), and a pair agrees through any of its
    candidates; with the index of the taper whose candidates agree most often. Registrations of a structured
    beam's holograms go astray on many pairs; the map they share does not."""
    count, tapers = candidates.shape[:2]
    best, best_score, best_taper = np.zeros((2, 2)), -1, 0
    for _ in range(trials):
        a, b = rng.choice(count, 2, replace=False)
        basis = differences_A[[a, b]]
        if abs(np.linalg.det(basis)) < 1e-6 * np.linalg.norm(basis[0]) * np.linalg.norm(basis[1]):
            continue
        ta, tb = rng.integers(tapers, size=2)
        matrix = np.linalg.solve(basis, np.stack([candidates[a, ta], candidates[b, tb]])).T
        predicted = differences_A @ matrix.T
        limit = np.maximum(INLIER_PX, INLIER_SHARE * np.linalg.norm(predicted, axis=1))[:, None]
        moving = np.linalg.norm(predicted, axis=1) >= 2 * INLIER_PX  # a map of no motion agrees with a still beam's
        agree = (np.linalg.norm(candidates - predicted[:, None], axis=2) < limit) & moving[:, None]
        score = int(agree.any(axis=1).sum())
        if score > best_score:
            best, best_score, best_taper = matrix, score, int(np.argmax(agree.sum(axis=0)))
    return best, best_taper


def motion_fit(differences_A: np.ndarray, shifts_px: np.ndarray, scale: float = 1.0) -> HologramMotion:
    """The robust linear fit of ``shifts_px`` (P, 2) against ``differences_A`` (P, 2) (module docstring), the
    shifts measured in pixels ``scale`` times the stored ones."""
    kept = np.ones(len(shifts_px), dtype=bool)
    matrix = np.zeros((2, 2))
    for _ in range(3):
        if kept.sum() < 3:
            break
        solution, *_ = np.linalg.lstsq(differences_A[kept], shifts_px[kept], rcond=None)
        matrix = solution.T
        residual = np.linalg.norm(differences_A @ matrix.T - shifts_px, axis=1)
        limit = max(OUTLIER * float(np.median(residual[kept])), 1.0)
        kept = residual <= limit
    residual = np.linalg.norm(differences_A @ matrix.T - shifts_px, axis=1)
    rms = float(np.sqrt(np.mean(residual[kept] ** 2))) if kept.any() else math.inf
    step = float(np.median(np.linalg.norm(differences_A @ matrix.T, axis=1)))
    return HologramMotion(matrix * scale, len(shifts_px), int(kept.sum()), rms * scale, step * scale, int(scale))


def motion_from_patterns(patterns: np.ndarray, positions_A: np.ndarray, good: np.ndarray | None = None
                         ) -> HologramMotion:
    """The motion of ``patterns`` (N, ky, kx, stored layout) taken at ``positions_A`` (N, 2) (module docstring):
    candidate shifts of each pair, the map most agree with, then each pair registered again from that map's shift,
    and the robust fit of those."""
    factor = max(1, math.ceil(max(patterns.shape[1:]) / MAX_SIDE))
    if factor > 1:
        good = None if good is None else binned(good[None].astype(np.float64), factor)[0] == factor * factor
        patterns = binned(patterns, factor)
    pairs = nearest_pairs(positions_A)
    differences = positions_A[pairs[:, 1]] - positions_A[pairs[:, 0]]
    flat = flattened(patterns.astype(np.float64), good)
    guess, taper = consensus(differences, candidate_shifts(flat, pairs), np.random.default_rng(0))
    return motion_fit(differences, guided_shifts(flat, pairs, differences @ guess.T, TAPERS[taper]), float(factor))


def middle_rows(positions_A: np.ndarray, count: int = MAX_POINTS) -> np.ndarray:
    """The rows of the ``count`` positions nearest the scan's centre, in order."""
    if len(positions_A) <= count:
        return np.arange(len(positions_A))
    distance = np.linalg.norm(positions_A - np.median(positions_A, axis=0), axis=1)
    return np.sort(np.argsort(distance)[:count])


def measure_motion(source, positions_A: np.ndarray, good: np.ndarray | None = None,
                   background: np.ndarray | None = None) -> tuple[HologramMotion, str]:
    """The motion of the stored patterns of ``source`` (a ``readers.PatternFile``) at ``positions_A`` (N, 2) Å, on the
    scan's middle MAX_POINTS, bad pixels (``good`` False) left out, less the dark frame ``background``; and run.log's
    line."""
    started = time.perf_counter()
    rows = middle_rows(positions_A)
    subtract = None if background is None else (lambda chunk: chunk - background)
    patterns = source.read(rows, subtract).patterns
    found = motion_from_patterns(np.asarray(patterns, dtype=np.float64), positions_A[rows], good)
    return found, found.line(str(source.path), time.perf_counter() - started)


def frame_off_deg(motion: HologramMotion, flags: Flags, rotation_deg: float) -> tuple[bool, float]:
    """How far the frame of ``flags`` and ``rotation_deg`` lies from the motion's: (mirrored, the turn between them
    in degrees, meaningful where not mirrored)."""
    if motion.mirrored(flags):
        return True, 0.0
    return False, wrapped_deg(motion.orientation(fixed=flags)[1] - rotation_deg, 360.0)


FOCUS_OFF = 0.05  # a given focus-to-sample distance whose object pixel lies this far (relative) from the motion's
TURN_OFF_DEG = 2.0  # a given scan rotation this far from the motion's (a turn of 2 degrees moves a window at 30 px
# from the scan's centre by a pixel)
ANISOTROPY_SAID = 0.03  # the axes' scales this far apart are said (one distance cannot magnify both)


@dataclass(frozen=True)
class NearFieldGeometry:
    """What the holograms' motion gives a near-field load: ``focus_to_sample_m`` (the given one or the measured),
    the transpose/flip ``flags`` and ``rotation_deg`` (measured, or as given), whether the flags and the focus were
    measured, and run.log's lines (the measurement's, then any warning)."""

    motion: HologramMotion | None  # None: too few positions to measure (nothing was asked of it)
    focus_to_sample_m: float
    flags: Flags
    rotation_deg: float
    flags_measured: bool
    focus_measured: bool
    lines: tuple[str, ...]
    rotation_measured: bool = False


def near_field_geometry(motion: HologramMotion, line: str, *, focus_to_sample_m: float | str, distance_m: float,
                        pixel_m: float, fixed: Flags | None, rotation_deg: float | str, where: str
                        ) -> NearFieldGeometry:
    """The near field's geometry from ``motion`` (``measure_motion``, whose run.log ``line`` it extends): the
    focus-to-sample distance where ``focus_to_sample_m`` is auto, else the given one checked; the flags where
    ``fixed`` is None (``data.transform.orientation: auto`` without basis vectors), else those checked; the scan
    rotation where ``rotation_deg`` is auto, else the given one checked. A DataError naming ``where`` where the
    patterns do not move and something must be measured."""
    measure = [key for key, asked in (("experiment.focus_to_sample_m", focus_to_sample_m == "auto"),
                                      ("data.transform.orientation", fixed is None),
                                      ("experiment.scan_rotation_deg", rotation_deg == "auto")) if asked]
    if not motion.moves and measure:
        raise DataError(f"{where}: {', '.join(measure)}: auto measures the near field from the holograms' motion, and "
                        f"the patterns do not travel with the scan ({motion.step_px:.2f} px between neighbours, residual "
                        f"{motion.residual_px:.2f} px): give them by hand, or check experiment.geometry (far-field "
                        "patterns do not move with the scan)")
    given_deg = 0.0 if rotation_deg == "auto" else float(rotation_deg)
    if not motion.moves:
        return NearFieldGeometry(motion, float(focus_to_sample_m), fixed, given_deg, False, False, (line, (
            "warning: the patterns do not travel with the scan as near-field holograms do (a fit of "
            f"{motion.step_px:.2f} px between neighbours, residual {motion.residual_px:.2f} px): check "
            "experiment.geometry (far-field data?) and the positions' units")))
    warnings = []
    magnification = motion.magnification(pixel_m)
    measured_m = motion.focus_to_sample_m(distance_m, pixel_m)
    said = f"; magnification {magnification:.4g}"
    if measured_m is not None:
        said += f", the sample {measured_m * 1e3:.4g} mm downstream of the focus"
    if focus_to_sample_m == "auto":
        if measured_m is None:
            raise DataError(f"{where}: experiment.focus_to_sample_m: auto: the holograms move as at a magnification of "
                            f"{magnification:.3g}, not more than 1 (the detector's distance {distance_m:g} m and pixel "
                            f"{pixel_m:g} m): check them, or give focus_to_sample_m")
        focus = measured_m
        said += " (experiment.focus_to_sample_m: auto)"
    else:
        focus = float(focus_to_sample_m)
        given_dx = pixel_m * 1e10 * focus / (focus + distance_m)
        off = given_dx / motion.dx_A - 1.0
        said += f"; experiment.focus_to_sample_m {focus * 1e3:.4g} mm gives a pixel {100 * off:+.1f} % from it"
        if abs(off) > FOCUS_OFF and measured_m is not None:
            warnings.append(f"warning: the holograms move as at experiment.focus_to_sample_m {measured_m * 1e3:.4g} mm "
                            f"(magnification {magnification:.4g}), not the {focus * 1e3:.4g} mm given: its object "
                            f"pixel is {100 * off:+.1f} % off, and the positions with it; set focus_to_sample_m: auto "
                            "(or check experiment.detector_distance_m and detector_pixel_m)")
    if motion.anisotropy > ANISOTROPY_SAID:
        said += (f"; the two axes magnify {100 * motion.anisotropy:.1f} % apart (an astigmatic focus, or the stage's axes "
                 "calibrated differently): one distance takes their mean")
    frame_wrong = False  # the flags given put the patterns in a mirror or a turn: said for them, not the rotation
    if fixed is None:
        flags, measured_deg = motion.orientation(given_deg)
        said += f"; transpose {flags[0]}, flip_y {flags[1]}, flip_x {flags[2]}, rotation {measured_deg:.2f} deg"
    else:
        flags, measured_deg = fixed, motion.orientation(fixed=fixed)[1]
        mirrored, off_deg = frame_off_deg(motion, fixed, given_deg)
        # measured, a turn of any size is the scan rotation's (a stage turned against the detector); given, one of 45
        # degrees or more is the flags'
        frame_wrong = mirrored or rotation_deg != "auto" and abs(off_deg) >= 45.0
        if frame_wrong:
            right, right_deg = motion.orientation(given_deg)
            warnings.append(f"warning: the holograms move {'in the mirror image of' if mirrored else 'turned by '}"
                            f"{'' if mirrored else f'{abs(off_deg):.0f} deg from'} the detector's transpose {fixed[0]}, "
                            f"flip_y {fixed[1]}, flip_x {fixed[2]} used (from the file's basis vectors or "
                            f"data.transform): they move as transpose {right[0]}, flip_y {right[1]}, flip_x {right[2]}, "
                            f"rotation {right_deg:.1f} deg; set data.transform.orientation: auto without the basis "
                            "vectors, or those flags by hand (orientation: manual)")
        said += f"; the flags used move as rotation {measured_deg:.2f} deg"
    off_deg = wrapped_deg(measured_deg - given_deg, 360.0)
    if rotation_deg != "auto" and not frame_wrong and abs(off_deg) > TURN_OFF_DEG:
        warnings.append(f"warning: the holograms move turned by {off_deg:+.1f} deg from "
                        f"experiment.scan_rotation_deg {given_deg:g}: set scan_rotation_deg: auto or {measured_deg:.1f}")
    rotation = measured_deg if rotation_deg == "auto" else given_deg
    return NearFieldGeometry(motion, focus, flags, rotation, fixed is None, focus_to_sample_m == "auto",
                             (line + said, *warnings), rotation_deg == "auto")
