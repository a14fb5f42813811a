"""The parallax's defocus made right on crystals: its shift model fitted in Fourier space, region by region.

``parallax.measure`` aligns the virtual bright-field images of pixel groups in real space. An image's
frequency u (1/Å, of the scan) at detector pixel k (1/Å, from the disk's centre) is, for a weak object,

    G(k, u) = exp(-2 pi i u . M k) A(k) [A(k - u) a(u) + A(k + u) b(u)]

(M the parallax's matrix, A the aperture, a and b the object's two terms with the aberration's phase at
u, the same for every k). Where both A(k - u) and A(k + u) are 1, the image at k is the common image
moved by M k; where only one is, the bracket changes its phase and the image is not moved the same way.
An amorphous sample spreads its power over many |u| and these errors average out; a crystal puts its
power at a few lattice frequencies, so most pixels of the disk see every one of them from one side and
the real-space shifts come out short by a common factor (MoS2 at 120 Å: 95 Å).

Here the shift model is fitted where it holds exactly: for each of the scan frequencies carrying the
most power, the pixels inside the disk fall into three regions (only k - u inside, only k + u, both).
With a coherent beam each region's bracket is constant. A focal spread (a partly coherent beam) averages
each term over the defocus: the term of a(u) is damped by a real factor E(2 k . u - |u|^2), that of b(u) by
E(2 k . u + |u|^2), so where both terms are seen their balance, and with it the bracket's phase, turns
across the region, and the fit reads that turn as defocus (70 Å read 7 % high on the independent simulator with a 30 Å
spread); where one term is seen, the factor is real and changes no phase. So only the two one-sided
regions are fitted. The scale s of M that makes exp(2 pi i s u . M k) G(k, u) add up most coherently
within each of them,

    J(s) = sum_u sum_regions |sum_{k in region} G(k, u) exp(2 pi i s u . M k)|^2 / (pixels in the region),

is searched over COARSE (log steps from 0.5 to 2), then over FINE about the best, and refined by a
parabola. The same fine search on the pixels within and beyond the median |k| gives the inner and outer
scales, whose difference says how far to trust it. At most PIXELS pixels of the disk are used (evenly
picked), so that a large detector costs no more than a small one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

COARSE = np.exp(np.linspace(math.log(0.25), math.log(2.0), 54))  # the factors of M tried first: 4 % apart
FINE = np.exp(np.linspace(-1.0, 1.0, 9) * math.log(COARSE[1] / COARSE[0]))  # then about the best: 1 % apart
PIXELS = 1024
FREQUENCIES = 200  # the scan frequencies of most power used
MARGIN_PX = 1.5  # detector pixels around the disk's edge (blur, partial coherence) left out of every region
CHUNK = 256  # pixels' images transformed at once


@dataclass(frozen=True)
class Scale:
    """The factor ``scale`` of the parallax's M that fits the Fourier regions best, and the same from the
    inner and the outer half of the pixels; ``found`` False where the best lies at either end of COARSE."""

    scale: float
    inner: float
    outer: float
    found: bool


def hann_windows(shape: tuple[int, int]) -> np.ndarray:
    """The raster's Hann window (``np.hanning`` along each axis) and its derivatives along y and along x (per
    raster step): (3, 1, ny, nx), so that ``pixel_frequencies`` transforms each image with all three at once."""
    ny, nx = shape
    hann = [np.hanning(n) for n in shape]
    slope = [math.pi / (n - 1) * np.sin(2 * math.pi * np.arange(n) / (n - 1)) for n in shape]
    return np.stack([hann[0][:, None] * hann[1][None, :], slope[0][:, None] * hann[1][None, :],
                     hann[0][:, None] * slope[1][None, :]])[:, None]


def pixel_frequencies(centred: np.ndarray, inside: np.ndarray, shape: tuple[int, int],
                      window: np.ndarray | None) -> Iterator[np.ndarray]:
    """The scan's Fourier transforms of the virtual images of the ``inside`` pixels of centred (n, K, K) patterns,
    each pattern divided by its total, each image by its mean, times ``window`` (ny, nx) (None: the plain
    transform): (P_chunk, ny, nx) complex128 blocks of at most CHUNK pixels in turn, so that no more than a block is
    held (P (ny, nx) transforms of a 64 x 64 raster are 64 MiB); a stack of windows (W, 1, ny, nx) gives
    (W, P_chunk, ny, nx) blocks."""
    ny, nx = shape
    flat = centred.reshape(len(centred), -1)
    totals = np.maximum(flat.sum(1, dtype=np.float64), 1e-30)
    columns = np.nonzero(inside.ravel())[0]
    for start in range(0, len(columns), CHUNK):
        chosen = columns[start:start + CHUNK]
        images = (flat[:, chosen].astype(np.float64) / totals[:, None]).T.reshape(len(chosen), ny, nx)
        images = images / np.maximum(images.mean(axis=(1, 2), keepdims=True), 1e-30) - 1.0
        yield np.fft.fft2(images if window is None else images * window)


def reassigned(cycles: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """The frequencies (U, 2) (cycles per raster step, y x) the power of the Hann-windowed transforms at the
    bins ``cycles`` (U, 2) comes from: ``blocks`` (3, P, U) the pixels' transforms there with the window and with
    its y and x derivatives (``hann_windows``). For an image e^(2 pi i f n) the derivative's transform is
    2 pi i (c - f) times the window's at c, so c - Im(sum_k D_k conj(H_k)) / (2 pi sum_k |H_k|^2) is the frequency
    of each bin's power, weighted by it: below c where the sample's power falls with |f| (the window mixes each
    bin with its neighbours), at the reflection itself near a crystal's."""
    hann, along_y, along_x = blocks
    power = np.maximum((np.abs(hann) ** 2).sum(0), 1e-300)
    offsets = [np.imag((along * np.conj(hann)).sum(0)) / (2 * math.pi * power) for along in (along_y, along_x)]
    return cycles - np.column_stack(offsets)


