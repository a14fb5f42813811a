"""Probes: aberration phase, STEM probe (its aperture ``physics/aperture.py``'s), mixed-state initialisation."""

import math
import re

import torch

from ptyacc.physics.aperture import aperture

_ABERRATION = re.compile(r"^C(\d)(\d)([ab]?)$")


def aberration_phase(ky: torch.Tensor, kx: torch.Tensor, wavelength_A: float,
                     aberrations: dict[str, float]) -> torch.Tensor:
    """Aberration phase chi(k) in radians, Krivanek notation with Cartesian components:

        chi = 2 pi / lambda * sum_{n,m} alpha^(n+1) / (n+1) * (C_nma cos(m phi) + C_nmb sin(m phi))

    with alpha = lambda |k| and phi = atan2(ky, kx) (from the column axis towards the row axis).
    Coefficients in Å, names 'C10', 'C12a', 'C12b', ... up to 5th order. ky, kx broadcast."""
    alpha = wavelength_A * torch.sqrt(ky**2 + kx**2)
    phi = torch.atan2(ky, kx)
    chi = torch.zeros_like(alpha)
    for name, value in aberrations.items():
        match = _ABERRATION.match(name)
        if match is None:
            raise ValueError(f"unknown aberration name {name!r}")
        n, m, part = int(match[1]), int(match[2]), match[3]
        if m > n + 1 or (n + 1 - m) % 2 or (m == 0) != (part == ""):
            raise ValueError(f"aberration {name!r} does not exist in Krivanek notation")
        angular = torch.sin(m * phi) if part == "b" else torch.cos(m * phi)
        chi = chi + value * alpha ** (n + 1) / (n + 1) * angular
    return 2.0 * math.pi / wavelength_A * chi


def stem_probe(n: int, dk_invA: float, wavelength_A: float, semiangle_mrad: float,
               aberrations: dict[str, float] | None = None, dtype: torch.dtype = torch.complex64,
               aperture_values: torch.Tensor | None = None) -> torch.Tensor:
    """Real-space STEM probe (n, n), centred at pixel (n/2, n/2), unit total intensity.
    Its spectrum is aperture(k) exp(-i chi(k)) on the grid k = fftfreq(n) * n * dk_invA;
    ``aperture_values`` (n, n), unshifted, replace ``aperture`` (e.g. ``measured_edge``'s)."""
    k = torch.fft.fftfreq(n, d=1.0 / (n * dk_invA), dtype=torch.float64)  # (n,) 1/Å, unshifted
    ky, kx = k[:, None], k[None, :]
    disk = aperture(ky, kx, wavelength_A, semiangle_mrad, dk_invA) if aperture_values is None else aperture_values
    spectrum = disk.to(torch.float64) * torch.exp(-1j * aberration_phase(ky, kx, wavelength_A, aberrations or {}))
    probe = torch.fft.fftshift(torch.fft.ifft2(spectrum))
    probe = probe / torch.sqrt((probe.abs() ** 2).sum())
    return probe.to(dtype)


def mixed_state_probe(probe: torch.Tensor, n_modes: int, first_mode_power: float = 0.8) -> torch.Tensor:
    """(n_modes, n, n) orthogonal modes with the same total intensity as ``probe`` (n, n).

    Mode 0 is the probe; the others are the probe times the monomials x^a y^b in order of
    degree (x, y, x^2, xy, y^2, ...), orthogonalised (Gram-Schmidt, twice for round-off), sharing
    1 - first_mode_power of the power equally. A fully coherent start would leave the extra
    modes without gradient. Raises ValueError when the probe covers too few pixels to carry
    ``n_modes`` independent modes."""
    if n_modes == 1:
        return probe[None].clone()
    n = probe.shape[-1]
    c = (torch.arange(n, dtype=torch.float64) - n // 2) / n
    y, x = c[:, None], c[None, :]
    base = probe.to(torch.complex128)
    modes: list[torch.Tensor] = []
    degree = 0
    while len(modes) < n_modes:
        for a in range(degree, -1, -1):
            if len(modes) == n_modes:
                break
            v = base * (x**a * y ** (degree - a))
            norm = torch.sqrt((v.abs() ** 2).sum())
            for _ in range(2):
                for m in modes:
                    v = v - (m.conj() * v).sum() * m
            residual = torch.sqrt((v.abs() ** 2).sum())
            if residual > 1e-6 * norm:
                modes.append(v / residual)
        degree += 1
        if degree > 2 * n:
            raise ValueError(f"the probe (window {n} x {n} px) cannot carry {n_modes} independent modes; "
                             "use fewer probe modes or a larger window")
    power = torch.tensor([first_mode_power] + [(1 - first_mode_power) / (n_modes - 1)] * (n_modes - 1),
                         dtype=torch.float64)
    total = (probe.abs() ** 2).sum().to(torch.float64)
    out = torch.stack(modes) * torch.sqrt(power * total)[:, None, None]
    return out.to(probe.dtype)


def optics_pupil(n: int, dk_invA: float, wavelength_A: float, numerical_aperture: float,
                 central_stop_fraction: float = 0.0, about_px: tuple[float, float] = (0.0, 0.0)) -> torch.Tensor:
    """(n, n) float64, unshifted: the pupil of a focusing optic (zone plate, or a lens-like KB) of
    ``numerical_aperture`` seen on the window's frequency grid, a disk of radius NA / wavelength
    with a central stop of ``central_stop_fraction`` of its diameter, each edge a one-pixel ramp, centred
    ``about_px`` (y, x) frequency pixels from the zero frequency (the beam's axis)."""
    k = torch.fft.fftfreq(n, d=1.0 / (n * dk_invA), dtype=torch.float64)
    ky, kx = k[:, None] - about_px[0] * dk_invA, k[None, :] - about_px[1] * dk_invA
    semiangle_mrad = numerical_aperture * 1e3
    outer = aperture(ky, kx, wavelength_A, semiangle_mrad, dk_invA)
    if central_stop_fraction <= 0:
        return outer
    return outer * (1 - aperture(ky, kx, wavelength_A, semiangle_mrad * central_stop_fraction, dk_invA))


def pupil_probe(pupil: torch.Tensor, propagator: torch.Tensor | None) -> torch.Tensor:
    """(n, n) complex64 probe centred in the window, unit total intensity: the field whose
    spectrum is ``pupil`` (n, n, unshifted, real or complex) at the focus, advanced to the sample
    by ``propagator`` (``fresnel_propagator`` of the focus-to-sample distance; None: in focus)."""
    spectrum = pupil.to(torch.complex128)
    if propagator is not None:
        spectrum = spectrum * propagator.to(torch.complex128)
    probe = torch.fft.fftshift(torch.fft.ifft2(spectrum))
    return (probe / torch.sqrt((probe.abs() ** 2).sum()).clamp_min(1e-30)).to(torch.complex64)
