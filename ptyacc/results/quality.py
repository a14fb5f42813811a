"""How well a reconstruction matches a known phase: the figure the low-dose benchmark and the
demo test report (benchmarks/records/2026-11-27-benchmarks.md, 'Convergence and low-dose data'); and, for X-rays,
how its phase goes with its absorption and which way it departs from its background (``phase_absorption_correlation``,
``phase_skew``, read by ``data.trouble``'s conjugate warnings)."""

from __future__ import annotations

import numpy as np


def scanned_region(positions_px: np.ndarray) -> tuple[slice, slice]:
    """(rows, columns) of the scanned region in a frame whose pixel [i, j] sits at (i, j) px:
    the bounding box of the probe centres ``positions_px`` (N, 2) (y, x), rows
    ceil(min y) .. floor(max y), columns likewise (both ends included)."""
    px = np.asarray(positions_px, dtype=float)
    (r0, c0), (r1, c1) = np.ceil(px.min(0)).astype(int), np.floor(px.max(0)).astype(int) + 1
    return slice(r0, r1), slice(c0, c1)


def scanned_region_ncc(phase: np.ndarray, origin_A, dx_A: float, positions_A: np.ndarray,
                       truth: np.ndarray) -> float:
    """Zero-shift normalised cross-correlation of a reconstructed phase (Ny, Nx), whose pixel
    [a, b] sits at ``origin_A`` + (a, b) dx, with a true phase whose pixel [i, j] sits at
    (i, j) dx, over the scanned region: the bounding box of the probe centres, rows
    ceil(min y / dx) .. floor(max y / dx), columns likewise. No shift is searched: it is what a
    user sees. 1 = identical up to a constant and a positive scale; -1 = the phase reversed."""
    offset = np.round(-np.asarray(origin_A, dtype=float) / dx_A).astype(int)
    rows, cols = scanned_region(np.asarray(positions_A, dtype=float) / dx_A)
    true = np.asarray(truth)[rows, cols]
    found = np.asarray(phase)[rows.start + offset[0]:rows.stop + offset[0], cols.start + offset[1]:cols.stop + offset[1]]
    if true.shape != found.shape or true.size == 0:
        raise ValueError(f"the scanned region {true.shape} is not inside the reconstruction {np.shape(phase)}")
    return float(np.corrcoef(true.ravel(), found.ravel())[0, 1])


