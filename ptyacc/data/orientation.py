"""The scan's rotation against the detector, and the patterns' transpose/flip, from the centre of
mass of the patterns (``experiment.scan_rotation_deg: auto``, ``data.transform.orientation: auto``
for a file without the detector's basis vectors).

Through a thin phase object phi, a pattern's centre of mass (in detector pixels, from its mean) is
the phase gradient seen by the probe: c = grad(phi) / (2 pi dk), smoothed by the probe's intensity,
whatever the probe's aberrations. ptyacc's model puts probe i of the nominal raster n_i at
r_i = R(theta) n_i (``positions.raster_positions_A``: turned from +x towards +y), with the
prepared patterns' rows along y and columns along x. Then R(theta)^T M c, with M the transpose
and flips of the preparation acting on the centre-of-mass vectors, is the gradient of phi(R n) on
the nominal raster: a field without curl. Its divergence, the Laplacian of a phase with positive
peaks at the atoms, is skewed negative; that tells theta from theta + 180 where the skew is large
(SKEW_SURE on a raster; at scattered positions, whose least-squares derivatives are noisier, SKEW_SURE_SCATTERED).
An X-ray object's phase is negative where there is material (PHASE_SIGN): its field is turned by 180 degrees
before the skew is read. Patterns flipped along both axes are those of the conjugate object under the conjugate
probe, exactly, so nothing but such a sign tells that turn.

The field is first freed of the plane that fits it best (descan moves the patterns by a plane in
the scan, whose antisymmetric part would read as curl). The curl of R(a)^T c is linear in
(cos a, sin a), so its squared sum over the scan is a quadratic form whose smallest eigenvector
gives the angle exactly; the eigenvalues' ratio (the share of curl left at the best angle,
against the worst) says how curl-free the field can be made. Done for the stored vectors and for
their transpose (the other handedness), the smaller share wins; of the eight transpose/flip
combinations of ``data.transform`` the one whose rotation lies nearest the given one (within 45
degrees of 0 for ``auto``) is chosen, with that rotation. The rotation measured on each half of the scan gives
its spread.

Measured on the middle block of up to MAX_SIDE x MAX_SIDE raster positions (rows in the slow
direction), read in blocks, the same on every process.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ptyacc.errors import DataError

MAX_SIDE = 64
MIRRORED = 2.0  # given flags refused when they leave this many times the curl of the other handedness
BLOCK = 256  # patterns read at a time
# |divergence skew| from which the centre of mass's choice between a rotation and + 180 stands. Over 79 files of the
# calibration matrix whose field is clear of curl, on the raster the wrong turns reached 0.48 (0 of 18 above 1.0);
# at the same files' positions as scattered points they reached 1.19 (2 of 31 above 1.0, none above 1.3)
SKEW_SURE = 1.0
SKEW_SURE_SCATTERED = 1.5
# the sign of a material's phase: electrons are sped up by an atom's potential (a phase advance, positive peaks), X-rays
# see a refractive index 1 - delta below 1 (a phase delay, negative wherever there is material)
PHASE_SIGN = {"electron": 1.0, "xray": -1.0}
FLAGS = tuple((t, fy, fx) for t in (False, True) for fy in (False, True) for fx in (False, True))


def rotation(theta_deg: float) -> np.ndarray:
    """R(theta) on (y, x) vectors: turns +x towards +y (``raster_positions_A``'s sense)."""
    c, s = math.cos(math.radians(theta_deg)), math.sin(math.radians(theta_deg))
    return np.array([[c, s], [-s, c]])


def flag_matrix(transpose: bool, flip_y: bool, flip_x: bool) -> np.ndarray:
    """What ``data.transform``'s transpose, then flip_y, then flip_x do to (y, x) vectors of a pattern."""
    m = np.array([[0.0, 1.0], [1.0, 0.0]]) if transpose else np.eye(2)
    return np.diag([-1.0 if flip_y else 1.0, -1.0 if flip_x else 1.0]) @ m


def equivalent_orientations(turn: np.ndarray, candidates=FLAGS) -> list[tuple[tuple[bool, bool, bool], float]]:
    """The (flags, rotation_deg) pairs that describe the same geometry as ``turn`` (2, 2), a turn or a
    mirror of (y, x) vectors of the stored patterns: for each transpose/flip F of ``candidates`` (triples
    for ``flag_matrix``) of which F turn is a turn, the theta of R(theta) = F turn, in (-180, 180]."""
    pairs = []
    for flags in candidates:
        rot = flag_matrix(*flags) @ turn
        if np.linalg.det(rot) > 0:
            pairs.append((flags, math.degrees(math.atan2(rot[0, 1], rot[0, 0]))))
    return pairs


def nearest_orientation(pairs: list[tuple[tuple[bool, bool, bool], float]], near_deg: float
                        ) -> tuple[tuple[bool, bool, bool], float]:
    """Of the (flags, rotation_deg) ``pairs`` (``equivalent_orientations``), the first whose rotation lies
    nearest ``near_deg``."""
    best = pairs[0]
    for flags, theta in pairs[1:]:
        if abs(wrapped_deg(theta - near_deg, 360.0)) < abs(wrapped_deg(best[1] - near_deg, 360.0)):
            best = (flags, theta)
    return best


def curl_and_divergence(field: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Curl (d vx / dy - d vy / dx) and divergence of a (ny, nx, 2) (y, x) field on the raster."""
    dvy_dy, dvy_dx = np.gradient(field[..., 0])
    dvx_dy, dvx_dx = np.gradient(field[..., 1])
    return dvx_dy - dvy_dx, dvy_dy + dvx_dx


def transverse(field: np.ndarray) -> np.ndarray:
    """The curl of a (ny, nx, 2) (y, x) field on the raster (central differences), inside its border."""
    return curl_and_divergence(field)[0][1:-1, 1:-1].ravel()


def curl_free_angle(field: np.ndarray, curl=transverse) -> tuple[float, float]:
    """(a in degrees in [0, 180), share of curl left) for which R(a)^T ``field`` has the least curl;
    ``curl``: the field's curl as a vector (the raster's ``transverse``, or ``ScatteredGrid.curl``)."""
    # R(a)^T v = cos a v + sin a J v, J v = (-vx, vy)
    a_curl = curl(field)
    b_curl = curl(np.stack([-field[..., 1], field[..., 0]], -1))
    form = np.array([[a_curl @ a_curl, a_curl @ b_curl], [a_curl @ b_curl, b_curl @ b_curl]])
    values, vectors = np.linalg.eigh(form)
    angle = math.degrees(math.atan2(vectors[1, 0], vectors[0, 0])) % 180.0
    return angle, float(values[0] / max(values[1], 1e-300))


def turned(field: np.ndarray, angle_deg: float) -> np.ndarray:
    """R(angle)^T applied to each (y, x) vector of ``field``."""
    return field @ rotation(angle_deg)


def skew(values: np.ndarray) -> float:
    v = values.ravel() - values.mean()
    return float((v ** 3).mean() / max((v ** 2).mean() ** 1.5, 1e-300))


@dataclass(frozen=True)
class Orientation:
    """The transpose/flip ``flags`` (transpose, flip_y, flip_x) and ``rotation_deg`` that make the
    prepared centre-of-mass field a gradient; ``curl_left`` the share of curl left (this
    handedness) and ``curl_other`` (the other one); ``halves_deg`` the rotation measured on each half of
    the scan; ``skew`` the divergence's skewness (negative when the sign is right), and ``skew_sure`` the size
    from which it tells a turn by 180 degrees (``tells_turn``)."""

    flags: tuple[bool, bool, bool]
    rotation_deg: float
    curl_left: float
    curl_other: float
    halves_deg: tuple[float, float]
    skew: float
    positions: int
    skew_sure: float = SKEW_SURE

    @property
    def tells_turn(self) -> bool:
        """Whether the skew tells the rotation from the rotation + 180 degrees."""
        return abs(self.skew) >= self.skew_sure

    def line(self, source: str, seconds: float) -> str:
        t, fy, fx = self.flags
        spread = abs(self.halves_deg[0] - self.halves_deg[1]) / 2
        return (f"scan rotation from the centre of mass: {self.rotation_deg:.2f} deg (halves of the scan "
                f"{self.halves_deg[0]:.2f} and {self.halves_deg[1]:.2f}, +-{spread:.2f}), transpose {t}, flip_y {fy}, "
                f"flip_x {fx}; curl left {self.curl_left:.3f} of the worst angle's (the other handedness "
                f"{self.curl_other:.3f}), divergence skew {self.skew:+.2f}, {self.positions} positions of {source} "
                f"({seconds:.2g} s)")


class RasterGrid:
    """The difference operators of a (ny, nx, 2) field on a raster (rows in the slow direction)."""

    def plane_free(self, field: np.ndarray) -> np.ndarray:
        return without_plane(field)

    def curl(self, field: np.ndarray) -> np.ndarray:
        return transverse(field)

    def divergence(self, field: np.ndarray) -> np.ndarray:
        return curl_and_divergence(field)[1]

    def halves(self, field: np.ndarray) -> tuple[float, float]:
        """The curl-free angle of this handedness's ``field`` on each half of the rows."""
        half = field.shape[0] // 2
        return curl_free_angle(field[:half])[0], curl_free_angle(field[half:])[0]


class ScatteredGrid:
    """The difference operators of a (N, 2) field at scattered probe positions (N, 2) Å (a scan
    that is no raster): each point's gradient by least squares on itself and its NEIGHBOURS
    nearest points, the curl taken only where those surround the point (its mean offset within a
    third of the median spacing), so that the scan's edge, like the raster's border, is left out."""

    NEIGHBOURS = 8

    def __init__(self, positions_A: np.ndarray) -> None:
        p = np.asarray(positions_A, dtype=np.float64)
        self.positions_A = p
        near = np.empty((len(p), self.NEIGHBOURS + 1), dtype=np.int64)
        for start in range(0, len(p), 512):  # (512, N) distances at a time
            d2 = ((p[start:start + 512, None, :] - p[None, :, :]) ** 2).sum(-1)
            near[start:start + 512] = np.argsort(d2, axis=1)[:, :self.NEIGHBOURS + 1]
        offsets = p[near] - p[:, None, :]  # (N, k + 1, 2), the point itself first
        design = np.concatenate([np.ones(near.shape + (1,)), offsets], -1)
        weights = np.linalg.pinv(design)  # (N, 3, k + 1): rows intercept, d/dy, d/dx
        self.near, self.d_dy, self.d_dx = near, weights[:, 1], weights[:, 2]
        spacing = np.median(np.linalg.norm(offsets[:, 1], axis=-1))
        self.inside = np.linalg.norm(offsets[:, 1:].mean(1), axis=-1) < spacing / 3
        self.lower = p[:, 0] < np.median(p[:, 0])

    def plane_free(self, field: np.ndarray) -> np.ndarray:
        design = np.column_stack([np.ones(len(field)), self.positions_A - self.positions_A.mean(0)])
        solution, *_ = np.linalg.lstsq(design, field, rcond=None)
        return field - design @ solution

    def _derivatives(self, field: np.ndarray) -> tuple[np.ndarray, ...]:
        """d vy / dy, d vy / dx, d vx / dy, d vx / dx at each point."""
        vy, vx = field[self.near, 0], field[self.near, 1]
        return ((self.d_dy * vy).sum(1), (self.d_dx * vy).sum(1), (self.d_dy * vx).sum(1), (self.d_dx * vx).sum(1))

    def curl(self, field: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
        _, dvy_dx, dvx_dy, _ = self._derivatives(field)
        keep = self.inside if where is None else self.inside & where
        return (dvx_dy - dvy_dx)[keep]

    def divergence(self, field: np.ndarray) -> np.ndarray:
        dvy_dy, _, _, dvx_dx = self._derivatives(field)
        return dvy_dy + dvx_dx

    def halves(self, field: np.ndarray) -> tuple[float, float]:
        """The curl-free angle of this handedness's ``field`` on the points below and above the median y."""
        return tuple(curl_free_angle(field, lambda f, part=part: self.curl(f, part))[0]
                     for part in (self.lower, ~self.lower))


def orientation_from_com(com: np.ndarray, fixed_flags: tuple[bool, bool, bool] | None = None,
                         near_deg: float = 0.0, grid: RasterGrid | ScatteredGrid | None = None,
                         phase_sign: float = 1.0) -> Orientation:
    """The orientation of a (ny, nx, 2) centre-of-mass field of the stored patterns (y, x px,
    rows of the raster in the slow direction), or of a (N, 2) one at scattered positions
    (``grid`` a ``ScatteredGrid`` of them; the rotation then turns the positions about their
    centre): of the transpose/flips, the one that leaves the rotation nearest ``near_deg``; with
    ``fixed_flags`` (the preparation's flags) only the rotation is found (a DataError when the
    data show the other handedness). ``phase_sign``: the sign of the material's phase (``PHASE_SIGN``)."""
    grid = RasterGrid() if grid is None else grid
    com = grid.plane_free(com) * phase_sign
    stored = curl_free_angle(com, grid.curl)
    swapped = curl_free_angle(com[..., ::-1], grid.curl)
    transpose = swapped[1] < stored[1] if fixed_flags is None else sum(fixed_flags) % 2 == 1
    angle, left = swapped if transpose else stored
    other = stored[1] if transpose else swapped[1]
    if fixed_flags is not None and left > MIRRORED * other:
        raise DataError(f"data.transform: transpose {fixed_flags[0]}, flip_y {fixed_flags[1]}, flip_x {fixed_flags[2]} "
                        f"mirror the patterns against the scan (the centre of mass leaves {left:.3f} of its curl so, "
                        f"{other:.3f} mirrored): set data.transform.orientation: auto, or add or remove one flip")
    field = com[..., ::-1] if transpose else com
    if skew(grid.divergence(turned(field, angle))) > 0:
        angle += 180.0
    # R(angle)^T T^h c is the gradient; prepared M c with R(theta)^T M = R(angle)^T T^h
    turn = (np.array([[0.0, 1.0], [1.0, 0.0]]) if transpose else np.eye(2)) @ rotation(angle)
    flags, theta = nearest_orientation(equivalent_orientations(turn, FLAGS if fixed_flags is None else (fixed_flags,)),
                                       near_deg)
    halves = tuple(theta + wrapped_deg(part - angle % 180) for part in grid.halves(field))
    return Orientation(flags, theta, left, other, halves, skew(grid.divergence(turned(field, angle))),
                       math.prod(com.shape[:-1]), SKEW_SURE_SCATTERED if isinstance(grid, ScatteredGrid) else SKEW_SURE)


def without_plane(field: np.ndarray) -> np.ndarray:
    """A (ny, nx, 2) field less the plane (in the raster's rows and columns) that fits it best: descan
    moves every pattern by such a plane, whose antisymmetric part is a curl that would turn the
    angle found; a sample's phase gradient has none."""
    ny, nx = field.shape[:2]
    y, x = np.meshgrid(np.arange(ny) - (ny - 1) / 2, np.arange(nx) - (nx - 1) / 2, indexing="ij")
    design = np.column_stack([np.ones(ny * nx), y.ravel(), x.ravel()])
    values = field.reshape(-1, 2)
    solution, *_ = np.linalg.lstsq(design, values, rcond=None)
    return (values - design @ solution).reshape(field.shape)


def wrapped_deg(degrees: float, period: float = 180.0) -> float:
    """``degrees`` wrapped into [-period / 2, period / 2)."""
    return (degrees + period / 2) % period - period / 2


def centres_of_mass(patterns: np.ndarray, good: np.ndarray | None) -> np.ndarray:
    """(n, 2) (y, x) centre of mass in px of (n, K, K) centred patterns, bad pixels (``good``
    False) left out."""
    weights = patterns if good is None else patterns * good
    y, x = np.indices(patterns.shape[-2:])
    total = weights.sum(axis=(-2, -1), dtype=np.float64)
    return np.stack([(weights * y).sum(axis=(-2, -1)) / total, (weights * x).sum(axis=(-2, -1)) / total], -1)


def middle_block(scan_shape: tuple[int, int]) -> tuple[np.ndarray, tuple[int, int]]:
    """Row-major pattern indices of the middle block of at most MAX_SIDE x MAX_SIDE raster
    positions, and its shape."""
    ny, nx = scan_shape
    sy, sx = min(ny, MAX_SIDE), min(nx, MAX_SIDE)
    y0, x0 = (ny - sy) // 2, (nx - sx) // 2
    rows = (np.arange(y0, y0 + sy)[:, None] * nx + np.arange(x0, x0 + sx)[None, :]).ravel()
    return rows, (sy, sx)


def middle_points(positions_A: np.ndarray) -> np.ndarray:
    """Sorted indices of the up to MAX_SIDE x MAX_SIDE positions (N, 2) nearest their centre (a scan
    that is no raster: ``middle_block``'s counterpart)."""
    distance = np.linalg.norm(positions_A - positions_A.mean(0), axis=1)
    return np.sort(np.argsort(distance, kind="stable")[:MAX_SIDE * MAX_SIDE])


def measure_orientation(source, scan_shape: tuple[int, int] | None, good: np.ndarray | None,
                        background: np.ndarray | None, fixed_flags=None, near_deg: float = 0.0,
                        positions_A: np.ndarray | None = None, phase_sign: float = 1.0) -> tuple[Orientation, str]:
    """The orientation of the stored patterns of ``source`` (a ``readers.PatternFile`` of a
    raster ``scan_shape``, or, given ``positions_A`` (N, 2) Å, of a scan that is no raster, judged
    at those positions: its rotation then turns them about their centre), bad pixels (``good``
    False, stored layout) left out, less the dark frame ``background``; and its run.log line. ``phase_sign``: the
    sign of the material's phase (``PHASE_SIGN``)."""
    started = time.perf_counter()
    if positions_A is None:
        rows, shape = middle_block(scan_shape)
        grid = None
    else:
        rows = middle_points(positions_A)
        shape, grid = (len(rows),), ScatteredGrid(positions_A[rows])
    subtract = None if background is None else (lambda chunk: chunk - background)
    com = np.concatenate([centres_of_mass(source.read(rows[i:i + BLOCK], subtract).patterns, good)
                          for i in range(0, len(rows), BLOCK)])
    found = orientation_from_com(com.reshape(*shape, 2), fixed_flags, near_deg, grid, phase_sign)
    where = str(source.path) if grid is None else f"{source.path} (at its own positions, no raster)"
    return found, found.line(where, time.perf_counter() - started)


def frame_difference(flags: tuple[bool, bool, bool], rotation_deg: float, other_flags: tuple[bool, bool, bool],
                     other_rotation_deg: float) -> tuple[bool, float]:
    """How the frame of ``flags`` (transpose, flip_y, flip_x) and ``rotation_deg`` differs from the
    ``other`` one: each maps the stored patterns' (y, x) vectors to the nominal raster's by
    R(theta)^T F, and their difference D = used other^T is the identity when they agree. Returns
    (mirrored: D's determinant is negative, off_deg: D's angle atan2(D[1, 0], D[0, 0]) in
    [-180, 180), meaningful where not mirrored; for equal flags it is ``rotation_deg -
    other_rotation_deg``)."""
    used = rotation(rotation_deg).T @ flag_matrix(*flags)
    other = rotation(other_rotation_deg).T @ flag_matrix(*other_flags)
    difference = used @ other.T
    return bool(np.linalg.det(difference) < 0), wrapped_deg(math.degrees(math.atan2(difference[1, 0], difference[0, 0])),
                                                          360.0)
