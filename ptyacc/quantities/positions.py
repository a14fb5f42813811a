"""Refined probe positions: an offset per position and the scan's global affine distortion, a
``Quantity`` (``model.quantities["positions"]``), present when either is refined.

The probe centre of position j (px of the object) is

    centre + (I + M) (nominal_j - centre) + offset_j

with nominal_j the data's position (moved with the probe by ``model.recenter``: the model's
``positions_px``), centre the nominal positions' mean moved likewise, M (2, 2) the scan's distortion
(scale, rotation, shear, asymmetry; ``optim.start.scan_affine``) and offset_j (2,) the position's own
correction (``optim.start.positions``). With ``model.scan_affine: rotation`` I + M is the rotation R(a) by one
refined angle a (``scan_turn_rad``, turning +x towards +y as ``experiment.scan_rotation_deg`` does): a scan
rotation measured a few degrees off is one number the data fix well, where four terms also take up
what the probe and the object should explain. Centring M on the scan's mean keeps it from moving the scan
as a whole. The offsets are kept within ``optim.max_position_offset_fraction`` of the window after every
iteration and, with a refined affine, at zero mean (a common shift of all offsets would drift along
with the affine). The nominal positions, their window corners and the scan's shift stay the model's:
the forward pass of fixed positions reads them without a quantity.

results.h5: the positions themselves are ``/positions_A``; a refined M is ``/fitted/scan_affine`` (with the
rotation alone also ``/fitted/scan_turn_deg``, the angle added to the scan rotation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ptyacc.optim.groups import ParameterGroup, clamp, zero_mean
from ptyacc.quantities.registry import BuildContext, Quantity, register


def _affine(m: torch.Tensor) -> torch.Tensor:
    """I + M (2, 2) from the distortion M (2, 2) itself."""
    return torch.eye(2, dtype=m.dtype, device=m.device) + m


def _turn(angle_rad: torch.Tensor) -> torch.Tensor:
    """R(a) (2, 2) from the angle a (1,) rad, ``orientation.rotation``'s sense (+x towards +y)."""
    c, s = torch.cos(angle_rad[0]), torch.sin(angle_rad[0])
    return torch.stack([torch.stack([c, s]), torch.stack([-s, c])])


@dataclass(frozen=True)
class ScanShape:
    """What ``model.scan_affine`` refines of the scan's shape: one parameter, the quantity's attribute (and
    checkpoint entry) ``parameter`` of zeros of ``size`` at the start (no distortion), from which
    ``matrix`` gives I + M (2, 2) in its dtype, and what results.h5 keeps of it beside M (``saved``)."""

    parameter: str
    size: tuple[int, ...]
    matrix: Callable[[torch.Tensor], torch.Tensor]
    saved: Callable[[torch.Tensor], dict[str, np.ndarray]]


SCAN_SHAPES = {"full": ScanShape("scan_affine", (2, 2), _affine, lambda m: {}),
               "rotation": ScanShape("scan_turn_rad", (1,), _turn,
                                     lambda a: {"scan_turn_deg": np.float64(np.degrees(float(a[0])))})}


class PositionCorrections(Quantity):
    """Offsets per position and a scan affine (module docstring).

    Parameters
    - offsets_px: (N, 2) float32 px (y, x), each position's correction (a parameter also when only the
      affine is refined: its group then never starts)
    - the scan shape's one parameter, where refined (``shape``, a ``ScanShape``): scan_affine (2, 2) float32,
      the distortion M (``model.scan_affine: full``), or scan_turn_rad (1,) float32, the rotation a
      (``rotation``)
    Buffer (not saved: it follows from the data): scan_centre (2,) px, the nominal positions' mean."""

    name = "positions"
    results_group = "fitted"

    def __init__(self, positions_px: torch.Tensor, scan_shape: str | None = None) -> None:
        """``scan_shape``: ``model.scan_affine`` (full, rotation) where the scan's shape is refined, else None."""
        super().__init__()
        self.offsets_px = nn.Parameter(torch.zeros_like(positions_px))
        self.shape = None if scan_shape is None else SCAN_SHAPES[scan_shape]
        if self.shape is not None:
            self.register_parameter(self.shape.parameter, nn.Parameter(torch.zeros(self.shape.size)))
        self.register_buffer("scan_centre", positions_px.mean(0), persistent=False)

    def centres(self, nominal: torch.Tensor, indices: torch.Tensor, scan_shift_px: torch.Tensor) -> torch.Tensor:
        """(B, 2) px: the centres of the positions ``indices`` (B,) from their ``nominal`` ones (B, 2),
        distorted by the affine (about the scan's centre, moved by ``scan_shift_px`` (2,) as they
        were), plus the offsets."""
        distortion = self.distortion()
        if distortion is not None:
            centre = self.scan_centre + scan_shift_px
            nominal = centre + (nominal - centre) @ distortion.T
        return nominal + self.offsets_px[indices]

    def distortion(self, dtype: torch.dtype | None = None) -> torch.Tensor | None:
        """I + M (2, 2) on (y, x) vectors, in the parameter's dtype or ``dtype``, or None when the scan's
        shape is not refined."""
        if self.shape is None:
            return None
        parameter = getattr(self, self.shape.parameter)
        return self.shape.matrix(parameter if dtype is None else parameter.to(dtype))

    def groups(self, config, model, priors) -> list[ParameterGroup]:
        """``positions`` (Adam, ``optim.lr.positions``, offsets clamped after every iteration) and, with an
        affine, ``scan_affine`` (``optim.lr.scan_affine``, the offsets then kept at zero mean)."""
        opt, offsets = config.optim, self.offsets_px
        limit_px = opt.max_position_offset_fraction * model.window
        groups = [ParameterGroup("positions", [offsets], opt.lr.positions, opt.start.positions,
                                 after_iteration=lambda: clamp(offsets, -limit_px, limit_px))]
        if self.shape is not None:
            groups.append(ParameterGroup("scan_affine", [getattr(self, self.shape.parameter)], opt.lr.scan_affine,
                                         opt.start.scan_affine, after_iteration=lambda: zero_mean(offsets)))
        return groups

    def saved(self, model) -> dict[str, np.ndarray]:
        """In results.h5's group ``fitted``: ``scan_affine`` (2, 2) float64 (M), when refined; with the rotation
        alone also ``scan_turn_deg`` float64."""
        if self.shape is None:
            return {}
        with torch.no_grad():
            distortion = self.distortion(torch.float64)
            affine = distortion - torch.eye(2, dtype=distortion.dtype, device=distortion.device)
            return {"scan_affine": affine.cpu().numpy(), **self.shape.saved(getattr(self, self.shape.parameter))}


@register
def position_corrections(config, model, context: BuildContext) -> PositionCorrections | None:
    """Offsets (and an affine) of the model's positions, when ``optim.start.positions`` or
    ``optim.start.scan_affine`` refines them."""
    start = config.optim.start
    if start.positions is None and start.scan_affine is None:
        return None
    return PositionCorrections(model.positions_px, None if start.scan_affine is None else config.model.scan_affine)
