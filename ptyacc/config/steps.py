"""The ``optim.lr``, ``optim.start`` and ``optim.stop`` sections: how large each quantity's Adam step is, from
which iteration it is updated, and when a run has converged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ptyacc.config.fields import _f, _require


@dataclass
class LearningRates:
    """Adam learning rates in natural units: radians (object phase), relative amplitude
    (object amplitude and probe, which is stored scaled to a peak of 1) and pixels (positions)."""

    object: float = _f(1e-2, "Object amplitude and phase step size of Adam (optim.object_optimizer); 0 freezes the "
                             "object with either optimizer. Another value than 0.01 makes object_optimizer: auto "
                             "choose adam.")
    probe: float = _f(1e-2, "Probe step size of Adam (relative to its peak amplitude; optim.probe_optimizer); 0 "
                            "freezes the probe with either optimizer. Another value than 0.01 makes "
                            "probe_optimizer: auto choose adam.")
    positions: float = _f(0.1, "Position step size of Adam in pixels. A position's gradient comes once per iteration, "
                               "with its batch, and Adam's momentum carries it over the iteration's other steps: 0.1 "
                               "corrects errors of a pixel or two in 20 iterations (docs/how-to/tilt-thickness-distortion.md, "
                               "scan distortion).")
    detector: float = _f(1e-3, "Background and intensity-weight step size (relative to the mean pixel count and to 1).")
    tilt: float = _f(0.5, "Tilt step size of Adam in mrad. The tilt takes one step per batch: 0.5 brings a 2-3 mrad "
                          "mistilt of a thick crystal within 0.3 mrad in 40 iterations, 0.1 only to about 0.5 "
                          "(docs/how-to/tilt-thickness-distortion.md).")
    slice_thickness: float = _f(0.05, "Slice thickness step size, relative to model.slice_thickness_A.")
    scan_affine: float = _f(5e-3, "Scan affine step size (dimensionless: the entries of the 2 x 2 distortion).")
    probe_amplitude: float = _f(1e-2, "Step size of the main probe mode's amplitude at each position (relative to 1; "
                                      "model.probe_variation: a beam current that fluctuates).")
    probe_variation: float = _f(3e-2, "Adam's step size of the eigen-probes' weights per position and, where the probe "
                                      "takes Adam's step (optim.probe_optimizer: adam), of the eigen-probes (relative "
                                      "to the probe's peak amplitude); otherwise the eigen-probes take the probe's "
                                      "least-squares step (optim.preconditioned_probe_step). 0 freezes both "
                                      "(model.probe_variation).")
    probe_defocus: float = _f(1.0, "Adam's step size of each position's change of focus (model.probe_variation_eigen: "
                                   "defocus), in units of the change that alters the probe by its own norm (1 / (pi "
                                   "lambda rms(q^2)) over the probe's spectrum: 36 Å at 80 kV and 25 mrad). 0 freezes it.")
    detector_blur: float = _f(0.05, "Step size of the detector blur's variance (sigma squared) in px^2.")
    probe_focus: float | Literal["auto"] = _f(
        "auto", "Adam's step size of the probe's change of focus (optim.start.probe_focus), in Å per step. auto: 1 for "
                "electrons; for X-rays 0.03 of the change of focus that alters the initial probe by its own norm "
                "(1 / (pi lambda rms(q^2)) over its spectrum; a zone plate's beam at 8 keV and numerical aperture 4e-4: "
                "about 1.7e5 Å, 17 µm); run.log says which.")
    probe_astigmatism: float = _f(1.0, "Adam's step size of the probe's change of two-fold astigmatism, C12a and C12b "
                                       "(optim.start.probe_astigmatism), in Å per step.")

    def _check(self, path: str) -> None:
        for name in ("object", "probe", "positions", "detector", "tilt", "slice_thickness", "scan_affine",
                     "probe_amplitude", "probe_variation", "probe_defocus", "detector_blur", "probe_focus",
                     "probe_astigmatism"):
            if name == "probe_focus" and self.probe_focus == "auto":
                continue
            _require(getattr(self, name) >= 0, f"{path}.{name}", f"must be >= 0, got {getattr(self, name)}")


@dataclass
class StartIterations:
    """Iteration (0-based) from which each quantity is updated; null = never."""

    object: int | None = _f(0, "First iteration that updates the object.")
    probe: int | None = _f(1, "First iteration that updates the probe.")
    positions: int | None = _f(None, "First iteration that refines positions; null = positions fixed.")
    detector: int | Literal["probe"] | None = _f(
        "probe", "First iteration that updates the detector background and intensity weights; probe = with the probe.")
    tilt: int | None = _f(None, "First iteration that refines the tilt (multislice); null = fixed at "
                                "experiment.tilt_mrad. Start it once the object shows structure (a few iterations): "
                                "through a flat object the tilt changes nothing and its gradient is rounding noise.")
    slice_thickness: int | None = _f(None, "First iteration that refines model.slice_thickness_A (multislice); "
                                           "null = fixed. Like tilt, start it once the object shows structure.")
    scan_affine: int | None = _f(
        None, "First iteration that refines a global affine distortion of the scan (scale, rotation, shear, "
              "asymmetry about the scan's centre: drift, a miscalibrated step); with it the mean position "
              "correction is kept at zero. Start it with or before positions. null = off.")
    detector_blur: int | None = _f(
        None, "First iteration that refines the detector blur (model.detector_blur_px, from its value there, 0 "
              "included); null = fixed at that value.")
    probe_focus: int | None = _f(
        None, "First iteration that refines one change of focus for every probe mode (a Fresnel propagation, put into "
              "the probe after every iteration); run.log and results.h5 (probe_focus_change_A) say how far it moved "
              "and the experiment.defocus_A that starts a run there. One scan only. null = off.")
    probe_astigmatism: int | None = _f(
        None, "First iteration that refines one change of two-fold astigmatism (C12a, C12b) for every probe mode (put "
              "into the probe after every iteration); run.log and results.h5 (probe_c12a_change_A, probe_c12b_change_A) "
              "say how far it moved and the experiment.aberrations that start a run there. One scan only. null = off.")

    probe_variation: int | Literal["probe"] | None = _f(
        "probe", "First iteration that updates the eigen-probes, their weights and the main mode's amplitude per "
                 "position of model.probe_variation; probe = with the probe.")

    def _check(self, path: str) -> None:
        for name in ("object", "probe", "positions", "detector", "tilt", "slice_thickness", "scan_affine",
                     "probe_variation", "detector_blur", "probe_focus", "probe_astigmatism"):
            value = getattr(self, name)
            _require(value is None or value == "probe" or value >= 0, f"{path}.{name}",
                     f"must be >= 0 or null, got {value}")


# optim.iterations: auto runs at most this many iterations, and stops by optim.stop (gain AUTO_GAIN where not given)
AUTO_ITERATIONS = 300
AUTO_GAIN = 0.02


@dataclass
class StopRule:
    """When a run ends before optim.iterations: once its loss has stopped falling. Judged after every iteration
    from the loss per pattern (all processes together, so every process decides alike), from the iteration after
    the last quantity starts (optim.start) plus a window on."""

    gain: float | None = _f(
        None, "Converged when the loss fell over the last `window` iterations by less than this fraction of its whole "
              "fall (from its highest value; 0.02: the last window gained less than 2 % of what the run gained). "
              "The learning rates then fall to optim.lr_final_fraction over `final_iterations` iterations and the "
              "run ends. null: run every one of optim.iterations (0.02 where optim.iterations is auto).")
    window: int = _f(10, "Iterations over which the loss's last fall is measured (several: the loss of one iteration "
                        "is noisy, of one window less so).")
    final_iterations: int = _f(
        10, "Iterations after convergence, over which the learning rates fall along a cosine from where the schedule "
            "had them to optim.lr_final_fraction: a run gains its last detail as its steps shrink.")

    def _check(self, path: str) -> None:
        _require(self.gain is None or 0 < self.gain < 1, f"{path}.gain", f"must be in (0, 1) or null, got {self.gain}")
        _require(self.window >= 1, f"{path}.window", f"must be >= 1, got {self.window}")
        _require(self.final_iterations >= 0, f"{path}.final_iterations", f"must be >= 0, got {self.final_iterations}")
