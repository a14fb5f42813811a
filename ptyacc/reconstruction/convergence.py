"""When a run has converged (``optim.stop``, ``optim.iterations: auto``): the rule, and what it changes.

After each iteration the loss per pattern (summed over all processes, so every process holds the same
number and decides alike: no collective of its own) is compared with the run's whole fall: converged when the
last ``window`` iterations fell by less than ``gain`` of what the loss fell since its highest value. The
comparison is with the run's own fall, not the loss's value, because the Poisson loss carries an offset
(the counts' own likelihood) that a relative change of the loss would hide the progress under.

Where the object's depth blur has two stages (``optim.regularize.depth_blur_start_slices``), the rule's first
finding ends the first stage instead (``DepthBlurStages.ease``), and it judges again a window later.

A loss that rose over the last ``window`` iterations meets the rule too (its fall share is negative): there the
line is a ``warning:`` that says the run climbs, not converges (its steps too large for the data).

Once converged, the learning rates fall along a cosine from where the schedule had them to
``optim.lr_final_fraction`` over ``final_iterations`` iterations (``LrSchedule.finish``), then the run ends:
a run cut off at full step keeps the noise of its last large steps.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ptyacc.config import Config
from ptyacc.config.steps import AUTO_GAIN, AUTO_ITERATIONS
from ptyacc.optim.groups import LrSchedule
from ptyacc.quantities.object import DepthBlurStages
from ptyacc.reconstruction.history import History


def resolved_iterations(config: Config) -> tuple[Config, dict[str, float | int]]:
    """``config`` with ``optim.iterations: auto`` made the ceiling ``AUTO_ITERATIONS`` and the stop rule's gain
    ``AUTO_GAIN`` where not given, and {key: value} of what auto became (empty when iterations is a number)."""
    optim = config.optim
    if optim.iterations != "auto":
        return config, {}
    gain = AUTO_GAIN if optim.stop.gain is None else optim.stop.gain
    stop = dataclasses.replace(optim.stop, gain=gain)
    values = {"optim.iterations": AUTO_ITERATIONS, **({"optim.stop.gain": gain} if optim.stop.gain is None else {})}
    return dataclasses.replace(config, optim=dataclasses.replace(optim, iterations=AUTO_ITERATIONS, stop=stop)), values


def fall_share(loss: list[float], window: int) -> float | None:
    """The loss's fall over its last ``window`` iterations as a share of its whole fall (from its highest value: a
    loss may rise over the first iterations while the probe starts); None while there are not ``window`` + 1
    iterations or the loss has not fallen at all (nothing to judge by)."""
    if len(loss) <= window:
        return None
    whole = max(loss) - loss[-1]
    if not whole > 0:
        return None
    return (loss[-1 - window] - loss[-1]) / whole


@dataclass
class Convergence:
    """The stop rule of one run. ``first_judged``: the number of iterations done from which it judges (after
    every quantity has started and a window of its own: a loss that waits for the probe or the positions to
    start is flat, not converged). ``schedule``: the run's ``LrSchedule``, shortened once converged. ``depth``: the
    object's depth blur, whose first stage the rule's first finding ends (None or one stage: nothing to end)."""

    gain: float
    window: int
    final_iterations: int
    first_judged: int
    schedule: LrSchedule
    converged_after: int | None = None  # iterations done when the rule was met
    share: float | None = None  # the fall share that met it
    depth: DepthBlurStages | None = None

    @classmethod
    def of(cls, config: Config, starts: list[int], schedule: LrSchedule,
           depth: DepthBlurStages | None = None) -> Convergence | None:
        """The rule of ``config.optim.stop`` (None where it is off), judging from the latest of the groups'
        ``starts`` (iterations, 0-based) on."""
        stop = config.optim.stop
        if stop.gain is None:
            return None
        return cls(stop.gain, stop.window, stop.final_iterations, max(starts, default=0) + 1 + stop.window, schedule,
                   depth=depth)

    def __call__(self, history: History) -> str | None:
        """After an iteration is recorded, before the hooks: where the rule is met, end the run
        ``final_iterations`` later (``history.iterations`` and the schedule shortened) and return the line
        that says so; else None."""
        if self.converged_after is not None or history.done < self.first_judged or history.done >= history.iterations:
            return None
        share = fall_share(history.loss, self.window)
        if share is None or share >= self.gain:
            return None
        if self.depth is not None and self.depth.staged:
            self.first_judged = history.done + self.window  # a window of the next stage's losses first
            return (f"converged after {history.done} iterations (optim.stop.gain {self.gain:g}: the last {self.window} "
                    f"fell {max(share, 0.0):.3g} of the loss's whole fall); {self.depth.ease(history.done)}: judged "
                    f"again from iteration {self.first_judged}")
        self.converged_after, self.share = history.done, share
        end = min(history.iterations, history.done + self.final_iterations)
        self.schedule.finish(history.done, end)
        planned, history.iterations = history.iterations, end
        ending = ((f"the learning rates fall to optim.lr_final_fraction over {end - history.done} more, "
                   if end > history.done else "") + f"ending after {end} of {planned}")
        if share < 0:  # not a loss that stopped falling: one that climbs
            return (f"warning: the loss rose over the last {self.window} iterations (by {-share:.3g} of its whole "
                    f"fall; after {history.done} iterations it stands {self._above(history):.3g} of that fall above "
                    f"its lowest): not converged, the steps are too large for these data; {ending}; lower the steps "
                    "(optim.preconditioned_step and preconditioned_probe_step for the preconditioned object and "
                    "probe, the default; optim.lr for Adam's and the other quantities, those that start late first: "
                    "optim.start), raise optim.preconditioner_batch_floor where many positions light each pixel, or "
                    "give optim.iterations a number")
        return (f"converged after {history.done} iterations (optim.stop.gain {self.gain:g}: the last {self.window} "
                f"fell {share:.3g} of the loss's whole fall); {ending}")

    @staticmethod
    def _above(history: History) -> float:
        """How far the last loss lies above the lowest, as a share of the whole fall."""
        whole = max(history.loss) - history.loss[-1]
        return (history.loss[-1] - min(history.loss)) / whole if whole > 0 else math.inf
