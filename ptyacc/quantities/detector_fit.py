"""What the detector adds to every pattern and how bright each pattern is, fitted to the data
(``model.background``, ``model.intensity_weights``): a ``Quantity``, results.h5's group ``fitted``.

- background: (K, K) counts added to every predicted pattern (unshifted layout), stored in units of
  the data's mean count per pixel (``background_scale``), so that one Adam step size
  (``optim.lr.detector``) means the same on every dataset;
- intensity weights: (N,) a factor of each position's predicted pattern (a beam current that
  varies, a scan whose dwell times differ).

The weights start at 1, the background at ``model.background_start_counts`` on every pixel (0, or the
dark field's flat floor that ``model.background: auto`` found); both are stepped by one Adam
(``optim.lr.detector``, from ``optim.start.detector``, which may say ``probe``: with the probe) and are
kept >= 0 after every step: a negative background or weight could make an intensity negative (the
Poisson loss undefined).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ptyacc.optim.groups import ParameterGroup, clamp
from ptyacc.quantities.registry import BuildContext, Quantity, register


class DetectorFit(Quantity):
    """A fitted background and/or intensity weights (module docstring); each None when not fitted."""

    name = "fitted"

    def __init__(self, window: int, positions: int, background: bool, weights: bool,
                 background_scale: float = 1.0, background_start: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("background_scale", torch.tensor(float(background_scale)))
        self.background = (nn.Parameter(torch.full((window, window), background_start / background_scale))
                           if background else None)
        self.intensity_weights = nn.Parameter(torch.ones(positions)) if weights else None

    def intensity_factor(self, indices: torch.Tensor) -> torch.Tensor | None:
        return self.intensity_weights[indices] if self.intensity_weights is not None else None

    def added_background(self) -> torch.Tensor | None:
        return self.background * self.background_scale if self.background is not None else None

    def groups(self, config, model, priors) -> list[ParameterGroup]:
        fitted = [p for p in (self.background, self.intensity_weights) if p is not None]
        start = config.optim.start
        return [ParameterGroup("detector", fitted, config.optim.lr.detector,
                               start.probe if start.detector == "probe" else start.detector,
                               after_step=lambda: [clamp(p, 0.0, None) for p in fitted])]

    def saved(self, model) -> dict[str, np.ndarray]:
        """``background`` (K, K) float64 in counts, unshifted layout; ``intensity_weights`` (N,) float64."""
        saved = {}
        with torch.no_grad():
            if self.background is not None:
                saved["background"] = self.added_background().double().cpu().numpy()
            if self.intensity_weights is not None:
                saved["intensity_weights"] = self.intensity_weights.double().cpu().numpy()
        return saved


@register
def detector_fit(config, model, context: BuildContext) -> DetectorFit | None:
    """``model.background`` and ``model.intensity_weights``, when either is asked for (a background left auto, not
    resolved from the data, is not)."""
    background = config.model.background is True
    if not (background or config.model.intensity_weights):
        return None
    pixel_mean = context.mean_intensity / model.window ** 2 if context.mean_intensity else 1.0
    start = config.model.background_start_counts
    return DetectorFit(model.window, len(model.positions_px), background, config.model.intensity_weights,
                       pixel_mean, 0.0 if start == "auto" else float(start))
