"""``data.transform.orientation_trials``: the detector's orientation, the scan rotation and the defocus chosen by
short reconstructions where the data's measures cannot tell them (the reasons behind each rule:
docs/explanation/autos.md; the figures: the benchmark records it names).

Candidates. At few counts the centre of mass is noise and the Fourier regions' search may find two or three peaks of
about one height (``data/overlap_orientation.py``). Each peak, and the centre of mass's or the parallax's guess, is an
orientation (transpose/flips and scan rotation, with a defocus): each is reconstructed for ``orientation_trials``
iterations (the run's config with the candidate given, one probe mode, nothing written) and the one whose data term
(the last iteration's mean loss) ends lowest is taken; run.log lists every candidate's.

The rotation and the defocus. The taken candidate's rotation is tried TURN_DEG and twice that either side (on past an
end that is lowest, MORE steps, then FAR strides doubling each time) and set at the parabola's lowest point through
the lowest three; where the data term still falls at the last one tried, that end is taken and the run warns
(``Verdict.unsettled``). A defocus the search gave is tried the same way at scales FOCUS_STEP apart, but kept where
one mode's data term falls by under FLAT_FOCUS of itself (on weak scatterers a wider probe fills the object sooner,
whatever the truth) or still falls at the last scale (the model lacks something a wider probe stands in for). Short
trials' data terms jitter from one rotation to the next by as much as two degrees change them, so the rotation taken
last is tried FINE_DEG apart by trials FINE times as long and turned to the lowest point of the least-squares
parabola through the five (``fine_turned``; past the last one tried, it stops there and the run warns). What is
judged in an orientation already decided (the coherence's defocus, two defocus readings far apart, the parallax's
C12: ``autocalibration``) is tried with the run's probe modes (``modes``): a single mode widens to stand in for a
partly coherent beam's others, as a larger defocus does.

Processes. Every process runs the same trials in the same order on the all-reduced loss, so all take the same; each
parabola's lowest point is set on a grain (GRAIN_DEG, FOCUS_GRAIN) that another number of processes, summing the loss
in another order, does not move.

Reading. Each candidate orientation is read and calibrated once, whole on every process (its flags change how the
patterns are prepared), without the calibration's checks (they would ask the trials' own question again); its
rotation's and defocus's trials reuse that dataset with the positions turned about their centre and the probe
refocused, which is all that a reading with them would change.

Coarse scans. Where the step exceeds lambda / (2 alpha) (``autocalibration._coarse_oriented``) the measures can agree on
a mirrored or turned frame, and their candidates need not hold the truth. There (``grid``) the frames GRID_DEG apart
around the circle in both handednesses are tried too; the two lowest frames that are not neighbours each have their
rotation and defocus refined and are compared by trials LONGER times as long, where the true frame's lead shows. A
frame is told from its mirror only near its own defocus, so where the defocus is auto the frames are tried at a
ladder of defoci RUNG apart, and the rung whose lowest frame stands furthest below its median frame is used
(``rungs_tried``)."""

from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
from accelerate.utils import broadcast_object_list

from ptyacc.config import Config, with_values
from ptyacc.data.autocalibration import BY_TRIALS, Verdict, parabola_lowest
from ptyacc.data.dataset import PtychoData
from ptyacc.data.load import load_data
from ptyacc.data.orientation import frame_difference, wrapped_deg
from ptyacc.data.positions import turned_positions_A
from ptyacc.data.trouble import Unsettled
from ptyacc.results.quality import results_phase_absorption

