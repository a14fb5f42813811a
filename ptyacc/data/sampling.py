"""The object pixel dx (Å) of patterns K pixels wide, from whatever calibrates it. The relations,
written here once:

- reciprocal pixel dk (1/Å):  dx = 1 / (K dk)
- bright-field disk of radius R px: its edge is the aperture, semiangle / wavelength in 1/Å,
  so dk = (semiangle / wavelength) / R
- X-ray far field, detector at z with pixel p:  dx = wavelength z / (K p)
- X-ray near field (Fresnel scaling, probe focus z1 before the sample, detector z2 behind it):
  magnification M = (z1 + z2) / z1, dx = p / M, and the detector image is a plane-wave Fresnel
  propagation over z2 / M at that pixel size
"""

from __future__ import annotations

from dataclasses import dataclass

from ptyacc.errors import ConfigError

METRE_IN_A = 1e10


@dataclass(frozen=True)
class Sampling:
    """dx_A: object pixel (Å); near_field_distance_A: the effective (Fresnel-scaled) propagation
    distance of near-field images (Å), None in the far field; disk_radius_px: electrons with a
    semi-angle, the bright-field disk's radius this sampling predicts in stored pixels,
    semiangle / wavelength / dk with dk the given dk_invA or 1 / (K dx) (what the calibration
    check compares with the data's disk), else None."""

    dx_A: float
    near_field_distance_A: float | None = None
    disk_radius_px: float | None = None


def aperture_invA(semiangle_mrad: float, wavelength_A: float) -> float:
    """Radius of the bright-field disk in reciprocal space (1/Å): semiangle / wavelength.
    In pixels of a detector with reciprocal pixel dk it is ``aperture_invA(...) / dk``."""
    return semiangle_mrad * 1e-3 / wavelength_A


def object_sampling(k: int, wavelength_A: float, *, dx_A: float | None = None, dk_invA: float | None = None,
                    disk_radius_px: float | None = None, semiangle_mrad: float | None = None,
                    radiation: str = "electron", geometry: str = "far_field",
                    detector_distance_m: float | None = None, detector_pixel_m: float | None = None,
                    focus_to_sample_m: float | None = None) -> Sampling:
    """Sampling of patterns ``k`` pixels wide. The first of these that is given sets dx: dx_A;
    dk_invA; the bright-field disk's radius ``disk_radius_px`` (with ``semiangle_mrad``); for
    X-rays the detector geometry. Near field the geometry always gives the propagation distance."""
    dx, near_distance = _object_pixel(k, wavelength_A, dx_A, dk_invA, disk_radius_px, semiangle_mrad, radiation,
                                      geometry, detector_distance_m, detector_pixel_m, focus_to_sample_m)
    disk = None
    if radiation == "electron" and semiangle_mrad is not None:
        disk = aperture_invA(semiangle_mrad, wavelength_A) / (dk_invA if dk_invA is not None else 1.0 / (k * dx))
    return Sampling(dx, near_distance, disk)


def _object_pixel(k: int, wavelength_A: float, dx_A: float | None, dk_invA: float | None,
                  disk_radius_px: float | None, semiangle_mrad: float | None, radiation: str, geometry: str,
                  detector_distance_m: float | None, detector_pixel_m: float | None,
                  focus_to_sample_m: float | None) -> tuple[float, float | None]:
    """(dx (Å), near-field distance (Å) or None): see ``object_sampling``."""
    from_geometry, near_distance = None, None
    if radiation == "xray" and (geometry == "near_field" or (dx_A is None and dk_invA is None)):
        from_geometry, near_distance = xray_sampling(geometry, wavelength_A, k, detector_distance_m,
                                                     detector_pixel_m, focus_to_sample_m)
    if dx_A is not None:
        return dx_A, near_distance
    if dk_invA is not None:
        return 1.0 / (k * dk_invA), near_distance
    if disk_radius_px is not None and semiangle_mrad is not None:
        return 1.0 / (k * aperture_invA(semiangle_mrad, wavelength_A) / disk_radius_px), near_distance
    if from_geometry is not None:
        return from_geometry, near_distance
    raise ConfigError("experiment.dk_invA: needed (or experiment.dx_A), and the data file has neither attribute")


def xray_sampling(geometry: str, wavelength_A: float, k: int, distance_m: float | None, pixel_m: float | None,
                  focus_to_sample_m: float | None) -> tuple[float, float | None]:
    """Object pixel (Å) and, in the near field, the effective propagation distance (Å), from the
    detector geometry (see the module docstring)."""
    if distance_m is None or pixel_m is None:
        raise ConfigError("experiment.detector_distance_m and experiment.detector_pixel_m: needed for X-ray "
                          "data (or experiment.dx_A), and the data file does not give them")
    if geometry == "far_field":
        return wavelength_A * distance_m / (k * pixel_m), None
    if focus_to_sample_m is None:
        raise ConfigError("experiment.focus_to_sample_m: needed for near_field geometry (Fresnel scaling): the distance "
                          "in m, or auto to measure it from the holograms' motion")
    magnification = (focus_to_sample_m + distance_m) / focus_to_sample_m
    return pixel_m * METRE_IN_A / magnification, distance_m * METRE_IN_A / magnification
