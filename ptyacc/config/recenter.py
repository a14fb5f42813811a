"""The ``model.recenter`` section: constraints that keep the reconstruction in place (its own
module so that schema.py stays one screenful per section)."""

from __future__ import annotations

from dataclasses import dataclass

from ptyacc.config.fields import _f, _require


@dataclass
class RecenterConfig:
    """Keep the reconstruction in place (docs/how-to/tilt-thickness-distortion.md, "Keeping the reconstruction in
    place"). All but hold_probe off by default; each runs after every iteration, identically on every process."""

    probe: bool = _f(
        False, "Move the probe's centre of mass (all modes' intensity) back to the window centre, moving every "
               "position by the same amount so that the predicted patterns do not change (far field): the probe "
               "and the object can otherwise drift together by a fraction of a pixel. The saved object's "
               "origin_A follows; positions_A stay in the data's frame.")
    hold_probe: bool = _f(
        True, "Keep the centre of mass of the probe's first (strongest) mode where the initial probe has it "
              "(far field; model.recenter.probe instead centres all modes in the window): after every iteration "
              "the probe is moved back by its drift and every position with it, so the predicted patterns do not "
              "change and the object stays where the positions put it, even when the initial probe's centre of "
              "mass is not the window centre (a defocused probe whose tails wrap around its window). The first "
              "mode only: the weaker modes' shapes change as they grow, which moves their centres of mass but not "
              "the object. Ignored for near-field data. false: earlier versions' results.")
    probe_mask_mrad: float | None = _f(
        None, "Electrons: zero the probe's spectrum beyond this angle (mrad; a little above "
              "experiment.semiangle_mrad), so that it cannot grow intensity outside the aperture. null = off.")
    object_z: bool = _f(
        False, "Multislice: when the object's depth centre of mass (phase weight per slice) is more than a slice "
               "from the middle, move the slices by whole slices toward the middle (an emptied slice is flat) and "
               "the probe's focus by the same distance, so the object stays inside its slices instead of drifting "
               "into the first or last one.")

    def _check(self, path: str) -> None:
        _require(self.probe_mask_mrad is None or self.probe_mask_mrad > 0, f"{path}.probe_mask_mrad",
                 f"must be > 0 or null, got {self.probe_mask_mrad}")