AUTO_ITERATIONS = 6
TURN_DEG = 3.0  # the scan rotation tried at offsets of TURN_DEG, SIDE steps either side of the chosen one
FOCUS_STEP = 0.04  # the defocus tried at scales exp(FOCUS_STEP k), k from -SIDE to SIDE
FLAT_FOCUS = 2e-5  # one mode's trials: a defocus scale whose data term lies less than this share of it below the
# measured defocus's is not taken
SIDE, MORE = 2, 3  # steps either side; further steps past an end where the loss is lowest there
# then strides of 2, 4, 8 steps: a search whose lowest point lay 11 steps out (x0.64 of a rival peak's defocus on
# the calibration matrix's h62-13, 1e3 counts) is bracketed within ±19 steps (x0.47-2.1, ±57 degrees)
FAR = 3
FINE_DEG = 1.0  # the rotation taken then tried FINE_DEG apart, SIDE steps either side, by trials FINE times as long,
FINE = 2  # and turned to the lowest point of the least-squares parabola through all of them (``fine_turned``)
GRAIN_DEG, FOCUS_GRAIN = 0.02, 1e-4  # a parabola's lowest point is set on a grain of 0.02 degrees (a rotation) or
# of 1e-4 in the defocus's log-scale: far finer than trials tell rotations or defoci apart (their data terms jitter by
# tenths of a degree), far coarser than what the all-reduce's order moves it by (1 and 2 processes' data terms differ
# by ~1e-7 of themselves: lowest points up to 6e-4 degrees apart, measured), so every number of processes takes the
# same rotation and defocus, but where a lowest point falls within that of a grain's edge (a few percent of them)
GRID_DEG = 15.0  # a coarse scan's frames tried around the circle, both handednesses, this far apart (``grid``)
# the true frame's data term beat every other one's after 6 iterations from within 6 degrees of it on the calibration
# matrix's w118-08 (15 degrees off: barely below the best mirrored frame's)
LONGER = 5  # the two lowest frames of such a grid are compared by trials this many times as long
RUNG = 1.3  # where the defocus is auto, such grids are tried at defoci RUNG^k times the best candidate's, k = -1, 0, 1
RUNGS_MORE = 3  # and the rungs nearest the other candidates' defoci, then the clearest one's neighbours while it has
# untried ones, up to this many times: on the wide draw's coarse scans that ended turned the search's defocus read
# 1.3-2.8 times the truth, and at 1.5 (w120-01) the true frame ranked 11th of 48 where within 0.84-1.19 it ranked first


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
        # {flags: (the candidate read, its dataset)}: the best candidate's so far and the last one read
        self.read: dict[tuple, tuple] = {}
        self.reads = 0  # datasets read and calibrated (one per candidate orientation)
        self.modes = False  # this call's trials with the run's probe modes (``__call__``)
        # X-ray far field: each candidate's trial object's phase against its absorption, and its phase's skew
        # (``trouble.conjugate_reason``)
        self.correlations: dict = {}
        self.skews: dict = {}
        self.stand_ins: dict = {}  # {a candidate never reconstructed: the trial nearest it, whose object speaks for it}

    def trial_config(self, candidate, modes: bool = False, iterations: int | None = None) -> Config:
        """The run's config with ``candidate``'s orientation, scan rotation and (where it has one and the defocus is
        auto) defocus given, ``iterations`` iterations (None: the trials'), one probe mode (unless the probe comes from
        a file, or ``modes``: the run's), nothing written, no trials of its own, the probe's focus and astigmatism
        and the scan's shape not refined (the trials compare the defoci, C12 and rotations they are given: refined
        from the fifth iteration, the rotation of the finer turns' 12-iteration trials moved towards the one the run
        settles on) and the calibration's checks left out: each
        would test the frame under trial against the centre of mass or the Fourier regions' search again, which is
        the trials' own question (on a 16 x 16 coarse scan those checks took 347 of the trials' 417 s)."""
        t, fy, fx = (bool(flag) for flag in candidate.flags)
        values = {"data.transform.orientation": "manual", "data.transform.transpose": t, "data.transform.flip_y": fy,
                  "data.transform.flip_x": fx, "data.transform.flip_about_zero": list(candidate.flip_about_zero),
                  "data.transform.orientation_trials": 0,
                  "experiment.scan_rotation_deg": float(candidate.rotation_deg),
                  "optim.iterations": iterations or self.iterations, "optim.validation_fraction": 0.0,
                  "output.figures": False,
                  "output.checkpoint_every": 0, "output.checkpoint_minutes": 0, "output.trackers": [],
                  "runtime.progress": False, "optim.start.probe_focus": None,
                  "optim.start.probe_astigmatism": None, "optim.start.scan_affine": None,
                  "experiment.check_calibration": False}
        if (defocus_A := self.given_defocus_A(candidate)) is not None:
            values["experiment.defocus_A"] = defocus_A
        if candidate.focus_to_sample_m is not None:
            values["experiment.focus_to_sample_m"] = candidate.focus_to_sample_m
        if candidate.c12_A is not None:
            values["experiment.aberrations"] = {**self.config.experiment.aberrations, "C12a": float(candidate.c12_A[0]),
                                                "C12b": float(candidate.c12_A[1])}
        if self.config.model.probe_init is None and not modes:  # more modes absorb part of a wrong defocus or rotation
            values["model.probe_modes"] = 1
        return with_values(self.config, values)

    def given_defocus_A(self, candidate) -> float | None:
        """The defocus (Å) a trial of ``candidate`` takes: its own where the run's defocus is auto, else None (the
        config's)."""
        return None if candidate.defocus_A is None or self.config.experiment.defocus_A != "auto" else \
            float(candidate.defocus_A)

    def dataset(self, candidate, config: Config) -> PtychoData:
        """``candidate``'s dataset under its trial's ``config``: read and calibrated where no dataset of its flags is
        kept (whole, on every process: ``load_planned`` takes each one's share), else the kept one with the positions
        turned by the rotations' difference and the probe's defocus set."""
        if candidate.flags not in self.read:
            self.read[candidate.flags] = (candidate, load_data(config, None, self.accelerator.device))
            self.reads += 1
            return self.read[candidate.flags][1]
        read, data = self.read[candidate.flags]
        positions_A = turned_positions_A(data.positions_A, candidate.rotation_deg - read.rotation_deg)
        aberrations = dict(data.aberrations)
        if (defocus_A := self.given_defocus_A(candidate)) is not None:
            aberrations["C10"] = -defocus_A
        if candidate.c12_A is not None:
            aberrations.update(C12a=float(candidate.c12_A[0]), C12b=float(candidate.c12_A[1]))
        return dataclasses.replace(data, positions_A=positions_A, aberrations=aberrations)

    def loss(self, candidate, iterations: int | None = None) -> float:
        """The data term after ``iterations`` iterations (None: the trials') in ``candidate``'s orientation (with the
        run's probe modes where the call asked for them, ``modes``)."""
        config = self.trial_config(candidate, self.modes, iterations)
        run = self.reconstruct(config, self.accelerator, data=self.dataset(candidate, config), write=False, quiet=True)
        if config.experiment.radiation == "xray" and config.experiment.geometry == "far_field":
            # the main process's (the whole object where it is split): every process then decides alike
            said = [results_phase_absorption(run.results) if self.accelerator.is_main_process else None]
            if self.accelerator.num_processes > 1:
                said = broadcast_object_list(said, from_process=0)
            self.correlations[candidate], self.skews[candidate] = said[0]
        return float(run.loss[-1])

    def __call__(self, candidates: list, turn: bool = True, focus: bool = True, modes: bool = False,
                 subject: str | None = None, grid: bool = False) -> Verdict:
        """The candidate (``autocalibration.OrientationCandidate``) whose trial ends lowest; then, with ``turn``,
        its scan rotation refined by trials TURN_DEG apart, and with ``focus`` (where it has a defocus and the
        defocus is auto) its defocus by trials FOCUS_STEP apart in scale; and run.log's line. ``modes``: every trial
        with the run's probe modes, not one (a partly coherent beam's other modes then take their share of the
        counts, which a single mode's defocus otherwise widens to take). ``subject``: what the candidates differ in, for
        the terminal's line (None: the orientation). ``grid``: the frames around the circle tried too, and the two
        lowest apart compared by longer trials (``frames_tried``: their rotation and defocus refined there)."""
        from accelerate.utils import set_seed

        finer_turns = grid or turn  # the rotation taken then tried finer by longer trials (``fine_turned``)
        if self.accelerator.is_main_process:  # minutes may pass before the run's own lines: say why
            what = (subject if subject else f"{len(candidates)} candidate orientations" if len(candidates) > 1 else
                    "the scan rotation and defocus" if turn and focus else "the scan rotation" if turn else "the defocus")
            them = "them" if len(candidates) > 1 or turn and focus else "it"
            around = (f", then {2 * round(360.0 / GRID_DEG)} frames around the circle in both handednesses"
                      + (f" at several defoci {RUNG:g}x apart" if focus and self.config.experiment.defocus_A == "auto"
                         and any(c.defocus_A is not None for c in candidates) else "") if grid else "")
            finer = (f", then the rotation taken {FINE_DEG:g} deg apart by {2 * SIDE + 1} of {FINE * self.iterations}"
                     if finer_turns else "")
            print(f"ptyacc: the data leave {what} uncertain: trying {them}{around} by short reconstructions of "
                  f"{self.iterations} iterations{finer} (data.transform.orientation_trials)", file=sys.stderr, flush=True)
        self.modes = modes
        losses = self.losses(candidates)
        best = min(range(len(candidates)), key=lambda i: losses[i])
        chosen, said, margin, rival = candidates[best], [], None, None
        if len(candidates) > 1:  # how clearly: the next one's data term above the taken one's
            next_best = min((i for i in range(len(candidates)) if i != best), key=lambda i: losses[i])
            margin = (losses[next_best] - losses[best]) / max(abs(losses[best]), 1e-30)
            rival = candidates[next_best].line()
            tried = "; ".join(f"{c.line()}: {loss:.6g}" for c, loss in zip(candidates, losses, strict=True))
            said.append(f"{len(candidates)} candidates reconstructed {self.iterations} iterations each, final loss "
                        f"{tried}: the lowest, {chosen.line()}")
        else:
            said.append(f"{chosen.line()} reconstructed {self.iterations} iterations, final loss {losses[0]:.6g}")
        shift, unsettled = 0.0, []
        if grid:  # the candidates need not hold the truth: every frame, then the two lowest apart compared longer
            chosen, margin, rival, text, more = self.frames_tried(
                chosen, losses[best], focus, [c.defocus_A for c in candidates if c.defocus_A is not None])
            said.append(text)
            unsettled += more
        elif turn:  # at few counts the search's peak is broad, and a few degrees off turn the object as much
            chosen, shift, text, more = self.turned(chosen, losses[best])
            said.append(text)
            unsettled += more
        if focus and not grid and self.given_defocus_A(chosen) is not None:
            # the loss where the rotation stayed is known; a moved one is reconstructed for the zero point
            chosen, text, more = self.refocused(chosen, self.loss(chosen) if shift else losses[best])
            said.append(text)
            unsettled += more
        if finer_turns and not any(u.name == "scan rotation" for u in unsettled):
            # the trials' few iterations leave the rotation a degree or two off: longer ones, finer
            chosen, text, more = self.fine_turned(chosen)
            said.append(text)
            unsettled += more
        self.keep()  # the run reads its own
        self.modes = False
        set_seed(self.config.runtime.seed)  # the run itself starts as it would without trials
        spoken_for = self.stand_ins.get(chosen, chosen)
        return Verdict(chosen, f"data.transform.orientation_trials: {'; '.join(said)} is used", margin, rival,
                       tuple(unsettled), self.correlations.get(spoken_for), tuple(losses),
                       spoken_for if spoken_for in self.correlations else None, self.skews.get(spoken_for))

    def turned(self, chosen, start: float) -> tuple:
        """``chosen`` with its scan rotation refined by trials TURN_DEG apart (``start``: its own trial's data term),
        the turn, run.log's words and the unsettled quantities (the rotation, where the data term still fell at the
        last turn tried)."""
        shift, text, settled, _ = self.line_search(
            lambda d: dataclasses.replace(chosen, rotation_deg=chosen.rotation_deg + d), start, TURN_DEG, "{:+g} deg",
            GRAIN_DEG)
        chosen = dataclasses.replace(chosen, rotation_deg=float(chosen.rotation_deg + shift))
        unsettled = [] if settled else [_rotation_unsettled(chosen)]
        return chosen, shift, f"its scan rotation turned by {text}: {chosen.rotation_deg:.2f} deg", unsettled

    def fine_turned(self, chosen) -> tuple:
        """``chosen`` with its scan rotation turned to the lowest point of the least-squares parabola through the data
        terms of trials FINE times as long at FINE_DEG apart (SIDE either side; kept where the parabola has no
        lowest point), run.log's words and the unsettled quantities: the rotation, stopped at the last one tried,
        where the lowest point lies past it (the longer trials then disagree with the short ones by more than the
        range tried)."""
        offsets = np.arange(-SIDE, SIDE + 1) * FINE_DEG
        found = [self.loss(dataclasses.replace(chosen, rotation_deg=chosen.rotation_deg + d), FINE * self.iterations)
                 for d in offsets]
        vertex = parabola_lowest(offsets, found)
        shift = 0.0 if vertex is None else float(np.clip(vertex, offsets[0], offsets[-1]))
        # the lowest point past the last one tried (not a rounding at the end)
        past = vertex is not None and abs(vertex - shift) > 1e-6
        shift = _grained(shift, GRAIN_DEG)
        nearest = dataclasses.replace(chosen, rotation_deg=chosen.rotation_deg + offsets[np.argmin(abs(offsets - shift))])
        chosen = dataclasses.replace(chosen, rotation_deg=float(chosen.rotation_deg + shift))
        if chosen not in self.correlations:  # a rotation between trials: the nearest trial's object speaks for it
            self.stand_ins[chosen] = nearest
        tried = ", ".join(f"{d:+g} deg {loss:.8g}" for d, loss in zip(offsets, found, strict=True))
        where = ("has no lowest point, kept at" if vertex is None else
                 f"lowest past the last one tried ({vertex:+.2f} deg), stopped at" if past else "lowest at")
        unsettled = [_rotation_unsettled(chosen)] if past else []
        return chosen, (f"its scan rotation then tried {FINE_DEG:g} deg apart by trials of {FINE * self.iterations} "
                        f"iterations, {tried}: the parabola through them {where} {shift:+.2f} deg, "
                        f"{chosen.rotation_deg:.2f} deg"), unsettled

    def refocused(self, chosen, start: float) -> tuple:
        """``chosen`` with its defocus scaled by trials FOCUS_STEP apart in scale (``start``: its own trial's data
        term), run.log's words and the unsettled quantities (the defocus, where its data term still fell at the last
        scale tried: then, as where one mode's data term hardly falls, the measured defocus is kept)."""
        # the coherence's defocus reads low on small rasters, more so with a partly coherent beam
        base = chosen.defocus_A
        step, text, settled, lowest = self.line_search(
            lambda d: dataclasses.replace(chosen, defocus_A=base * math.exp(d)), start, FOCUS_STEP, "x{:.3f}",
            FOCUS_GRAIN, math.exp)
        # one mode's few iterations favour a wider probe on a weak scatterer (it fills the object sooner): a
        # fall of the data term under FLAT_FOCUS of it does not move the measured defocus
        flat, unsettled = not self.modes and start - lowest < FLAT_FOCUS * abs(lowest), []
        if flat:
            text += " (too flat to move the measured defocus)"
        elif not settled:
            # no minimum: a data term that falls to the end of the range says the model lacks something a wider
            # probe stands in for (h109-09, graphene at 1e6 counts, a partly coherent beam and a detector blur:
            # the search's 0.95 of the truth taken to 2.0 and NCC 0.04 against the told run's 0.65)
            unsettled.append(Unsettled("defocus", f"{base * math.exp(step):.1f} A", "experiment.defocus_A",
                                       kept=f"the measured {base:.1f} A"))
            text += " (no minimum: the measured defocus kept)"
        step, by = (0.0, chosen.defocus_by) if flat or not settled else (step, BY_TRIALS)
        chosen = dataclasses.replace(chosen, defocus_A=float(base * math.exp(step)), defocus_by=by)
        return chosen, f"its defocus scaled by {text}: {chosen.defocus_A:.1f} A", unsettled

    def losses(self, candidates: list, keep: tuple = ()) -> list[float]:
        """Each candidate's trial's data term, in order; the lowest one's dataset is kept for the trials after, and
        the last one read for the next candidates of its flags (the frames around the circle come in two runs of
        one flag set each: each set is read once), and any of the flags ``keep``."""
        losses: list[float] = []
        for candidate in candidates:
            losses.append(self.loss(candidate))
            # the best one's dataset is what the rotation's and defocus's trials turn and refocus
            self.keep(candidates[losses.index(min(losses))].flags, candidate.flags, *keep)
        return losses

    def keep(self, *flags: tuple) -> None:
        """Let go of every dataset read but those of ``flags`` (none: all of them). Each is the whole scan's
        patterns: the trials hold two at most (the best candidate's and the last one read, or the grid's two flag
        sets), three for a moment while ``losses`` reads a third."""
        self.read = {kept: read for kept, read in self.read.items() if kept in flags}

    def frames_tried(self, best, best_loss: float, focus: bool, defoci: tuple = ()) -> tuple:
        """From the lowest candidate ``best`` (its trial's data term ``best_loss``): its frame turned by GRID_DEG at a
        time around the circle, and mirrored (transposed) likewise, each tried at its defocus (``frames_around``) or
        at the clearest rung of a ladder of defoci (``rungs_tried``); the lowest of all and the lowest not within 1.5
        GRID_DEG of it (a neighbour lies in its bowl) each have their
        rotation refined (``line_search``) and, with ``focus`` where the defocus is auto, their defocus
        (``refocused``: the frames compare fairly only at their own), and are reconstructed LONGER times as long;
        the lower one is taken. Returns (the one taken, the other's data term above it relative to it or None, its
        line or None, run.log's words, the taken one's unsettled quantities)."""
        frames, losses, ladder = self.rungs_tried(best, best_loss, focus, defoci)
        order = sorted(range(len(frames)), key=lambda i: losses[i])
        lowest = [order[0], *[i for i in order[1:] if _apart(frames[i], frames[order[0]])][:1]]
        words = [f"the frames around the circle: {len(frames) - 1} more, {GRID_DEG:g} deg apart in both handednesses "
                 f"at {ladder}, the lowest " + ", the lowest apart from it ".join(
                     f"{frames[i].line()} {losses[i]:.6g}" for i in lowest)]
        finals, longer, unsettled = [], [], []
        # the two frames' datasets (read by the grid already where it read their flags last) serve their trials
        self.keep(*{frames[i].flags for i in lowest})
        for i in lowest:
            final, shift, text, more = self.turned(frames[i], losses[i])
            words.append(text)
            if focus and self.given_defocus_A(final) is not None:
                final, text, unsure = self.refocused(final, self.loss(final) if shift else losses[i])
                words.append(text)
                more += unsure
            finals.append(final)
            unsettled.append(more)
            longer.append(self.loss(final, LONGER * self.iterations))
        taken = min(range(len(finals)), key=lambda k: longer[k])
        self.keep(finals[taken].flags)
        chosen = finals[taken]
        words.append(f"reconstructed {LONGER * self.iterations} iterations each, final loss " + "; ".join(
            f"{final.line()}: {loss:.6g}" for final, loss in zip(finals, longer, strict=True)) + f": the lowest, "
            f"{chosen.line()}")
        margin = rival = None
        if len(finals) > 1:
            margin = (longer[1 - taken] - longer[taken]) / max(abs(longer[taken]), 1e-30)
            rival = finals[1 - taken].line()
        return chosen, margin, rival, "; ".join(words), unsettled[taken]

    def rungs_tried(self, best, best_loss: float, focus: bool, defoci: tuple = ()) -> tuple[list, list[float], str]:
        """The frames around the circle (``frames_around``) with ``best`` first, and their data terms, at ``best``'s
        defocus, or, with ``focus`` where the defocus is auto, at the rung of defoci RUNG^k times it whose lowest frame
        stands out most: k = -1, 0, 1 and the rung nearest each of the other candidates' ``defoci`` (of its sign), then
        the clearest rung's neighbours while one of them is untried (RUNGS_MORE times at most). A frame is told from its
        mirror and its turns only near its own defocus, and on such scans the lowest candidate's defocus can be far off
        where another candidate's is near (the trials' few iterations favour a wider probe). How far a rung's lowest
        frame stands out is the median frame's data term above it, relative to it: the data term's own level is no
        guide, as a wider probe fills the object sooner at few counts (on w120-12 it fell with the defocus from the
        truth's to four times it, where the true frame's margin was three times any other rung's). Also run.log's
        words for the defoci tried."""
        both = (best.flags, mirrored(best.flags))  # the two flag sets of every rung: each read once

        def around(at, loss: float | None = None) -> tuple[list, list[float]]:
            """``at`` and the frames around it, with their data terms (``at``'s is ``loss`` where known)."""
            frames = [at, *frames_around(at)]
            if loss is None:
                return frames, self.losses(frames, keep=both)
            return frames, [loss, *self.losses(frames[1:], keep=both)]

        if not focus or self.given_defocus_A(best) is None:
            return (*around(best, best_loss), "its defocus")
        rungs: dict[int, tuple[list, list[float]]] = {}

        def rung(k: int) -> float:
            rungs[k] = around(dataclasses.replace(best, defocus_A=float(best.defocus_A * RUNG ** k)),
                              best_loss if k == 0 else None)
            return standing_out(rungs[k][1])

        seeds = {round(math.log(d / best.defocus_A) / math.log(RUNG)) for d in defoci if d * best.defocus_A > 0}
        clear = {k: rung(k) for k in sorted({-1, 0, 1} | seeds)}
        for _ in range(RUNGS_MORE):  # the clearest rung's untried neighbours, until it has none
            k = max(clear, key=clear.get)
            untried = [n for n in (k - 1, k + 1) if n not in clear]
            if not untried:
                break
            clear.update({n: rung(n) for n in untried})
        k = max(clear, key=clear.get)
        tried = ", ".join(f"{best.defocus_A * RUNG ** j:.1f} A {clear[j]:.2e}" for j in sorted(clear))
        return (*rungs[k], f"defoci {RUNG:g}x apart (how far each one's lowest frame stands below its median: {tried}), "
                           f"the clearest's {best.defocus_A * RUNG ** k:.1f} A")

    def line_search(self, moved, at_zero: float, step: float, label: str, grain: float,
                    shown=lambda d: d) -> tuple[float, str, bool, float]:
        """The offset d (a multiple of ``step`` refined by a parabola, set on a multiple of ``grain``) at which the
        trial of ``moved(d)`` ends lowest, tried at -2..2 steps (``at_zero`` the loss at 0) and on past an end that is
        lowest, MORE steps and then FAR strides that double; the offsets with their losses, each offset written by
        ``label`` of ``shown(d)``; and whether the lowest lies between two offsets tried (False: at the last one, the
        loss still falling there)."""
        offsets = list(np.arange(-SIDE, SIDE + 1) * step)
        steps = list(range(-SIDE, SIDE + 1))  # the offsets in steps
        found = [at_zero if d == 0 else self.loss(moved(d)) for d in offsets]
        for extra in range(MORE + FAR):  # lowest at an end: on past it, until the loss rises
            at = int(np.argmin(found))
            if 0 < at < len(offsets) - 1:
                break
            stride = 1 if extra < MORE else 2 ** (extra - MORE + 1)
            further = offsets[at] + (step * stride if at else -step * stride)
            where = len(offsets) if at else 0
            offsets.insert(where, further)
            steps.insert(where, steps[at] + (stride if at else -stride))
            found.insert(where, self.loss(moved(further)))
        at = int(np.argmin(found))
        settled = 0 < at < len(offsets) - 1
        if settled and steps[at + 1] - steps[at] == steps[at] - steps[at - 1] == 1:  # _vertex's arithmetic, as
            # before the strides (``_lowest`` gives the same to rounding): such searches' runs stay bit-identical
            offset = offsets[at] + step * _vertex(*found[at - 1:at + 2])
        elif settled:  # a stride past the last step
            offset = offsets[at] + step * _lowest(steps[at - 1:at + 2], found[at - 1:at + 2])
        else:
            offset = offsets[at]
        return _grained(float(offset), grain), ", ".join(f"{label.format(shown(d))} {loss:.6g}"
                                        for d, loss in zip(offsets, found, strict=True)), settled, float(min(found))


