"""Free-space propagation and sub-pixel shifts, both as Fourier-space multipliers."""

import functools
import math

import torch


def spatial_frequencies(n: int, dx: float = 1.0, dtype: torch.dtype = torch.float64,
                        device: torch.device | str | None = None) -> torch.Tensor:
    """Spatial frequencies (n,) in cycles per unit of ``dx``, unshifted FFT layout."""
    return torch.fft.fftfreq(n, d=dx, dtype=dtype, device=device)


@functools.lru_cache(maxsize=16)
def frequency_squared(n: int, dx: float = 1.0, device: torch.device | str | None = None,
                      dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """|k|^2 (n, n) in cycles^2 per unit of ``dx`` squared, unshifted layout, summed in float64 and then cast
    to ``dtype``; made once per grid and shared, so callers must not write into it."""
    k = spatial_frequencies(n, dx, device=device)
    return (k[:, None] ** 2 + k[None, :] ** 2).to(dtype)


def fresnel_propagator(n: int, dx_A: float, wavelength_A: float, distance_A: float,
                       dtype: torch.dtype = torch.complex64, about_px: tuple[float, float] = (0.0, 0.0)
                       ) -> torch.Tensor:
    """Angular-spectrum propagator (n, n), unshifted layout, in the paraxial (Fresnel) form
    H(k) = exp(-i pi lambda dz |k - q|^2), q the beam's axis ``about_px`` (y, x) frequency pixels from the zero
    frequency (0: along the optical axis). Multiplying a wave's spectrum by H advances it by dz
    along the beam; a probe with defocus f (= -C10) comes to focus after dz = f. A beam whose axis is tilted
    (its cone off the detector's centre) is advanced about its own axis: about zero, the probe would also move
    sideways by lambda dz q."""
    if not any(about_px):
        k2 = frequency_squared(n, dx_A)
    else:
        k = spatial_frequencies(n, dx_A)
        step = 1.0 / (n * dx_A)  # cycles per unit of dx_A per frequency pixel
        k2 = (k[:, None] - about_px[0] * step) ** 2 + (k[None, :] - about_px[1] * step) ** 2
    return torch.exp(-1j * math.pi * wavelength_A * distance_A * k2).to(dtype)


def shift_ramp(shifts_px: torch.Tensor, n: int) -> torch.Tensor:
    """Fourier multipliers (B, n, n) that move an image by ``shifts_px`` (B, 2) = (dy, dx) pixels:
    ifft2(fft2(f) * ramp) = f(r - shift), circularly. Differentiable in the shifts."""
    ramp_y, ramp_x = shift_ramps_1d(shifts_px, n)
    # the outer product as a batched matmul: several times faster than a broadcast multiply
    return torch.bmm(ramp_y[:, :, None], ramp_x[:, None, :])


def shift_ramps_1d(shifts_px: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The separable factors (B, n) along y and x of ``shift_ramp``."""
    k = spatial_frequencies(n, 1.0, dtype=shifts_px.dtype, device=shifts_px.device)
    phase = -2.0 * math.pi * shifts_px[:, :, None] * k  # (B, 2, n)
    ramps = torch.polar(torch.ones_like(phase), phase)
    return ramps[:, 0], ramps[:, 1]


def fourier_shift(images: torch.Tensor, shifts_px: torch.Tensor) -> torch.Tensor:
    """Shift complex images (B, ..., ny, nx) by (B, 2) sub-pixel amounts (dy, dx)."""
    ny, nx = images.shape[-2:]
    if ny == nx:
        ramp = shift_ramp(shifts_px, nx)
    else:
        ramp = shift_ramps_1d(shifts_px, ny)[0][:, :, None] * shift_ramps_1d(shifts_px, nx)[1][:, None, :]
    ramp = ramp.reshape(ramp.shape[0], *([1] * (images.dim() - 3)), ny, nx)
    return torch.fft.ifft2(torch.fft.fft2(images) * ramp)
