"""The probe-forming aperture (K, K), unshifted (zero frequency at [0, 0]): the disk of the
semi-angle with a one-pixel ramp for an edge (``aperture``), and the edge read from the data's
mean pattern (``measured_edge``; ``model.probe_aperture_edge``)."""

import torch


def aperture(ky: torch.Tensor, kx: torch.Tensor, wavelength_A: float, semiangle_mrad: float,
             dk: float) -> torch.Tensor:
    """Disk of semi-angle ``semiangle_mrad`` with an edge one pixel (dk) wide, so that the
    disk's area, and so the probe's intensity, varies smoothly with the semi-angle."""
    k_max = semiangle_mrad * 1e-3 / wavelength_A
    return torch.clamp((k_max - torch.sqrt(ky**2 + kx**2)) / dk + 0.5, 0.0, 1.0)


DISK_CONTRAST = 3.0  # measured_edge: the disk's inside at least this many times the ring outside it
DISK_EVENNESS = 0.5  # and its darkest tenth of pixels at least this fraction of its median


def measured_edge(mean_pattern: torch.Tensor, wavelength_A: float, semiangle_mrad: float, dk: float,
                  mask: torch.Tensor | None = None) -> tuple[torch.Tensor | None, float]:
    """The aperture (K, K) (unshifted: zero frequency at [0, 0], as the patterns the model
    predicts) whose edge is read from the bright-field disk of ``mean_pattern`` (same layout):
    each pixel the square root of (pattern - outside) / (inside - outside), where inside is the
    median of the disk more than 2 px within its edge and outside that of the ring 2-4 px beyond it
    (the scattered intensity there), kept between a sharp disk of the semi-angle and ``aperture``'s
    one-pixel ramp. So the probe starts with the edge the detector saw where that lies between the
    two (a sharp aperture, an area-weighted one), while an edge broader than the ramp, which the
    object's scattering or the detector's blur make and a coherent probe does not have, stays the
    ramp. Pixels where ``mask`` is 0 keep the ramp. Returns (aperture, inside / outside), the
    aperture None where the pattern shows no disk there: inside / outside under ``DISK_CONTRAST``,
    the inside uneven (its darkest tenth under ``DISK_EVENNESS`` of its median: the disk is smaller
    than the semi-angle says), or too few pixels."""
    n = mean_pattern.shape[-1]
    k = torch.fft.fftfreq(n, d=1.0 / (n * dk), dtype=torch.float64)
    ky, kx = k[:, None], k[None, :]
    r = torch.sqrt(ky**2 + kx**2) / dk  # px from the zero frequency
    r0 = semiangle_mrad * 1e-3 / wavelength_A / dk
    pattern = mean_pattern.to(torch.float64)
    counted = torch.ones_like(r, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    inside, ring = pattern[(r < r0 - 2) & counted], pattern[(r > r0 + 2) & (r < r0 + 4) & counted]
    if inside.numel() < 8 or ring.numel() < 8:
        return None, float("nan")
    level_in, level_out = float(inside.median()), float(ring.median())
    contrast = level_in / level_out if level_out > 0 else float("inf")
    if not (level_in > 0 and contrast >= DISK_CONTRAST and float(inside.quantile(0.1)) >= DISK_EVENNESS * level_in):
        return None, contrast
    read = ((pattern - level_out) / (level_in - level_out)).clamp(0.0, 1.0).sqrt()
    sharp, ramp = (r <= r0).to(torch.float64), aperture(ky, kx, wavelength_A, semiangle_mrad, dk)
    between = torch.minimum(torch.maximum(read, torch.minimum(sharp, ramp)), torch.maximum(sharp, ramp))
    return torch.where(counted, between, ramp), contrast