def frames_around(best) -> list:
    """``best``'s frame (an ``OrientationCandidate``) turned by GRID_DEG at a time around the circle, then mirrored
    (transposed) and turned likewise, at its defocus, without ``best`` itself: every frame lies within GRID_DEG / 2 of
    one of them or of ``best``."""
    return [dataclasses.replace(best, flags=flags, rotation_deg=wrapped_deg(best.rotation_deg + k * GRID_DEG, 360.0),
                                found_by="the frames around the circle")
            for flags in (best.flags, mirrored(best.flags)) for k in range(round(360.0 / GRID_DEG))
            if k or flags != best.flags]


def mirrored(flags: tuple) -> tuple:
    """The transpose/flip ``flags`` transposed: the other handedness."""
    return (not flags[0], flags[1], flags[2])


def standing_out(losses: list[float]) -> float:
    """How far the lowest of a grid's data terms stands below their median, relative to it."""
    lowest = min(losses)
    return float((np.median(losses) - lowest) / max(abs(lowest), 1e-30))


def _rotation_unsettled(chosen) -> Unsettled:
    """The scan rotation of ``chosen``, taken at the last turn its trials tried (not a minimum): the run warns."""
    return Unsettled("scan rotation", f"{chosen.rotation_deg:.2f} deg", "experiment.scan_rotation_deg")


