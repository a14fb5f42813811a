"""The bright-field disk of electron patterns: its radius measured in the patterns themselves (which
gives the reciprocal pixel, ``experiment.dk_from_bright_field``), and compared with the radius the
calibration predicts (``check_bright_field``, the calibration check of ``sanity.calibration_checks``).
Hot and dead detector pixels are repaired first (each pixel against its eight neighbours, the rules
that ``detector.py`` finds bad pixels with), so that a few hot pixels do not outshine the disk."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ptyacc.data.sampling import aperture_invA
from ptyacc.errors import ConfigError, DataError
from ptyacc.physics import wavelength_A

DEAD_LEVEL = 0.1  # a dead pixel reads at most this share of its reference neighbour
HOT_FACTOR = 3.0  # a hot pixel reads more than this multiple of its second-brightest neighbour
DARK_PERCENTILE = 5
MIN_RADIUS_PX = 1.5
FILL_STEPS = 5000  # the most Jacobi steps that fill a masked region (``filled``)
STRAY_FRACTION = 0.1  # bright pixels away from the disk, as a fraction of the disk's, before it is not one disk


def half_way_bright(image: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(the dark level: the image's DARK_PERCENTILE-th percentile; its brightest value; the pixels above half
    way from the one to the other) of a (K, K) image, a mean pattern whose bad pixels are ``repaired``: the
    bright-field disk, or a beam's bright region."""
    dark, peak = float(np.percentile(image, DARK_PERCENTILE)), float(image.max())
    return dark, peak, image > dark + (peak - dark) / 2


def bright_field_radius_px(mean_pattern: np.ndarray, source: str) -> float:
    """Radius in pixels of the bright-field disk of a (K, K) mean pattern (zero frequency
    anywhere inside the detector).

    The dark level is the pattern's 5th percentile; pixels above half way from
    it to the maximum form the disk, whose plateau is their median. The area is then counted
    with sub-pixel weights, each pixel near the disk adding (value - dark) / (plateau - dark)
    clipped to [0, 1], so an edge pixel half covered adds one half: radius = sqrt(area / pi).
    Hot and dead pixels are first replaced by their neighbours' median (``repaired``).
    Raises DataError naming ``source`` when no single disk inside the detector is found."""
    m = repaired(np.asarray(mean_pattern, dtype=np.float64))
    hint = "set experiment.dk_invA (or dx_A) instead of experiment.dk_from_bright_field"
    dark, peak, bright = half_way_bright(m)
    if not (math.isfinite(peak) and math.isfinite(dark)) or peak <= dark:
        raise DataError(f"{source}: no bright-field disk in the mean pattern: it is flat or the disk fills the "
                        f"detector (maximum {peak:g}, {DARK_PERCENTILE}th percentile {dark:g}); {hint}")
    rough_radius = math.sqrt(bright.sum() / math.pi)
    if rough_radius < MIN_RADIUS_PX:
        raise DataError(f"{source}: no bright-field disk in the mean pattern: expected a disk of radius >= "
                        f"{MIN_RADIUS_PX} px above half maximum, found {int(bright.sum())} bright pixel(s); {hint}")
    if bright[0].any() or bright[-1].any() or bright[:, 0].any() or bright[:, -1].any():
        raise DataError(f"{source}: no bright-field disk inside the detector: the bright region of the mean "
                        f"pattern reaches the detector edge (crop less or bin less); {hint}")
    rows, cols = np.nonzero(bright)
    centre = rows.mean(), cols.mean()
    y, x = np.indices(m.shape)
    near = np.hypot(y - centre[0], x - centre[1]) <= rough_radius + 3
    stray = int((bright & ~near).sum())
    if stray > STRAY_FRACTION * bright.sum():
        raise DataError(f"{source}: no single bright-field disk in the mean pattern: {stray} of its "
                        f"{int(bright.sum())} bright pixels lie away from the brightest region; {hint}")
    plateau = float(np.median(m[bright]))
    weights = np.clip((m[near] - dark) / (plateau - dark), 0.0, 1.0)
    return math.sqrt(weights.sum() / math.pi)