def windowed_at(centred: np.ndarray, inside: np.ndarray, shape: tuple[int, int], windows: np.ndarray,
                cycles: np.ndarray, pick: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The frequencies (U, 2) (cycles per raster step) the power of the bins ``cycles[pick]`` comes from
    (``reassigned``) and the ``inside`` pixels' Hann-windowed transforms there, (U, P) complex64; ``windows``
    ``hann_windows(shape)``. The transforms are taken a block of pixels at a time (``pixel_frequencies``)."""
    blocks = np.concatenate([block.reshape(3, len(block[0]), -1)[..., pick]
                             for block in pixel_frequencies(centred, inside, shape, windows)], axis=1)  # (3, P, U)
    return reassigned(cycles[pick], blocks), blocks[0].T.astype(np.complex64)


def coherence(scales: np.ndarray, base: np.ndarray, values: np.ndarray, regions: list[np.ndarray],
              pixels: np.ndarray) -> np.ndarray:
    """J(s) for each of ``scales`` (the module's note) over the ``pixels`` (P,) bool; ``base`` (U, P) is
    u . M k, ``values`` (U, P) G(k, u), ``regions`` (U, P) bool each."""
    out = np.zeros(len(scales))
    chosen = [(region & pixels).astype(np.float32) for region in regions]
    counts = [region.sum(1) for region in chosen]
    for i, s in enumerate(scales):
        z = values * np.exp(2j * math.pi * s * base).astype(np.complex64)
        for region, count in zip(chosen, counts):
            some = count > 0
            out[i] += (np.abs((z * region).sum(1))[some] ** 2 / count[some]).sum()
    return out


def peak(scales: np.ndarray, values: np.ndarray) -> tuple[float, bool]:
    """The scale at the maximum of J over ``scales`` (log-spaced), refined by a parabola in log s; False
    at either end."""
    i = int(np.argmax(values))
    if i == 0 or i == len(values) - 1:
        return float(scales[i]), False
    return float(scales[i] * math.exp(crest_offset(*values[i - 1:i + 2]) * math.log(scales[1] / scales[0]))), True


def crest_offset(left: float, middle: float, right: float) -> float:
    """Where the parabola through (-1, ``left``), (0, ``middle``), (1, ``right``) is highest, in steps from the
    middle; 0 where it does not curve down."""
    curvature = left - 2 * middle + right
    return 0.5 * (left - right) / curvature if curvature < 0 else 0.0


def refined_scale(centred: np.ndarray, shape: tuple[int, int], steps_A: np.ndarray, m: np.ndarray, dk_invA: float,
                  centre: np.ndarray, radius_px: float, good: np.ndarray | None) -> Scale:
    """The Scale of ``m`` (2, 2; s = m k, Å and 1/Å, rows y, x) for centred (n, K, K) patterns on a raster
    ``shape`` with step vectors the columns of ``steps_A``; the disk of ``radius_px`` about ``centre``
    (px, y x), ``good`` (K, K) the detector's usable pixels (centred) or None."""
    ny, nx = shape
    y, x = np.indices(centred.shape[-2:])
    inside = np.hypot(y - centre[0], x - centre[1]) <= radius_px - MARGIN_PX
    if good is not None:
        inside &= good
    picked = np.nonzero(inside.ravel())[0]
    inside = np.isin(np.arange(inside.size), picked[::math.ceil(len(picked) / PIXELS)]).reshape(inside.shape)
    k = np.column_stack([(y[inside] - centre[0]) * dk_invA, (x[inside] - centre[1]) * dk_invA])  # (P, 2)
    cycles = np.stack(np.meshgrid(np.fft.fftfreq(ny), np.fft.fftfreq(nx), indexing="ij"), -1).reshape(-1, 2)
    to_invA = np.linalg.inv(steps_A)
    u = cycles @ to_invA  # 1/Å: u . (steps n) = cycles . n
    # the transforms twice, a block of pixels at a time (memory: a block, not all P): first the power at each
    # scan frequency, summed pixel after pixel, then the chosen frequencies' values
    windows = hann_windows(shape)
    power = np.zeros(ny * nx)
    for block in pixel_frequencies(centred, inside, shape, windows[0, 0]):
        for pixel in np.abs(block.reshape(len(block), -1)) ** 2:
            power += pixel
    power[np.hypot(cycles[:, 0] * ny, cycles[:, 1] * nx) < 1.5] = 0.0  # the window's own lowest frequencies
    pick = np.argsort(power)[::-1][:FREQUENCIES]
    # each frequency's phase moves with a pixel's shift at the frequency its power comes from, not at its bin's
    # (the calibration matrix's amorphous 16 x 16 rasters read 0.89 of the truth at the bins' frequencies)
    cycles_power, values = windowed_at(centred, inside, shape, windows, cycles, pick)  # (U, 2), (U, P)
    u_power, u = cycles_power @ to_invA, u[pick]
    limit, margin = radius_px * dk_invA, MARGIN_PX * dk_invA
    minus = np.hypot(*(k[None] - u[:, None]).transpose(2, 0, 1))
    plus = np.hypot(*(k[None] + u[:, None]).transpose(2, 0, 1))
    # the one-sided regions alone (the module's note: where both sides are seen a focal spread turns the bracket)
    regions = [(minus < limit - margin) & (plus > limit + margin), (minus > limit + margin) & (plus < limit - margin)]
    base = np.einsum("ua,ab,pb->up", u_power, m, k)
    radial = np.hypot(*k.T)
    near = radial <= np.median(radial)
    every = np.ones(len(k), dtype=bool)
    coarse, found = peak(COARSE, coherence(COARSE, base, values, regions, every))
    if not found:
        return Scale(coarse, coarse, coarse, False)
    fine = coarse * FINE
    scale, inner, outer = (peak(fine, coherence(fine, base, values, regions, part))[0] for part in (every, near, ~near))
    return Scale(scale, inner, outer, True)