def resampled(phase: np.ndarray, dx_A: float, target_dx_A: float) -> np.ndarray:
    """``phase`` (Ny, Nx) on pixels of ``dx_A`` brought to pixels of ``target_dx_A`` >= ``dx_A`` (a reconstruction
    with ``data.transform.upsample``, scored against a truth on the detector's grid): Fourier cropping, which
    keeps the frequencies both grids hold. Pixel [a, b] of the result sits where pixel [a r, b r] of ``phase``
    does (r = target_dx_A / dx_A), so the origin is unchanged. Each side is first cut to the largest length whose
    resampled length is an even whole number of pixels."""
    ratio = dx_A / target_dx_A
    if ratio > 1 + 1e-9:
        raise ValueError(f"resampled: {target_dx_A} A pixels are finer than the phase's {dx_A} A")
    if abs(ratio - 1) < 1e-9:
        return np.asarray(phase)
    sides = []
    for n in np.shape(phase):
        while n > 0 and (abs(n * ratio - round(n * ratio)) > 1e-6 or round(n * ratio) % 2):
            n -= 1
        sides.append(n)
    if 0 in sides:
        raise ValueError(f"resampled: no length of {np.shape(phase)} pixels of {dx_A} A is a whole even number of "
                         f"{target_dx_A} A pixels")
    (n_y, n_x), (m_y, m_x) = sides, [round(n * ratio) for n in sides]
    spectrum = np.fft.fftshift(np.fft.fft2(np.asarray(phase)[:n_y, :n_x]))
    kept = spectrum[n_y // 2 - m_y // 2:n_y // 2 + m_y // 2, n_x // 2 - m_x // 2:n_x // 2 + m_x // 2]
    return np.fft.ifft2(np.fft.ifftshift(kept)).real * (m_y * m_x) / (n_y * n_x)


def placed_ncc(phase: np.ndarray, origin_A, dx_A: float, positions_A: np.ndarray, truth: np.ndarray,
               shift_px=(0.0, 0.0)) -> float:
    """``scanned_region_ncc`` with the reconstruction placed at its ``origin_A`` exactly: its
    fractional part applied by a Fourier shift (DESIGN: never rounded), then moved by
    ``shift_px`` (y, x) more (0: what a user sees; a search over shifts gives the best-shift NCC)."""
    import torch

    from ptyacc.physics import fourier_shift

    origin_px = np.asarray(origin_A, dtype=float) / dx_A - np.asarray(shift_px, dtype=float)
    whole = np.round(origin_px)
    # reconstruction pixel a lies at truth pixel a + origin_px: resampled onto whole pixels
    image = torch.from_numpy(np.asarray(phase, dtype=float)).to(torch.complex128)
    placed = fourier_shift(image[None], torch.from_numpy(origin_px - whole)[None])[0].real.numpy()
    return scanned_region_ncc(placed, whole * dx_A, dx_A, positions_A, truth)


def best_shift_ncc(phase: np.ndarray, origin_A, dx_A: float, positions_A: np.ndarray, truth: np.ndarray,
                   levels=((0.1, 5),)) -> tuple[float, np.ndarray]:
    """The highest ``placed_ncc`` over sub-pixel shifts, and that shift (2,) (y, x) px. ``levels``:
    (step_px, reach) pairs searched in turn, each a square of (2 reach + 1)^2 shifts step_px
    apart around the best shift so far (from zero): ((0.1, 5),) is every 0.1 px up to ±0.5 px;
    ((0.5, 4), (0.1, 4), (0.02, 4)) goes from coarse to fine. The zero shift always counts."""
    best, best_shift = placed_ncc(phase, origin_A, dx_A, positions_A, truth), np.zeros(2)
    for step, reach in levels:
        centre = best_shift.copy()
        for dy in np.arange(-reach, reach + 1) * step:
            for dx in np.arange(-reach, reach + 1) * step:
                value = placed_ncc(phase, origin_A, dx_A, positions_A, truth, shift_px=tuple(centre + (dy, dx)))
                if value > best:
                    best, best_shift = value, centre + (dy, dx)
    return best, best_shift


FLAT = 1e-6  # rms (radians, or log amplitude) under which a part of the object has no contrast


def _detrended(obj: np.ndarray, rows: slice, cols: slice) -> np.ndarray:
    """The phase and the log amplitude of ``obj`` (slices, Ny, Nx; their product) over ``rows`` x ``cols``, (pixels, 2),
    each freed of the plane that fits it best (a phase ramp is the probe's as much as the object's)."""
    region = np.prod(np.asarray(obj, dtype=np.complex128)[:, rows, cols], axis=0)
    ny, nx = region.shape
    y, x = np.meshgrid(np.arange(ny) - (ny - 1) / 2, np.arange(nx) - (nx - 1) / 2, indexing="ij")
    # a ramp of many radians wraps: its slope, the mean phase step along each axis, is taken out first
    slope_y = np.angle((region[1:] * np.conj(region[:-1])).sum())
    slope_x = np.angle((region[:, 1:] * np.conj(region[:, :-1])).sum())
    phase = np.angle(region * np.exp(-1j * (slope_y * y + slope_x * x)))
    log_amplitude = np.log(np.maximum(np.abs(region), 1e-30))
    design = np.column_stack([np.ones(ny * nx), y.ravel(), x.ravel()])
    parts = np.column_stack([phase.ravel(), log_amplitude.ravel()])
    return parts - design @ np.linalg.lstsq(design, parts, rcond=None)[0]


def phase_absorption_correlation(obj: np.ndarray, rows: slice, cols: slice) -> float:
    """The correlation of the phase of ``obj`` (slices, Ny, Nx; their product) with its log amplitude
    over ``rows`` x ``cols``, each first freed of the plane that fits it best; 0 where either is flat (under FLAT
    rms)."""
    left = _detrended(obj, rows, cols)
    spread = np.sqrt((left ** 2).sum(axis=0))
    if not (spread > FLAT * np.sqrt(len(left))).all():  # rounding, not contrast
        return 0.0
    return float(left[:, 0] @ left[:, 1] / (spread[0] * spread[1]))


def phase_skew(obj: np.ndarray, rows: slice, cols: slice) -> float:
    """The skewness (third standardised moment) of the phase of ``obj`` (slices, Ny, Nx; their product) over ``rows``
    x ``cols``, freed of the plane that fits it best: negative where the phase departs from its background mostly
    backward (matter on an empty support delays an X-ray's phase), positive where mostly forward (its conjugate, or
    holes in a film); 0 where the phase is flat (under FLAT rms)."""
    phase = _detrended(obj, rows, cols)[:, 0]
    spread = np.sqrt((phase ** 2).mean())
    if not spread > FLAT:
        return 0.0
    return float((phase ** 3).mean() / spread ** 3)


def results_phase_absorption(results) -> tuple[float, float]:
    """``phase_absorption_correlation`` and ``phase_skew`` of a run's ``results`` (``results.h5file.Results``): its
    first object mode over the scanned region, the bounding box of its positions."""
    rows, cols = scanned_region((np.asarray(results.positions_A) - np.asarray(results.origin_A)) / results.dx_A)
    return (phase_absorption_correlation(results.object[0], rows, cols),
            phase_skew(results.object[0], rows, cols))
