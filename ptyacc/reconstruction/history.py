"""The record of a run's iterations, which the hooks, the saver, the trackers and the interrupt read."""

from __future__ import annotations

from dataclasses import dataclass, field

from ptyacc.reconstruction.exchange import Traffic


@dataclass
class History:
    """The iterations done so far: loss (mean per pattern over all processes), seconds, the
    exchange's traffic of each iteration of this launch (None for one process), and the
    validation error (``ptyacc/reconstruction/validation.py``; None without validation positions)."""

    iterations: int  # planned
    loss: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    traffic: list[Traffic] | None = None
    validation: list[float] | None = None
    done: int = 0  # iterations done: len(loss)

    def record(self, loss: float, seconds: float, traffic: Traffic | None) -> None:
        self.loss.append(loss)
        self.seconds.append(seconds)
        self.done = len(self.loss)
        if traffic is not None:
            self.traffic.append(traffic)

    def resume(self, loss: list[float], seconds: list[float]) -> None:
        """Continue after the iterations of a checkpoint, whose losses and times are these."""
        self.loss, self.seconds, self.done = list(loss), list(seconds), len(loss)
