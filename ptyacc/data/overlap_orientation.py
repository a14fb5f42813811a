"""The patterns' transpose/flip against the scan, the scan's rotation and the defocus, searched in
Fourier space (``data.transform.orientation: auto``, ``experiment.scan_rotation_deg: auto``,
``experiment.defocus_A: auto``), where the centre of mass is mostly noise and the real-space
parallax cannot align its pixel groups' images (few counts, or shifts large against the scan).

The bright-field pixel k (1/Å, stored detector frame, from the disk's centre) sees the sample moved by
s = M k with M = lambda defocus G, G = R(theta)^T F (``parallax_orientation.py``: the flags F and the
rotation theta of the nominal raster). At scan frequency u (1/Å, nominal raster) and pixel k the
image is then exp(-2 pi i u . M k) times a bracket that is constant over each of the three regions
of k where k - w, k + w or both lie in the disk, w = G^T u (``overlap_focus.py``; the disk is
round, so only w's length and direction against k matter). So the coherence

    J(G, c) = sum_u sum_regions |sum_{k in region} I(k, u) exp(2 pi i c w . k)|^2 / (pixels in the region),

c = lambda defocus, is largest at the true G and c, while the noise adds the same expected amount
to J at every (G, c): with many pixels and frequencies summed it tells the orientation from data
whose every single image is noise. The coarse search takes the images' plain transforms at their bins.
A crystal's lattice frequencies lie between the bins of a small raster, and a bin's phase then moves with
a pixel's shift at the frequency its power comes from, not at the bin's: taken at the bins, the rotation
came out a degree or more off on 15 of the calibration matrix's 32 files whose rotation the search gives
(median 1.0 degree). The fine search therefore takes the Hann-windowed transforms, each chosen frequency
moved to where its power comes from (``overlap_focus.reassigned``): 6 of 32 over a degree, median 0.4,
the defocus as before (median 0.98 of the truth).

J(G, c) = J(-G, -c), so the search takes c > 0 and G over both handednesses and all angles
(ANGLE_STEP_DEG, then FINE_STEP_DEG within FINE_SPAN_DEG of the best), c over SCALES times
lambda |nominal defocus|; the nominal defocus's sign then picks G or -G. The peak's ``contrast``
(its height over the median J of the search, against the best candidate at least APART_DEG away or
of the other handedness) says how clearly it stands out.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ptyacc.data.bright_field import bright_field_radius_px, repaired
from ptyacc.data.orientation import equivalent_orientations, nearest_orientation, rotation
from ptyacc.data.overlap_focus import MARGIN_PX, crest_offset, hann_windows, pixel_frequencies, windowed_at
from ptyacc.data.parallax import disk_centre
from ptyacc.errors import DataError

ANGLE_STEP_DEG = 3.0
FINE_STEP_DEG = 0.5
FINE_SPAN_DEG = 8.0  # the fine search's reach either side of the coarse peak (the coarse one's few pixels can miss by 5)
SCALES = np.exp(np.linspace(math.log(0.5), math.log(2.0), 29))  # of lambda |nominal defocus|: 5 % apart
FINE_SCALES = np.exp(np.linspace(-0.06, 0.06, 13))  # about the best: 1 % apart
COARSE_PIXELS, PIXELS = 192, 768  # disk pixels used (evenly picked) in the coarse and the fine search
COARSE_FREQUENCIES, FREQUENCIES = 80, 240  # scan frequencies of most power used
APART_DEG = 20.0  # a rival peak lies at least this far from the best (or has the other handedness)
CLEAR = 1.5  # the best peak's height over the median, against the rival's, above which the search decides
SWAP = np.array([[0.0, 1.0], [1.0, 0.0]])
JACKKNIFE_GROUPS = 8  # pixel groups left out in turn for the rotation's standard error
JACKKNIFE_SPAN_DEG, JACKKNIFE_STEP_DEG = 4.0, 0.25  # where and how finely each group's peak is found again


@dataclass(frozen=True)
class OverlapOrientation:
    """What the search found: the ``flags`` (transpose, flip_y, flip_x) and ``rotation_deg`` (nearest
    the one asked), ``defocus_A`` (the nominal one's sign), and ``contrast`` (the best peak over the
    median, against the best rival's; CLEAR or more decides)."""

    flags: tuple[bool, bool, bool]
    rotation_deg: float
    defocus_A: float
    contrast: float
    rivals: tuple[OverlapOrientation, ...] = ()  # the best peak of the other handedness and the best APART_DEG away
    # the rotation's standard error, computed when first asked (``rotation_error_deg``: eight more fine searches)
    error: Callable[[], float] | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def clear(self) -> bool:
        return self.contrast >= CLEAR

    @property
    def rotation_error_deg(self) -> float:
        """The rotation's standard error, degrees (nan where not computed)."""
        return self.error() if self.error is not None else math.nan

    def line(self) -> str:
        t, fy, fx = self.flags
        return (f"the Fourier regions' coherence gives transpose {t}, flip_y {fy}, flip_x {fx}, a scan rotation of "
                f"{self.rotation_deg:.2f} deg and a defocus of {self.defocus_A:.1f} A (its peak {self.contrast:.1f} "
                f"times the best rival's, {CLEAR:g} needed)")


class _Frequencies:
    """The disk's pixels k (P, 2) 1/Å, the chosen scan frequencies u (U, 2) 1/Å (nominal raster) and the
    pixels' images there (U, P) complex64, with the disk's radius in 1/Å."""

    def __init__(self, centred: np.ndarray, shape: tuple[int, int], steps_A: np.ndarray, dk_invA: float,
                 good: np.ndarray | None, pixels: int, frequencies: int, reassign: bool = False) -> None:
        """``reassign``: the images Hann-windowed and each chosen frequency moved to where its power comes
        from (``overlap_focus.reassigned``), else the plain transforms at their bins."""
        ny, nx = shape
        mean = repaired(centred.mean(0, dtype=np.float64))
        radius_px = bright_field_radius_px(mean, "the patterns")
        centre = disk_centre(mean)
        y, x = np.indices(centred.shape[-2:])
        inside = np.hypot(y - centre[0], x - centre[1]) <= radius_px - MARGIN_PX
        if good is not None:
            inside &= good
        picked = np.nonzero(inside.ravel())[0]
        inside = np.isin(np.arange(inside.size), picked[::max(1, math.ceil(len(picked) / pixels))]).reshape(inside.shape)
        self.k = np.column_stack([(y[inside] - centre[0]) * dk_invA, (x[inside] - centre[1]) * dk_invA])
        self.limit, self.margin = radius_px * dk_invA, MARGIN_PX * dk_invA
        cycles = np.stack(np.meshgrid(np.fft.fftfreq(ny), np.fft.fftfreq(nx), indexing="ij"), -1).reshape(-1, 2)
        to_invA = np.linalg.inv(steps_A)
        u = cycles @ to_invA
        windows = hann_windows(shape) if reassign else None
        power = np.zeros(ny * nx)
        for block in pixel_frequencies(centred, inside, shape, None if windows is None else windows[0, 0]):
            power += (np.abs(block.reshape(len(block), -1)) ** 2).sum(0)
        power[np.hypot(cycles[:, 0] * ny, cycles[:, 1] * nx) < 1.5] = 0.0  # the window's own lowest frequencies
        power[np.hypot(*u.T) > 2 * self.limit - 2 * self.margin] = 0.0  # no pixel sees both sides there
        pick = np.argsort(power)[::-1][:frequencies]
        pick = pick[power[pick] > 0]
        if windows is None:
            self.u = u[pick]
            blocks = pixel_frequencies(centred, inside, shape, None)
            self.values = np.concatenate([block.reshape(len(block), -1)[:, pick] for block in blocks]).T.astype(np.complex64)
        else:
            cycles_power, self.values = windowed_at(centred, inside, shape, windows, cycles, pick)
            self.u = cycles_power @ to_invA

    def on_pixels(self, keep: np.ndarray) -> _Frequencies:
        """The same frequencies with the disk's pixels ``keep`` (P,) bool alone."""
        part = copy.copy(self)
        part.k, part.values = self.k[keep], self.values[:, keep]
        return part

    def coherence(self, g: np.ndarray, scales_A2: np.ndarray) -> np.ndarray:
        """J(G, c) (the module's note) for the (2, 2) ``g`` at each c of ``scales_A2`` (S,) Å^2."""
        w = self.u @ g  # rows w = G^T u
        minus = np.hypot(*(self.k[None] - w[:, None]).transpose(2, 0, 1))
        plus = np.hypot(*(self.k[None] + w[:, None]).transpose(2, 0, 1))
        low, high = self.limit - self.margin, self.limit + self.margin
        regions = [(minus < low) & (plus > high), (minus > high) & (plus < low), (minus < low) & (plus < low)]
        phase = np.exp((2j * math.pi) * scales_A2[:, None, None] * (w @ self.k.T)[None]).astype(np.complex64)
        z = self.values[None] * phase  # (S, U, P)
        out = np.zeros(len(scales_A2))
        for region in regions:
            count = region.sum(1)
            some = count > 0
            sums = np.einsum("sup,up->su", z, region.astype(np.complex64))
            out += (np.abs(sums[:, some]) ** 2 / count[some]).sum(1)
        return out


def _frequencies(patterns: np.ndarray, shape: tuple[int, int], steps_A: np.ndarray, dk_invA: float,
                 good: np.ndarray | None, nominal_defocus_A: float, pixels: int, frequencies: int,
                 reassign: bool = False) -> _Frequencies | None:
    """The ``_Frequencies`` of the patterns; None without a nominal defocus, a disk, or four scan frequencies."""
    if not nominal_defocus_A:
        return None
    try:
        found = _Frequencies(patterns, shape, steps_A, dk_invA, good, pixels, frequencies, reassign)
    except DataError:
        return None
    return found if len(found.u) >= 4 else None


def candidate(angle_deg: float, handed: int) -> np.ndarray:
    """G = R(angle) for ``handed`` 0, R(angle) times the transpose for 1."""
    return rotation(angle_deg) @ (SWAP if handed else np.eye(2))


def overlap_orientation(patterns: np.ndarray, scan_shape: tuple[int, int], nominal_steps_A: np.ndarray,
                        wavelength_A: float, dk_invA: float, nominal_defocus_A: float, good: np.ndarray | None = None,
                        near_deg: float = 0.0, rivals: bool = False) -> OverlapOrientation | None:
    """The orientation and defocus of (ny * nx, K, K) stored patterns (centred, as read) of a raster
    ``scan_shape`` (rows the slow axis) with the nominal step vectors ``nominal_steps_A`` (columns,
    rows y, x in Å), ``good`` (K, K) the stored detector mask; the rotation the one of the four flags of
    the found handedness nearest ``near_deg``. None without a nominal defocus or a disk to find. The rivals (the
    other handedness's best peak and the best one APART_DEG away) come with a peak that is not clear, or where
    ``rivals`` asks for them."""
    coarse = _frequencies(patterns, scan_shape, nominal_steps_A, dk_invA, good, nominal_defocus_A, COARSE_PIXELS,
                          COARSE_FREQUENCIES)
    if coarse is None:
        return None
    base = wavelength_A * abs(nominal_defocus_A)
    angles = np.arange(0.0, 360.0, ANGLE_STEP_DEG)
    table = np.array([[coarse.coherence(candidate(a, h), base * SCALES) for a in angles] for h in (0, 1)])  # (2, A, S)
    handed, at, scale_at = np.unravel_index(int(np.argmax(table)), table.shape)
    best = table.max(axis=2)  # (2, A)
    gap = np.abs((angles - angles[at] + 180.0) % 360.0 - 180.0)
    rival = max(best[1 - handed].max(), best[handed][gap >= APART_DEG].max())
    floor = float(np.median(table))
    contrast = (table.max() - floor) / max(rival - floor, 1e-30 * abs(floor) + 1e-300)
    fine = _frequencies(patterns, scan_shape, nominal_steps_A, dk_invA, good, nominal_defocus_A, PIXELS, FREQUENCIES,
                        reassign=True)

    def refined(handed_at: int, angle_at: int, contrast_at: float) -> OverlapOrientation:
        """The peak of the coarse table at (``handed_at``, ``angle_at``) refined by the fine search."""
        scale_best = int(np.argmax(table[handed_at, angle_at]))
        fine_angles = angles[angle_at] + np.arange(-FINE_SPAN_DEG, FINE_SPAN_DEG + 1e-9, FINE_STEP_DEG)
        fine_scales = base * SCALES[scale_best] * FINE_SCALES
        values = np.array([fine.coherence(candidate(a, handed_at), fine_scales) for a in fine_angles])
        i, j = np.unravel_index(int(np.argmax(values)), values.shape)
        g, c = candidate(fine_angles[i], handed_at), fine_scales[j]
        if nominal_defocus_A < 0:  # J(G, c) = J(-G, -c): the nominal sign picks the pair
            g, c = -g, -c
        flags, theta = nearest_orientation(equivalent_orientations(g.T), near_deg)  # R(theta) = F G^T
        error = _JackknifeError(fine, handed_at, float(fine_angles[i]), fine_scales)
        return OverlapOrientation(flags, theta, c / wavelength_A, float(contrast_at), error=error)

    found = refined(int(handed), int(at), float(contrast))
    if contrast >= CLEAR and not rivals:
        return found
    # not clear (or asked): the rivals too, for a choice by trial reconstructions (``reconstruction/trials.py``)
    away = np.where(gap >= APART_DEG, best[handed], -np.inf)
    peaks = [refined(1 - int(handed), int(np.argmax(best[1 - handed])), 0.0),
             refined(int(handed), int(np.argmax(away)), 0.0)]
    return dataclasses.replace(found, rivals=tuple(peaks))


@dataclass
class _JackknifeError:
    """``jackknife_error_deg`` of a peak, computed when first called."""

    found: _Frequencies
    handed: int
    angle_deg: float
    scales_A2: np.ndarray
    value: float | None = None

    def __call__(self) -> float:
        if self.value is None:
            self.value = jackknife_error_deg(self.found, self.handed, self.angle_deg, self.scales_A2)
        return self.value


def peak_angle_deg(found: _Frequencies, handed: int, near_deg: float, scales_A2: np.ndarray) -> float:
    """The angle of J's peak (best over ``scales_A2``) within JACKKNIFE_SPAN_DEG of ``near_deg``, to a fraction of
    JACKKNIFE_STEP_DEG (the parabola through the best step and its neighbours)."""
    angles = near_deg + np.arange(-JACKKNIFE_SPAN_DEG, JACKKNIFE_SPAN_DEG + 1e-9, JACKKNIFE_STEP_DEG)
    values = np.array([found.coherence(candidate(a, handed), scales_A2).max() for a in angles])
    i = int(np.argmax(values))
    if not 0 < i < len(values) - 1:
        return float(angles[i])
    return float(angles[i] + crest_offset(*values[i - 1:i + 2]) * JACKKNIFE_STEP_DEG)


def jackknife_error_deg(found: _Frequencies, handed: int, angle_deg: float, scales_A2: np.ndarray) -> float:
    """The standard error of the fine search's rotation: the peak found again with each of JACKKNIFE_GROUPS
    interleaved groups of the disk's pixels left out (their noise is independent), the delete-one jackknife's
    spread. Where J has several nearby maxima (a crystal's lattice frequencies between the bins of a small
    raster) the peaks left out jump between them, and the error says so."""
    groups = np.arange(len(found.k)) % JACKKNIFE_GROUPS
    angles = []
    for left_out in range(JACKKNIFE_GROUPS):
        keep = groups != left_out
        angles.append(peak_angle_deg(found.on_pixels(keep), handed, angle_deg, scales_A2))
    angles = np.asarray(angles)
    n = JACKKNIFE_GROUPS
    return float(math.sqrt((n - 1) / n * ((angles - angles.mean()) ** 2).sum()))


def overlap_defocus(patterns: np.ndarray, scan_shape: tuple[int, int], steps_A: np.ndarray, wavelength_A: float,
                    dk_invA: float, nominal_defocus_A: float, good: np.ndarray | None = None) -> float | None:
    """The defocus (Å, the nominal one's sign) of (ny * nx, K, K) centred patterns whose orientation is known
    (prepared: G the identity) on a raster ``scan_shape`` with step vectors ``steps_A`` (columns, rows y, x
    in Å): the c of the largest J(I, c) over SCALES then FINE_SCALES about it; None without a nominal defocus,
    a disk, or where the best lies at either end of SCALES."""
    found = _frequencies(patterns, scan_shape, steps_A, dk_invA, good, nominal_defocus_A, PIXELS, FREQUENCIES)
    if found is None:
        return None
    g = math.copysign(1.0, nominal_defocus_A) * np.eye(2)
    base = wavelength_A * abs(nominal_defocus_A)
    coarse = found.coherence(g, base * SCALES)
    at = int(np.argmax(coarse))
    if at in (0, len(SCALES) - 1):
        return None
    fine = base * SCALES[at] * FINE_SCALES
    best = fine[int(np.argmax(found.coherence(g, fine)))]
    return math.copysign(best, nominal_defocus_A) / wavelength_A
