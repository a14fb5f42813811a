"""The descan in the forward model (``data.transform.descan_model: ramp``): the patterns left as
measured, each position's prediction moved on the detector by the descan that
``data.transform.descan: auto`` measured (``ptyacc/data/descan.py``, results.h5 /detector/descan_px).

A shift of the far-field pattern by d = (dy, dx) px is the exit wave times the phase ramp
exp(2 pi i (dy y + dx x) / K), y and x the window's pixel indices (numpy's fft2 sign: the peak of
|fft2(e ramp)|^2 sits d px further along). With one slice the exit wave is the probe times the
object's window, so the same ramp on each position's probe modes gives it: the probe per position
(B, P, K, K) that the data term takes with plain autograd (``registry.py``), no change to the
physics. The model then moves that probe by its sub-pixel rest s (a Fourier shift); a ramp of a
fraction of a cycle across the window is not periodic, so that shift and the ramp do not commute
(the probe's tails at the window's edge: on the independent simulator's 48 px probe, 4 % of the
pattern's peak). So each position's probe is made as the one that the model's shift turns into
the shifted probe times the ramp: ifft2(fft2(ifft2(fft2(P) S) R) conj(S)), S the rest's Fourier
multipliers, R the ramp; the predicted patterns then agree with the simulator's to 1e-6 of their
peak (``tests/test_descan_ramp.py``), at three more FFTs per position and mode.

Over several slices a ramp on the incident probe is a beam tilt, not a detector shift (the tilted
wave walks across the slices), so the ramp is refused there; so are several scans (one descan per
file) and the near field (the descan is a far-field detector's).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from ptyacc.physics import shift_ramp
from ptyacc.quantities.registry import BuildContext, Quantity, register


class DescanRamp(Quantity):
    """Each position's probe modes times the phase ramp of its descan (module docstring).

    Buffers
    - descan_px: (N, 2) float32, the shift (dy, dx) px of each position's pattern, the model's layout
    """

    name = "descan_ramp"

    def __init__(self, descan_px: np.ndarray, window: int,
                 rests: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        super().__init__()
        self.rests = rests  # indices (B,) -> (B, 2) px the sub-pixel rest the model's probe shift supplies
        self.register_buffer("descan_px", torch.as_tensor(np.asarray(descan_px), dtype=torch.float32))
        self.register_buffer("cycles", torch.arange(window, dtype=torch.float32) / window, persistent=False)

    def ramps(self, indices: torch.Tensor) -> torch.Tensor:
        """(B, K, K) complex64: exp(2 pi i (dy y + dx x) / K) of the positions ``indices`` (B,)."""
        shift = self.descan_px[indices]  # (B, 2)
        ramp_y = torch.polar(torch.ones_like(self.cycles), 2 * math.pi * shift[:, :1] * self.cycles)  # (B, K)
        ramp_x = torch.polar(torch.ones_like(self.cycles), 2 * math.pi * shift[:, 1:] * self.cycles)
        return ramp_y[:, :, None] * ramp_x[:, None, :]

    def probes(self, probe: torch.Tensor, indices: torch.Tensor, probe_scale: torch.Tensor) -> torch.Tensor:
        """(B, P, K, K): ``probe`` (P, K, K), or (B, P, K, K) per position, times each position's ramp."""
        ramps = self.ramps(indices).to(probe.dtype)[:, None]
        probe = probe[None] if probe.dim() == 3 else probe
        if self.rests is None:
            return probe * ramps
        shift = shift_ramp(self.rests(indices), probe.shape[-1]).to(probe.dtype)[:, None]  # (B, 1, K, K)
        return torch.fft.ifft2(torch.fft.fft2(torch.fft.ifft2(torch.fft.fft2(probe) * shift) * ramps) * shift.conj())


@register
def descan_in_model(config, model, context: BuildContext) -> DescanRamp | None:
    """``data.transform.descan_model: ramp`` where ``descan: auto`` found a descan to take out (the
    data's /detector ``descan_in_model``); refused over several slices, several scans, the near field."""
    detector = getattr(context.data, "detector", None) or {}
    if config.data.transform.descan_model == "shift" or not bool(detector.get("descan_in_model", False)):
        return None
    setting = "data.transform.descan_model: ramp"
    if model.object.shape[1] > 1:
        raise ValueError(f"{setting} needs one slice (model.slices: 1): over several slices a ramp on the incident "
                         "probe is a beam tilt, not a detector shift; use descan_model: shift")
    if context.scans is not None:
        raise ValueError(f"{setting} takes one scan; use descan_model: shift with several scans")
    if model.near_field:
        raise ValueError(f"{setting} is a far-field detector's; the near field has none")
    context.said.append(f"{setting}: each position's probe times the phase ramp of its measured descan "
                        f"(up to {float(np.abs(detector['descan_px']).max()):.3f} px), the patterns left as read")
    return DescanRamp(detector["descan_px"], model.window, lambda indices: _rests(model, indices))


def _rests(model, indices: torch.Tensor) -> torch.Tensor:
    """(B, 2) px: the sub-pixel rest by which ``model`` (a ``PtychoModel``) shifts the probe at ``indices``."""
    if model.refine_positions:
        return model._window_corners(model._centres(indices))[1]
    return model.fixed_fractions[indices]
