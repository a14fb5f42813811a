"""The detector's point spread (``physics/detector_blur.py``), fixed or refined: a ``Quantity``,
``model.quantities["detector_blur"]``, results.h5's attribute ``detector_blur_px``.

Its state is the variance (px^2) of the Gaussian point spread, not its sigma: a blur refined from
none (``model.detector_blur_px: 0``) has a gradient in the variance and none in sigma. Given but not
refined (``model.detector_blur_px`` > 0), it is a buffer the optimizers never see; refined
(``optim.start.detector_blur``), a parameter of its own group (``optim.lr.detector_blur``), kept >= 0
after every step. Without either, there is no blur and no quantity (the run is the same as before
the blur existed).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ptyacc.optim.groups import ParameterGroup, clamp
from ptyacc.physics import Detector
from ptyacc.quantities.registry import BuildContext, Quantity, register


class DetectorBlur(Quantity):
    """The point spread of the detection (module docstring).

    Parameter, or buffer when fixed: variance_px2 () float32 px^2."""

    name = "detector_blur"

    def __init__(self, sigma_px: float, refined: bool) -> None:
        super().__init__()
        variance = torch.tensor(float(sigma_px) ** 2)
        if refined:
            self.variance_px2 = nn.Parameter(variance)
        else:
            self.register_buffer("variance_px2", variance)

    def detection(self, detector: Detector) -> Detector:
        return dataclasses.replace(detector, blur_variance_px2=self.variance_px2)

    def sigma_px(self) -> float:
        """The point spread's sigma (px) now."""
        return float(self.variance_px2.detach().clamp_min(0.0).sqrt())

    def groups(self, config, model, priors) -> list[ParameterGroup]:
        blur = self.variance_px2
        if not isinstance(blur, nn.Parameter):
            return []
        opt = config.optim
        return [ParameterGroup("detector_blur", [blur], opt.lr.detector_blur, opt.start.detector_blur,
                               after_step=lambda: clamp(blur, 0.0, None))]

    def attributes(self, model) -> dict[str, float]:
        """results.h5's attribute ``detector_blur_px``: the sigma at the end (px of the prepared patterns)."""
        return {"detector_blur_px": self.sigma_px()}


@register
def detector_blur(config, model, context: BuildContext) -> DetectorBlur | None:
    """The blur of ``model.detector_blur_px``, refined with ``optim.start.detector_blur``; None without either."""
    refined = config.optim.start.detector_blur is not None
    if not refined and config.model.detector_blur_px <= 0:
        return None
    return DetectorBlur(config.model.detector_blur_px, refined)
