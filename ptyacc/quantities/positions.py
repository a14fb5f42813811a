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

import numpy as np
import torch
from torch import nn

from ptyacc.optim.groups import ParameterGroup, clamp, zero_mean
from ptyacc.quantities.registry import BuildContext, Quantity, register


class PositionCorrections(Quantity):
    """Offsets per position and a scan affine (module docstring).

    Parameters
    - offsets_px: (N, 2) float32 px (y, x), each position's correction (a parameter also when only the
      affine is refined: its group then never starts)
    - scan_affine: (2, 2) float32, the distortion M, or None when not refined or refined as a rotation
    - scan_turn_rad: (1,) float32, the rotation a of ``model.scan_affine: rotation``, or None
    Buffer (not saved: it follows from the data): scan_centre (2,) px, the nominal positions' mean."""

    name = "positions"
    results_group = "fitted"

    def __init__(self, positions_px: torch.Tensor, scan_affine: bool, kind: str = "full") -> None:
        super().__init__()
        self.offsets_px = nn.Parameter(torch.zeros_like(positions_px))
        turn = scan_affine and kind == "rotation"
        self.scan_affine = nn.Parameter(torch.zeros(2, 2)) if scan_affine and not turn else None
        self.scan_turn_rad = nn.Parameter(torch.zeros(1)) if turn else None
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

    def distortion(self) -> torch.Tensor | None:
        """I + M (2, 2) on (y, x) vectors, or None when the scan's shape is not refined."""
        if self.scan_turn_rad is not None:
            c, s = torch.cos(self.scan_turn_rad[0]), torch.sin(self.scan_turn_rad[0])
            return torch.stack([torch.stack([c, s]), torch.stack([-s, c])])  # orientation.rotation's sense
        if self.scan_affine is not None:
            return torch.eye(2, device=self.scan_affine.device) + self.scan_affine
        return None

    def groups(self, config, model, priors) -> list[ParameterGroup]:
        """``positions`` (Adam, ``optim.lr.positions``, offsets clamped after every iteration) and, with an
        affine, ``scan_affine`` (``optim.lr.scan_affine``, the offsets then kept at zero mean)."""
        opt, offsets = config.optim, self.offsets_px
        limit_px = opt.max_position_offset_fraction * model.window
        groups = [ParameterGroup("positions", [offsets], opt.lr.positions, opt.start.positions,
                                 after_iteration=lambda: clamp(offsets, -limit_px, limit_px))]
        shape = self.scan_affine if self.scan_turn_rad is None else self.scan_turn_rad
        if shape is not None:
            groups.append(ParameterGroup("scan_affine", [shape], opt.lr.scan_affine, opt.start.scan_affine,
                                         after_iteration=lambda: zero_mean(offsets)))
        return groups

    def saved(self, model) -> dict[str, np.ndarray]:
        """In results.h5's group ``fitted``: ``scan_affine`` (2, 2) float64 (M), when refined; with the rotation
        alone also ``scan_turn_deg`` float64."""
        with torch.no_grad():
            if self.scan_turn_rad is not None:
                turn = float(self.scan_turn_rad[0])
                c, s = np.cos(turn), np.sin(turn)
                return {"scan_affine": np.array([[c - 1.0, s], [-s, c - 1.0]]), "scan_turn_deg": np.float64(np.degrees(turn))}
            if self.scan_affine is None:
                return {}
            return {"scan_affine": self.scan_affine.double().cpu().numpy()}


@register
def position_corrections(config, model, context: BuildContext) -> PositionCorrections | None:
    """Offsets (and an affine) of the model's positions, when ``optim.start.positions`` or
    ``optim.start.scan_affine`` refines them."""
    start = config.optim.start
    if start.positions is None and start.scan_affine is None:
        return None
    return PositionCorrections(model.positions_px, start.scan_affine is not None, config.model.scan_affine)
