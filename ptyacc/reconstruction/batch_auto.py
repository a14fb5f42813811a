"""``optim.batch_size: auto``: the batch from the data, resolved when the run is built (``auto_batch``, a
``BatchChoice``; ``ptyacc init``'s comment and ``ptyacc bench`` take the same rule).

- Where ``data.transform.descan: auto`` moved the patterns (a sub-pixel shift of each pattern's counts,
  ``ptyacc/data/descan.py``): every position in one step per iteration, at most ``WHOLE_SCAN_PIXELS``
  pattern pixels in a step (the positions' share of the memory). A shifted pattern is not the pattern
  the descan's model would predict at the shift's place (the intensity's samples do not carry it between
  pixels; the aperture's sharp edge rings), and each batch's least-squares step writes its own part of that
  misfit into the object's low spatial frequencies: on the independent simulator's every-effect case (32 x 32
  raster, 3e4 counts, descan up to 0.7 px) 60 iterations at batch 128 reached a phase NCC of 0.934 coherent and
  0.833 partly coherent, one step per iteration 0.961 and 0.905; on the same case with the descan alone 0.364
  against 0.925, with a noise-free dose 0.42 at batch 128 (docs/explanation/autos.md, "The batch size from the data").
- Otherwise about an eighth of the positions, 4 to 256 (about 8 steps per iteration): what ``ptyacc init``
  wrote before this key had auto, with which low-dose data fit their noise less than at the schema's 32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ptyacc.data import PtychoData

WHOLE_SCAN_PIXELS = 2**24  # pattern pixels in one step at most (e.g. 4096 patterns of 64 x 64, 256 of 256 x 256)
STEPS = 8  # steps per iteration otherwise
SMALLEST, LARGEST = 4, 256  # the batch's bounds otherwise


def descan_moved(data: PtychoData) -> bool:
    """Whether ``data.transform.descan: auto`` shifted any of ``data``'s patterns (not where the model
    moves its predictions instead, ``descan_model: ramp``)."""
    descan = None if data.autocalibration is None else data.autocalibration.descan
    return descan is not None and descan.moves_patterns


@dataclass(frozen=True)
class BatchChoice:
    """``optim.batch_size: auto`` as resolved for a run: ``size`` positions a step of its ``positions``
    fitted ones, and ``why`` in run.log's words."""

    size: int
    positions: int
    why: str

    def said(self) -> str:
        """run.log's line, e.g. "optim.batch_size: 72 of 576 positions (auto: about 8 steps per iteration)"."""
        return f"optim.batch_size: {self.size} of {self.positions} positions (auto: {self.why})"


def steps_batch(positions: int) -> int:
    """The batch of about ``STEPS`` steps per iteration over ``positions`` positions, ``SMALLEST`` to ``LARGEST``:
    the rule where the patterns stay as read."""
    return int(np.clip(positions // STEPS, SMALLEST, LARGEST))


def resolved_batch(positions: int, detector_px: int, moved: bool) -> BatchChoice:
    """``optim.batch_size`` for ``auto``, for ``positions`` fitted positions of ``detector_px`` px
    patterns whose descan was shifted out (``moved``) or not."""
    if moved:
        most = max(WHOLE_SCAN_PIXELS // detector_px**2, 1)
        batch = min(positions, most)
        why = ("one step per iteration" if batch == positions else f"at most {most} patterns of {detector_px} px a step")
        return BatchChoice(batch, positions, f"{why}: the descan shifted the patterns (data.transform.descan), which "
                                             "small batches fit")
    return BatchChoice(steps_batch(positions), positions, f"about {STEPS} steps per iteration")


def auto_batch(data: PtychoData, fitted: int) -> BatchChoice:
    """``resolved_batch`` for ``data``'s patterns, ``fitted`` of its positions fitted (all less those left out
    for validation): what a run takes for ``optim.batch_size: auto``."""
    return resolved_batch(fitted, data.detector_px, descan_moved(data))
