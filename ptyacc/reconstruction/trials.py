"""``data.transform.orientation_trials``: the detector's orientation chosen by short reconstructions where
the data cannot tell it otherwise.

At few counts the centre of mass is noise and the Fourier regions' search may find two or three peaks of
about one height (``data/overlap_orientation.py``). Each peak, and the centre of mass's or parallax's guess,
is an orientation (transpose/flip and scan rotation, with the search's defocus): a reconstruction in the
right one explains the counts better than one in a turned or mirrored frame, and this shows after a few
iterations. So each candidate is reconstructed for ``orientation_trials`` iterations (the run's config with
the candidate's orientation, rotation and defocus given, nothing written) and the one whose data term
(the last iteration's mean loss) ends lowest is taken; run.log lists every candidate's.

The search's peak is broad at few counts, and a scan rotation a few degrees off turns the object as much
(on the calibration matrix's amorphous 16 x 16 scans at 1e3 counts, 7 degrees off scored as badly as a
wrong frame): the taken candidate's rotation is then tried TURN_DEG and twice that either side (and on
past an end that is lowest, up to MORE_TURNS steps), and set at the parabola's lowest point through the
lowest three. Every process runs the same trials in the same order (the loss is the all-reduced one), so
all take the same."""

from __future__ import annotations

import dataclasses

import numpy as np

from ptyacc.config import Config

AUTO_ITERATIONS = 6
TURN_DEG, TURNS = 3.0, 2  # the scan rotation tried at offsets of TURN_DEG, TURNS either side of the chosen one
MORE_TURNS = 3  # further offsets tried past an end where the loss is lowest there


def trial_iterations(config: Config) -> int:
    """Iterations of each trial reconstruction (0: none)."""
    asked = config.data.transform.orientation_trials
    return AUTO_ITERATIONS if asked == "auto" else int(asked)


class OrientationTrials:
    """The judge ``load_data`` calls with the candidates (``autocalibration.OrientationCandidate``): the one whose
    short reconstruction fits the data best, with its scan rotation refined the same way, and run.log's line."""

    def __init__(self, config: Config, accelerator, reconstruct) -> None:
        """``reconstruct``: ``engine.reconstruct``, which builds the run that makes this judge."""
        self.config, self.accelerator, self.reconstruct = config, accelerator, reconstruct
        self.iterations = trial_iterations(config)

    def trial_config(self, candidate) -> Config:
        """The run's config with ``candidate``'s orientation, scan rotation and (where it has one and the defocus is
        auto) defocus given, ``iterations`` iterations, nothing written and no trials of its own."""
        config = self.config
        transform = dataclasses.replace(config.data.transform, orientation="manual", transpose=candidate.flags[0],
                                        flip_y=candidate.flags[1], flip_x=candidate.flags[2],
                                        flip_about_zero=[False, False], orientation_trials=0)
        experiment = dataclasses.replace(config.experiment, scan_rotation_deg=float(candidate.rotation_deg))
        if config.experiment.defocus_A == "auto" and candidate.defocus_A is not None:
            experiment = dataclasses.replace(experiment, defocus_A=float(candidate.defocus_A))
        optim = dataclasses.replace(config.optim, iterations=self.iterations, validation_fraction=0.0)
        output = dataclasses.replace(config.output, figures=False, checkpoint_every=0, checkpoint_minutes=0,
                                     trackers=[])
        runtime = dataclasses.replace(config.runtime, progress=False)
        return dataclasses.replace(config, data=dataclasses.replace(config.data, transform=transform),
                                   experiment=experiment, optim=optim, output=output, runtime=runtime)

    def loss(self, candidate) -> float:
        """The data term after ``iterations`` iterations in ``candidate``'s orientation."""
        run = self.reconstruct(self.trial_config(candidate), self.accelerator, write=False, quiet=True)
        return float(run.loss[-1])

    def __call__(self, candidates: list):
        """The candidate (``autocalibration.OrientationCandidate``) whose trial ends lowest, its scan rotation then
        refined by trials TURNS_DEG apart, and run.log's line."""
        from accelerate.utils import set_seed

        losses = [self.loss(candidate) for candidate in candidates]
        best = min(range(len(candidates)), key=lambda i: losses[i])
        chosen = candidates[best]
        # the rotation: at few counts the search's peak is broad, and a few degrees off turn the object as much
        def turned_by(offset: float) -> float:
            return self.loss(dataclasses.replace(chosen, rotation_deg=chosen.rotation_deg + offset))

        offsets = list(np.arange(-TURNS, TURNS + 1) * TURN_DEG)
        turned = [losses[best] if d == 0 else turned_by(d) for d in offsets]
        for _ in range(MORE_TURNS):  # lowest at an end: on past it, until the loss rises
            at = int(np.argmin(turned))
            if 0 < at < len(offsets) - 1:
                break
            further = offsets[at] + (TURN_DEG if at else -TURN_DEG)
            where = len(offsets) if at else 0
            offsets.insert(where, further)
            turned.insert(where, turned_by(further))
        set_seed(self.config.runtime.seed)  # the run itself starts as it would without trials
        offsets, turned = np.array(offsets), np.array(turned)
        at = int(np.argmin(turned))
        shift = offsets[at] + (TURN_DEG * _vertex(*turned[at - 1:at + 2]) if 0 < at < len(offsets) - 1 else 0.0)
        refined = dataclasses.replace(chosen, rotation_deg=float(chosen.rotation_deg + shift))
        tried = "; ".join(f"{c.line()}: {loss:.6g}" for c, loss in zip(candidates, losses, strict=True))
        turns = ", ".join(f"{d:+g} deg {loss:.6g}" for d, loss in zip(offsets, turned, strict=True))
        tried = (f"{len(candidates)} candidates reconstructed {self.iterations} iterations each, final loss {tried}: "
                 f"the lowest, {chosen.line()}" if len(candidates) > 1 else
                 f"{chosen.line()} reconstructed {self.iterations} iterations, final loss {losses[0]:.6g}")
        return refined, (f"data.transform.orientation_trials: {tried}; its scan rotation turned by {turns}: "
                         f"{refined.rotation_deg:.2f} deg is used")


def _vertex(left: float, middle: float, right: float) -> float:
    """Where the parabola through (-1, ``left``), (0, ``middle``), (1, ``right``) is lowest, within half a step."""
    curvature = left - 2.0 * middle + right
    return 0.0 if curvature <= 0 else float(np.clip(0.5 * (left - right) / curvature, -0.5, 0.5))
