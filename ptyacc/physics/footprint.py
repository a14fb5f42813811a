"""The scan's footprint: how far the probe's footprints overlap at the scan's nearest-neighbour
spacing (not the spacing of consecutive positions, which an interleaved scan makes large)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

MIN_OVERLAP = 0.5  # under it (1 - spacing / the probe's diameter) the probes barely overlap: a warning
ASSUMED_OVERLAP = 0.6  # a ptychographic scan's usual linear overlap, 1 - spacing / beam diameter
BRIGHT = 0.25  # the beam's cone: where the mean pattern exceeds this fraction of its peak


def median_neighbour_distance(positions_px: np.ndarray, at_most: int | None = None) -> float:
    """The median over positions (N, 2) of the distance to the nearest other position (px); with
    ``at_most``, over that many positions evenly spread through the list (every one when N is smaller),
    each against all N, in chunks that hold about 2^22 distances (32 MiB), whatever N."""
    points = torch.as_tensor(np.asarray(positions_px), dtype=torch.float64)
    if len(points) < 2:
        return 1.0
    rows = torch.arange(len(points))
    if at_most is not None and len(points) > at_most:
        rows = torch.linspace(0, len(points) - 1, at_most).round().long()
    chunk = max(1, (1 << 22) // len(points))
    nearest = []
    for start in range(0, len(rows), chunk):
        some = rows[start:start + chunk]
        distance = torch.cdist(points[some], points)
        distance[torch.arange(len(some)), some] = float("inf")
        nearest.append(distance.min(1).values)
    return float(torch.cat(nearest).median())


def probe_diameter_px(probe: torch.Tensor, fraction: float = 0.9) -> float:
    """The diameter (px) of the smallest circle around the intensity's centre of mass that holds
    ``fraction`` of the intensity of ``probe`` (..., K, K) (modes summed), the window taken as
    periodic (a defocused probe's tails wrap around): the probe's footprint on the sample, at least 1 px."""
    intensity = (probe.abs() ** 2).reshape(-1, *probe.shape[-2:]).sum(0).to(torch.float64)
    k = intensity.shape[-1]
    angle = 2 * math.pi * torch.arange(k, dtype=torch.float64) / k
    centre = []
    for profile in (intensity.sum(1), intensity.sum(0)):  # circular means along y, then x
        phasor = (profile * torch.exp(1j * angle)).sum()
        centre.append(float(torch.angle(phasor)) * k / (2 * math.pi))
    offset = torch.arange(k, dtype=torch.float64)
    dy = torch.remainder(offset - centre[0] + k / 2, k) - k / 2
    dx = torch.remainder(offset - centre[1] + k / 2, k) - k / 2
    radius = torch.sqrt(dy[:, None] ** 2 + dx[None, :] ** 2).ravel()
    order = torch.argsort(radius)
    held = torch.cumsum(intensity.ravel()[order], 0) / intensity.sum().clamp_min(1e-30)
    # at least a pixel: a probe within one pixel is one pixel across
    return max(2 * float(radius[order][int(torch.searchsorted(held, torch.tensor(fraction, dtype=torch.float64)))]), 1.0)


@dataclass(frozen=True)
class Overlap:
    """The median spacing of each position to its nearest neighbour and the probe's diameter (px),
    and their overlap 1 - spacing / diameter (1: the same place; 0: touching; negative: a gap)."""

    spacing_px: float
    diameter_px: float

    @property
    def fraction(self) -> float:
        return 1.0 - self.spacing_px / self.diameter_px

    def line(self, near_field: bool = False) -> str:
        """run.log's and info's line; it starts "warning:" under ``MIN_OVERLAP`` (far field: near-field
        images of the whole beam are not judged by it)."""
        line = (f"scan overlap {self.fraction:.0%} (1 - spacing / diameter): nearest-neighbour spacing "
                f"{self.spacing_px:.3g} px (median), probe diameter {self.diameter_px:.3g} px (90% of its intensity)")
        if self.fraction < MIN_OVERLAP and not near_field:
            return (f"warning: {line}, under {MIN_OVERLAP:.0%}: the probes barely overlap; check the scan step and "
                    "the pixel size, or scan more densely")
        return line


def footprint_overlap(probe: torch.Tensor, positions_px: np.ndarray) -> Overlap:
    """The ``Overlap`` of ``probe`` (..., K, K) at the probe centres ``positions_px`` (N, 2) (up to 512 of them)."""
    diameter = probe_diameter_px(probe)
    return Overlap(median_neighbour_distance(np.asarray(positions_px), at_most=512), diameter)



def cone_numerical_aperture(mean_pattern, dk_invA: float, wavelength_A: float,
                            about_px: tuple[float, float] = (0.0, 0.0)) -> float:
    """The numerical aperture of a beam whose cone the detector sees in ``mean_pattern`` (K, K) (the model's layout,
    zero frequency at [0, 0]), its axis ``about_px`` (y, x) frequency pixels from the zero frequency: the 98th
    percentile of the pixels' distance from the axis where it exceeds BRIGHT of its peak (a disk's or an annulus's
    outer edge), times dk lambda. Measured from the zero frequency instead, a cone 3 px off a 24 px radius reads an
    eighth wider, and the overlap's distance from the focus an eighth short."""
    mean = torch.as_tensor(mean_pattern, dtype=torch.float64)
    k = mean.shape[-1]
    bright = mean >= BRIGHT * float(mean.max())
    frequency = torch.fft.fftfreq(k, d=1.0 / k, dtype=torch.float64)  # px from the zero frequency at [0, 0]
    radius = torch.sqrt((frequency[:, None] - about_px[0]) ** 2 + (frequency[None, :] - about_px[1]) ** 2)
    return float(radius[bright].quantile(0.98)) * dk_invA * wavelength_A


def overlap_defocus_A(positions_A: np.ndarray, numerical_aperture: float) -> tuple[float, float, float]:
    """(distance, diameter, spacing) Å: the distance from its focus at which a beam of ``numerical_aperture``
    (2 |distance| NA across) overlaps ASSUMED_OVERLAP of its diameter at the nearest-neighbour spacing of
    ``positions_A`` (N, 2)."""
    spacing_A = median_neighbour_distance(positions_A, at_most=256)
    diameter_A = spacing_A / (1 - ASSUMED_OVERLAP)
    return diameter_A / (2 * max(numerical_aperture, 1e-12)), diameter_A, spacing_A
