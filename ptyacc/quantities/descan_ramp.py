"""The descan in the forward model (``data.transform.descan_model: ramp``): the patterns left as
measured, each position's prediction moved on the detector by the descan that
``data.transform.descan: auto`` measured (``ptyacc/data/descan.py``, results.h5 /detector/descan_px).

A shift of the far-field pattern by d = (dy, dx) px is the exit wave times the phase ramp
R = exp(2 pi i (dy y + dx x) / K), y and x the window's pixel indices (numpy's fft2 sign: the peak of
|fft2(e R)|^2 sits d px further along), exactly, for any d and any exit wave. So this quantity gives
the model each position's R (``exit_ramp``), and the data term multiplies the exit wave after the
last slice by it (``Multislice``: folded into the last slice's windows, conj(R) on that slice's
gradient, no FFT more): the probe, its sub-pixel shift and the slices stay as they are, the
predicted patterns agree with the independent simulator's to 1e-6 of their peak on one slice and on
several (``tests/test_descan_ramp.py``).

A ramp on the incident probe instead is not the same: over several slices it is a beam tilt (the
tilted wave walks across the slices), and on one slice it does not commute with the probe's
sub-pixel Fourier shift (a fraction of a cycle across the window is not periodic). Several scans
(one descan per file) and the near field (the descan is a far-field detector's) are refused.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ptyacc.quantities.registry import BuildContext, Quantity, register


class DescanRamp(Quantity):
    """Each position's exit wave times the phase ramp of its descan (module docstring).

    Buffers
    - descan_px: (N, 2) float32, the shift (dy, dx) px of each position's pattern, the model's layout
    """

    name = "descan_ramp"

    def __init__(self, descan_px: np.ndarray, window: int) -> None:
        super().__init__()
        self.register_buffer("descan_px", torch.as_tensor(np.asarray(descan_px), dtype=torch.float32))
        self.register_buffer("cycles", torch.arange(window, dtype=torch.float32) / window, persistent=False)

    def exit_ramp(self, indices: torch.Tensor) -> torch.Tensor:
        """(B, K, K) complex64: exp(2 pi i (dy y + dx x) / K) of the positions ``indices`` (B,)."""
        shift = self.descan_px[indices]  # (B, 2)
        ramp_y = torch.polar(torch.ones_like(self.cycles), 2 * math.pi * shift[:, :1] * self.cycles)  # (B, K)
        ramp_x = torch.polar(torch.ones_like(self.cycles), 2 * math.pi * shift[:, 1:] * self.cycles)
        return ramp_y[:, :, None] * ramp_x[:, None, :]


@register
def descan_in_model(config, model, context: BuildContext) -> DescanRamp | None:
    """``data.transform.descan_model: ramp`` where ``descan: auto`` found a descan to take out (the
    load's ``AutoCalibration.descan``, results.h5's /detector ``descan_in_model``); refused over several
    scans and in the near field."""
    found = context.data.autocalibration
    descan = None if found is None else found.descan
    if config.data.transform.descan_model == "shift" or descan is None or not descan.in_model:
        return None
    setting = "data.transform.descan_model: ramp"
    if context.scans is not None:
        raise ValueError(f"{setting} takes one scan; use descan_model: shift with several scans")
    if model.near_field:
        raise ValueError(f"{setting} is a far-field detector's; the near field has none")
    context.said.append(f"{setting}: each exit wave times the phase ramp of its position's measured descan "
                        f"(up to {float(np.abs(descan.shifts_px).max()):.3f} px), the patterns left as read")
    return DescanRamp(descan.shifts_px, model.window)
