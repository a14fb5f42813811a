"""The initial probe's sources beyond the electron optics: a probe file (``model.probe_init``) and
an X-ray beam's focusing optics (``experiment.optics``), in their own module so that schema.py
stays one screenful per section."""

from __future__ import annotations

from dataclasses import dataclass

from ptyacc.config.fields import _f, _require


@dataclass
class ProbeFileConfig:
    """A complex probe (K x K, or modes x K x K) that starts the run instead of the one built from
    the optics or the patterns: resampled to the window's pixel when its own differs (Fourier
    interpolation, then cropped or padded to the window), its power scaled to the data's counts."""

    path: str = _f("", "The probe file, relative to the config file: .npy, HDF5 or CXI (a complex dataset, or a "
                       "compound of real and imag; a CXI file's entry_1/instrument_1/source_1/probe or "
                       "entry_1/data_1/probe, entry/... likewise), MATLAB .mat (PtychoShelves' `probe` as "
                       "(y, x[, modes...]); v7.3 through h5py, v5 needs scipy), or a results.h5.")
    key: str | None = _f(None, "Dataset or variable holding the probe; default the first of probe, the CXI "
                               "places above, or the file's one complex array.")
    pixel_m: float | None = _f(None, "The probe's pixel in m; default what the file says (a dataset attribute "
                                     "pixel_m or dx_A, a results.h5's dx_A, PtychoShelves' p.dx_spec), else the "
                                     "window's pixel.")

    def _check(self, path: str) -> None:
        _require(bool(self.path), f"{path}.path", "the probe file is needed")
        _require(self.pixel_m is None or self.pixel_m > 0, f"{path}.pixel_m", f"must be > 0, got {self.pixel_m}")


@dataclass
class XrayOpticsConfig:
    """An X-ray beam's focusing optics (far field): the initial probe is their pupil, with its
    central stop, advanced from the focus to the sample by experiment.focus_to_sample_m."""

    outer_zone_width_m: float | None = _f(None, "A Fresnel zone plate's outer zone width in m: numerical "
                                                "aperture = wavelength / (2 outer_zone_width_m).")
    diameter_m: float | None = _f(None, "The optic's diameter (zone plate) or aperture (KB) in m; with focal_length_m "
                                        "the numerical aperture is diameter / (2 focal length).")
    focal_length_m: float | None = _f(None, "The optic's focal length in m (with diameter_m).")
    central_stop_fraction: float = _f(0.0, "The central stop's diameter as a fraction of the optic's (zone plates: "
                                           "often 0.3-0.5); 0 = none.")

    def numerical_aperture(self, wavelength_m: float) -> float:
        """The beam's numerical aperture: from the outer zone width, else from diameter and focal length."""
        if self.outer_zone_width_m is not None:
            return wavelength_m / (2 * self.outer_zone_width_m)
        return self.diameter_m / (2 * self.focal_length_m)

    def _check(self, path: str) -> None:
        for name in ("outer_zone_width_m", "diameter_m", "focal_length_m"):
            value = getattr(self, name)
            _require(value is None or value > 0, f"{path}.{name}", f"must be > 0, got {value}")
        _require(self.outer_zone_width_m is not None or (self.diameter_m is not None and self.focal_length_m is not None),
                 path, "give outer_zone_width_m, or diameter_m and focal_length_m (the numerical aperture)")
        _require(0 <= self.central_stop_fraction < 1, f"{path}.central_stop_fraction",
                 f"must be in [0, 1), got {self.central_stop_fraction}")
