"""``optim.regularize.tv_phase: auto`` (the default): the phase total variation that a run gets
when the user names no weight, resolved from the config alone, the same on every process.

- One slice: 0 (off). On the abTEM MoS2 demo, whose atoms are sharp, every weight tried lowers
  the single-slice NCC at low dose (5e3 electrons: 0.8900 at 0, 0.8875 at 1, 0.8748 at 3).
- Several slices (``model.slices`` > 1): ``MULTISLICE_TV_PHASE``. On the independent grid's 18
  multislice points (docs/quality-grid.md) 1 raises ptyacc's zero-shift NCC on every point (median
  +0.003) and brings it level with or above tuned PtyRAD on 7 of them (3 with another seed) where
  the unregularised defaults are on none; on the MoS2 demo reconstructed with its 3 true slices it
  is level or better at every dose (4 seeds), and on ``sim_32x32`` / ``sim_lowdose`` with 4 modes
  and 4 slices it changes the NCC by under 2e-4. Weights of 2-3 do more on the grid but cost the
  MoS2 3-slice case 0.012-0.023 at 5e3 electrons: 1 is the weight that held on every case.

The note (``auto_notes``) goes to the terminal and run.log; results.h5 records the resolved value
(``auto_values``, attribute ``auto_values``) beside the config as given (``auto``).
"""

from __future__ import annotations

import sys

from ptyacc.config import Config

MULTISLICE_TV_PHASE = 1.0


def resolved_tv_phase(config: Config) -> float:
    """The weight of the phase total variation this run uses: the number given, or for ``auto``
    ``MULTISLICE_TV_PHASE`` on a multislice object and 0 on one slice."""
    weight = config.optim.regularize.tv_phase
    if weight != "auto":
        return float(weight)
    return MULTISLICE_TV_PHASE if config.model.slices > 1 else 0.0


def auto_values(config: Config) -> dict[str, float]:
    """{key: value} of every ``auto`` key that this module resolves (empty when numbers were given)."""
    if config.optim.regularize.tv_phase != "auto":
        return {}
    return {"optim.regularize.tv_phase": resolved_tv_phase(config)}


def auto_notes(config: Config) -> list[str]:
    """What ``auto`` turned on, in words, e.g. "optim.regularize.tv_phase 1 (auto: 4 slices)"; nothing
    for a single slice, where auto leaves the run as it was before auto existed."""
    weight = resolved_tv_phase(config)
    if config.optim.regularize.tv_phase != "auto" or weight == 0:
        return []
    return [f"optim.regularize.tv_phase {weight:g} (auto: {config.model.slices} slices; "
            "set a number, 0 = off, to choose)"]


def announce(config: Config) -> None:
    """``auto_notes`` on the terminal and in run.log (ptyacc's logger), from the main process."""
    from accelerate import PartialState

    from ptyacc.results.runlog import ptyacc_logger

    for text in auto_notes(config):
        ptyacc_logger().info(text)
        if PartialState().is_main_process:
            print(f"ptyacc: {text}", file=sys.stderr)