def _apart(one, other) -> bool:
    """Whether two candidates' frames are mirrored or turned by more than 1.5 GRID_DEG: not in one bowl."""
    mirrored, off_deg = frame_difference(one.flags, one.rotation_deg, other.flags, other.rotation_deg)
    return mirrored or abs(off_deg) > 1.5 * GRID_DEG


def _lowest(offsets: list[int], losses: list[float]) -> float:
    """Where the parabola through three (offset, loss) points, the middle one lowest, is lowest, relative to the
    middle offset, within half of either gap (``_vertex`` where the gaps are 1)."""
    below, above = offsets[0] - offsets[1], offsets[2] - offsets[1]
    rise_below, rise_above = (losses[0] - losses[1]) / below, (losses[2] - losses[1]) / above  # slopes from the middle
    curvature = (rise_below - rise_above) / (below - above)  # loss = curvature d^2 + slope d about the middle
    if curvature <= 0:
        return 0.0
    slope = rise_below - curvature * below
    return float(np.clip(-slope / (2.0 * curvature), 0.5 * below, 0.5 * above))


def _grained(offset: float, grain: float) -> float:
    """``offset`` on the nearest multiple of ``grain`` (GRAIN_DEG, FOCUS_GRAIN: what no process count's rounding moves)."""
    return float(round(offset / grain) * grain)


def _vertex(left: float, middle: float, right: float) -> float:
    """Where the parabola through (-1, ``left``), (0, ``middle``), (1, ``right``) is lowest, within half a step."""
    curvature = left - 2.0 * middle + right
    return 0.0 if curvature <= 0 else float(np.clip(0.5 * (left - right) / curvature, -0.5, 0.5))
