"""The ``optim.regularize`` section: priors on the object (its own module so that schema.py stays
one screenful per section)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ptyacc.config.fields import _f, _require


@dataclass
class RegularizeConfig:
    """Optional priors on the object, all off by default but a light phase TV smoothing of multislice
    objects (see "Regularisers: when to use them" in benchmarks/records/2026-11-27-benchmarks.md). They act identically on
    every process, whatever the process count."""

    tv_phase: float | Literal["auto"] = _f(
        0.0, "Weight of the phase total variation, added to the data loss summed over all patterns: weight x the "
             "sum over object pixels, slices and modes of sqrt(dy^2 + dx^2 + eps^2) - eps, dy and dx the lengths of "
             "the differences between a pixel's unit phasor (transmission / amplitude) and its neighbours' below "
             "and to the right (about the phase steps in rad, free of 2 pi wrapping). Low dose: about 0.3-1 with "
             "the amplitude loss (more with poisson, whose gradient grows with the dose); sweep by factors of 3. "
             "0 = off. auto: 1 for a multislice object (model.slices > 1), 0 for one slice, the grid's multislice "
             "choice (benchmarks/records/2026-11-27-quality-grid.md, 'A multislice prior'); the run says what auto chose. "
             "A TV makes runs on different process counts or with runtime.shard_object agree less closely (there, to "
             "about 1e-3).")
    tv_epsilon_rad: float = _f(
        1e-3, "Smoothing of the total variation (rad): phase steps much smaller than this are penalised "
              "quadratically, so the penalty is differentiable at zero.")
    depth_blur_slices: float | Literal["auto"] = _f(
        "auto", "Multislice (model.slices > 1): after every iteration, blur the object's amplitude and phase along "
                "depth with a Gaussian of this standard deviation in slices, mirrored at the top and bottom slice "
                "(a low-pass in kz that keeps each pixel's summed phase and never mixes top with bottom); "
                "0.3-1 typical (it acts every iteration, so its effect builds up), 0 = off. auto (the default): 1 "
                "on several slices of a strongly scattering sample (more than 4 % of the mean pattern's counts "
                "beyond the bright-field disk, as for optim.loss: auto; benchmarks/records/2026-11-27-thick-crystals.md, "
                "'Against PtyRAD on thick crystals'), 4 there where the tilt is refined (optim.start.tilt: free slices "
                "shear to absorb a tilt; docs/how-to/tilt-and-sampling.md), else 0; the run says what auto chose.")
    depth_blur_start_slices: float | Literal["auto"] = _f(
        "auto", "Multislice: the depth blur (as depth_blur_slices) held over the run's first stage, which ends where the "
                "stop rule first finds the run converged (optim.iterations: auto or optim.stop.gain; the rule then "
                "judges again) or after half of a fixed optim.iterations; depth_blur_slices from then on. A strong "
                "blur first holds the slices of a thick crystal alike while its projected structure forms, where free "
                "slices converge for hundreds of iterations; the weaker one then gives the depth detail back "
                "(docs/how-to/tilt-thickness-distortion.md, 'Thick crystals'). auto (the default): three quarters of the slices "
                "where depth_blur_slices is auto and takes its strong-scattering value (not where the tilt is refined), "
                "else depth_blur_slices (one stage); the run says what auto chose.")
    lateral_blur_px: float | Literal["auto"] = _f(
        0.0, "After every iteration, blur the amplitude and the phase of every slice in y and x with a Gaussian of "
             "this standard deviation in object pixels (taps out to 4 sigma), mirrored at the object's edges (each "
             "slice's summed phase is kept); PtyRAD's obj_rblur (0.4 px). For noisy, smooth objects; it blurs "
             "features narrower than a few sigma. 0 = off. auto: 0.3 for a multislice object (model.slices > 1), "
             "0 for one slice (benchmarks/records/2026-11-27-quality-grid.md, 'A multislice prior'); the run says what auto "
             "chose.")
    tv_phase_smoothing: float | Literal["auto"] = _f(
        "auto", "After every iteration, one descent step on the phase total variation of tv_phase (with "
                "tv_epsilon_rad): the object less this step times the penalty's gradient with respect to its real "
                "and imaginary parts (a phase change of about this many rad where neighbours differ). Not fed to "
                "Adam, so runs on any number of processes, the object split or not, agree as closely as without "
                "it. 0 = off. auto (the default): 0 for one slice; for a multislice object (model.slices > 1) on counted "
                "patterns 0.001 x sqrt(2900 / the electrons per object pixel) within 0.0005-0.002 (the noise per "
                "pixel sets it; benchmarks/records/2026-11-27-quality-grid.md, 'The TV smoothing step from the dose'), 0 on "
                "patterns that are not counts (their noise unknown: 'Multislice data that are not counts'); the run says what "
                "auto chose.")

    def _check(self, path: str) -> None:
        for name in ("tv_phase", "lateral_blur_px", "tv_phase_smoothing", "depth_blur_slices", "depth_blur_start_slices"):
            value = getattr(self, name)
            _require(value == "auto" or value >= 0, f"{path}.{name}", f"must be auto or >= 0, got {value}")
        _require(self.tv_epsilon_rad > 0, f"{path}.tv_epsilon_rad", f"must be > 0, got {self.tv_epsilon_rad}")