def neighbours(patterns: np.ndarray) -> np.ndarray:
    """(n, ky, kx, 8) the eight neighbours of every pixel, sorted, the patterns reflected at the edges."""
    padded = np.pad(patterns, ((0, 0), (1, 1), (1, 1)), mode="reflect")
    ky, kx = patterns.shape[-2:]
    around = [padded[:, 1 + dy:1 + dy + ky, 1 + dx:1 + dx + kx]
              for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]
    return np.sort(np.stack(around, axis=-1), axis=-1)


def repaired(image: np.ndarray, good: np.ndarray | None = None) -> np.ndarray:
    """A (ky, kx) image (a mean pattern) with its hot pixels (above HOT_FACTOR times the
    second-brightest neighbour) and dead ones (at most DEAD_LEVEL of the third-darkest, so that
    a pixel of a dead line, with two dead neighbours, is one) replaced by their neighbours' median.
    A pixel just outside a disk's edge has three neighbours further out, as dark as it or darker.
    ``good`` (ky, kx) bool, the detector's mask where known: its bad pixels (a module gap, a beamstop, which read
    0) are first filled from the good ones around them (``filled``), so that they do not cut into the disk."""
    if good is not None and not good.all():
        image = filled(image, good)
    around = neighbours(image[None])[0]
    median = around[..., 3:5].mean(-1)
    bad = (image > HOT_FACTOR * np.maximum(around[..., -2], 0)) | (
        (around[..., 2] > 0) & (image <= DEAD_LEVEL * around[..., 2]))
    return np.where(bad, median, image)


def filled(image: np.ndarray, good: np.ndarray) -> np.ndarray:
    """``image`` (ky, kx) with its pixels where ``good`` is False filled smoothly from the good ones around them:
    the harmonic function (each filled pixel the mean of its four neighbours) the good pixels bound, by Jacobi
    steps enough for the deepest filled pixel (ten times its depth squared, at most FILL_STEPS). A line of masked
    pixels across a disk is bridged by a ramp between its sides, a masked disk by a smooth cap. Without a good pixel,
    unchanged."""
    bad = ~np.asarray(good, dtype=bool)
    if not bad.any() or bad.all():
        return image
    depth, inner = 0, bad.copy()
    while inner.any():  # the masked region eroded one pixel (4-neighbours) at a time
        padded = np.pad(inner, 1, constant_values=False)
        inner = inner & padded[:-2, 1:-1] & padded[2:, 1:-1] & padded[1:-1, :-2] & padded[1:-1, 2:]
        depth += 1
    out = np.where(bad, float(np.mean(image[~bad])), np.asarray(image, dtype=np.float64))
    for _ in range(min(10 * depth * depth + 20, FILL_STEPS)):
        padded = np.pad(out, 1, mode="edge")
        out = np.where(bad, (padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2] + padded[1:-1, 2:]) / 4, out)
    return out


def sample_rows(n_patterns: int, count: int = 256) -> np.ndarray:
    """Up to ``count`` evenly spread pattern indices, the same for every process."""
    return np.unique(np.linspace(0, n_patterns - 1, min(n_patterns, count)).round().astype(np.int64))


def measured_radius_px(source, n_patterns: int, prepare, every: np.ndarray | None = None) -> float:
    """Radius (prepared pixels) of the bright-field disk in the mean of an evenly spread sample of
    the ``n_patterns`` prepared patterns (the same on every process), taken from ``every`` (all of
    them, as held) or read from ``source`` (a ``readers.PatternFile``, through ``prepare``): the
    same values either way."""
    rows = sample_rows(n_patterns)
    sample = source.read(rows, prepare).patterns if every is None else every[rows]
    return bright_field_radius_px(np.fft.fftshift(sample.mean(axis=0, dtype=np.float64)), str(source.path))


TOLERANCE = 0.2  # relative difference of predicted and measured disk radius still accepted
SKIP = "experiment.check_calibration: false skips this check"


@dataclass(frozen=True)
class Slip:
    """A likely mistake: ``key``'s value ``given`` meant ``fix(given)``, said as ``say(given)``."""

    key: str
    fix: Callable[[float], float]
    say: Callable[[float], str]


SLIPS = (
    Slip("energy_eV", lambda v: v * 1e3, lambda v: f"{v * 1e3:g} eV ({v:g} keV)"),
    Slip("energy_eV", lambda v: v * 1e-3, lambda v: f"{v * 1e-3:g} eV ({v * 1e-6:g} keV)"),
    Slip("semiangle_mrad", lambda v: v * 1e3, lambda v: f"{v * 1e3:g} mrad ({v:g} rad)"),
    Slip("semiangle_mrad", lambda v: v * 1e-3, lambda v: f"{v * 1e-3:g} mrad ({v:g} µrad)"),
    Slip("dk_invA", lambda v: v * 0.1, lambda v: f"{v * 0.1:g} 1/Å ({v:g} 1/nm)"),
    Slip("dk_invA", lambda v: v * 10, lambda v: f"{v * 10:g} 1/Å ({v * 100:g} 1/nm)"),
    Slip("dk_invA", lambda v: v / (2 * np.pi), lambda v: f"{v / (2 * np.pi):g} 1/Å (without the 2 pi)"),
    Slip("dx_A", lambda v: v * 10, lambda v: f"{v * 10:g} Å ({v:g} nm)"),
    Slip("dx_A", lambda v: v * 0.1, lambda v: f"{v * 0.1:g} Å ({v * 0.01:g} nm)"),
)


def predicted_disk_radius_px(energy_eV: float, semiangle_mrad: float, dk_invA: float) -> float:
    """Radius in pixels of the bright-field disk: semiangle / wavelength / dk."""
    return aperture_invA(semiangle_mrad, wavelength_A(energy_eV, "electron")) / dk_invA


def check_bright_field(values: Mapping[str, float | None], sources: Mapping[str, str], k: int,
                       measured_radius_px: float, source: str, predicted: float | None = None) -> str:
    """Compare the disk that ``values`` predict (energy_eV, semiangle_mrad, and dk_invA or dx_A
    of patterns ``k`` pixels wide, all stored pixels; ``predicted``: that radius when the
    calibration worked it out already) with the ``measured_radius_px``; return the line for
    run.log, or raise ConfigError naming the likely slip."""
    energy, semiangle = values["energy_eV"], values["semiangle_mrad"]
    dk = _dk(values, k)
    if predicted is None:
        predicted = predicted_disk_radius_px(energy, semiangle, dk)
    line = (f"calibration check: bright-field disk radius predicted {predicted:.3g} px, measured "
            f"{measured_radius_px:.3g} px in {source}")
    if abs(predicted / measured_radius_px - 1) <= TOLERANCE:
        return line
    given = {"energy_eV": energy, "semiangle_mrad": semiangle}
    given.update({"dk_invA": dk} if values.get("dk_invA") is not None else {"dx_A": values["dx_A"]})
    for slip in SLIPS:
        if slip.key not in given:
            continue
        trial = dict(given, **{slip.key: slip.fix(given[slip.key])})
        radius = predicted_disk_radius_px(trial["energy_eV"], trial["semiangle_mrad"], _dk(trial, k))
        if abs(radius / measured_radius_px - 1) <= TOLERANCE:
            raise ConfigError(f"experiment.{slip.key}: {given[slip.key]:g} ({_where(slip.key, sources, source)}) "
                              f"gives a bright-field disk of radius {predicted:.3g} px, the data show "
                              f"{measured_radius_px:.3g} px: did you mean {slip.say(given[slip.key])}? ({SKIP})")
    named = ", ".join(f"{name} {value:g} ({_where(name, sources, source)})" for name, value in given.items())
    raise ConfigError(f"experiment: {named} give a bright-field disk of radius {predicted:.3g} px, the data show "
                      f"{measured_radius_px:.3g} px (more than {TOLERANCE:.0%} apart): check these values, or fit dk "
                      f"from the disk with experiment.dk_from_bright_field: true ({SKIP})")


def _dk(values: Mapping[str, float | None], k: int) -> float:
    """dk (1/Å) of stored patterns ``k`` px wide, from dk_invA or dx_A."""
    return values["dk_invA"] if values.get("dk_invA") is not None else 1.0 / (k * values["dx_A"])


def _where(name: str, sources: Mapping[str, str], source: str) -> str:
    """Where a value came from, in words."""
    return {"file": f"attribute of {source}", "config": "from the config"}.get(sources.get(name, ""), "derived")
