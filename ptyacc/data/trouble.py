"""Checks that see a config the data contradict, where the run would otherwise go on and give a wrong
answer without a word: each finding is one line that starts with ``warning:`` and names the config key
to change (run.log, the terminal, results.h5's ``warnings``).

- The centre of mass (``orientation.py``) gives the transpose/flip and the scan rotation that make its
  field curl-free. Against the ones the run uses (given, not ``auto``): another handedness means the
  patterns are mirrored against the scan (``data.transform``), an angle more than ROTATION_OFF_DEG
  (and three times the spread between the scan's halves) away means ``experiment.scan_rotation_deg``
  is off. Said only where the field tells: the curl left at its best angle under CURL_CLEAR, and, for
  the handedness, the other one's curl MIRRORED times more; an angle 180 degrees away only where the
  divergence's skew tells a turn by 180 degrees (``orientation.Orientation.tells_turn``).
- The parallax of the bright-field disk (``parallax.py``), measured on the prepared patterns at the
  positions the run uses, is lambda defocus R(phi) with phi the rotation left: a defocus of the other
  sign, or more than DEFOCUS_OFF of its size (and three standard errors) away, says
  ``experiment.defocus_A`` is off; phi beyond ROTATION_OFF_DEG says the rotation is; a fit whose mirror
  part outweighs its rotating part SURE times says the patterns are mirrored.
- A scan rotation and transpose/flip measured from a centre of mass that is mostly noise (curl left over
  CURL_CLEAR, or the scan's halves more than ROTATION_OFF_DEG apart) where no parallax could tell them:
  the orientation may be wrong, and the run says so.
- The parallax's scan rotation and a clear Fourier regions' search of the same handedness more than
  ROTATIONS_APART_DEG apart: one of the two is off by more than its standard error says; the run starts between
  them, SEARCH_SHARE of the way to the search's, and says so (``rotations_apart_warning``).
- The final Poisson deviance per counted pixel (about 1 for a model at the noise level, a little
  more for a detector's effects the model leaves out) above DEVIANCE_HIGH, and a misfit beyond MISFIT_HIGH
  of the counts (``relative_misfit``): the model does not explain the data. At many counts per pixel a
  small misfit is a large deviance (1 + counts x misfit^2): a right reconstruction of the PETRA III
  near-field data (1.09e3 photons per counted pixel) ends at 5.2, a misfit of 6 %, and 30 iterations of
  right calibrations on abTEM files of 1e6 electrons per pattern at up to 4.2 (8 %); the detector's flips
  left out of the PETRA data leave 58 (23 %), the near field's sub-pixel image shift left out about 18 (13 %).
  Computed on every run whose patterns are counts, whatever its loss. abTEM's SrTiO3 10 unit cells thick (12 x 12
  positions, 1e6 electrons per pattern, 357 per counted pixel; the amplitude loss, 10 slices) ends right at 18.7
  (23 %) after 20 iterations, 5.3 (11 %) after 40 and 4.3 (10 %) after 100, its phase 0.94, 0.997 and 0.998 like
  the truth's: the warning there says to iterate longer (``optim.iterations: auto`` ended it after 41, at 3.7,
  10 %, and 0.998; the crystal tilted, 43, 4.2, 10 %, 0.979: no warning); after 40, a scan turned 10 degrees
  leaves 13.4 (19 %), a defocus 50 % off 18.5 (22 %), the patterns transposed 58.9 (40 %), one slice for the ten
  27.5 (27 %; phase -0.07, the counts beyond the disk 6.2 %: on one slice the warning names ``model.slices`` where
  they are over 4 %). Over 6-20 cells at 200 and 300 kV (``optim.iterations: auto``) right runs that reached the
  truth ended at 6-14 % (two of four at 1e6 electrons over the line, 10.3 and 12.1 %: warned), those of 16 and 20
  cells that did not (phase 0.41-0.73) at 25-40 % (warned).
- An X-ray far-field object whose phase rises where its amplitude falls (``conjugate_warning``): the conjugate of
  the object, which patterns flipped along both axes fit exactly as well; X-ray matter delays the phase where it
  absorbs. Where it absorbs too little to say and the flags or the rotation were auto, a phase that departs from its
  background forward (``advanced_phase_warning``): matter on an empty support delays it.
- The scan rotation a run refined (``model.scan_affine: rotation``) is no warning but a line at the run's end:
  the turn and the ``experiment.scan_rotation_deg`` that starts a run there (``turned_scan_said``); likewise the
  change of focus it refined (``optim.start.probe_focus``) and the ``experiment.defocus_A`` (``refocused_probe_said``);
  the change of astigmatism (``optim.start.probe_astigmatism``) and the C12 that starts a run there
  (``astigmatism_said``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ptyacc.data.orientation import Orientation, frame_difference, wrapped_deg
from ptyacc.data.overlap_orientation import OverlapOrientation
from ptyacc.data.parallax import MAX_MISFIT, Parallax
from ptyacc.data.parallax_orientation import SURE, ParallaxOrientation, conformal_parts

ROTATION_OFF_DEG = 5.0  # a scan rotation this far from the data's is said
# X-rays: only a turn this large is said. A stage is seldom turned by degrees against its detector, and through a
# defocused probe a strong absorber's pull turned the centre of mass's angle by 6-10 degrees on gold test patterns
# upstream of the focus (benchmarks/xray_far_field.py); a quarter turn is a wrong flag set
XRAY_TURN_DEG = 45.0
CURL_CLEAR = 0.5  # share of curl left at the best angle under which the centre of mass tells the angle
MIRRORED = 2.0  # the other handedness's curl this many times the chosen one's: the centre of mass tells it
DEFOCUS_OFF = 0.15  # relative: a defocus this far from the parallax's is said (the parallax reads within 10 %)
TURN_TOLD_DEG = 1.0  # a scan rotation the run turned this far is said on the terminal too
DEVIANCE_HIGH = 3.0  # per counted pixel: a final deviance above is far above the noise
MISFIT_HIGH = 0.10  # beside such a deviance: the model's intensities off by more than this share of the counts (rms)
ROTATION_UNSURE_DEG = 1.25  # the parallax's rotation uncertain by more (one standard error) is said: at few counts
# the data term does not fix the rotation better, and two degrees cost the matrix's files 0.015-0.056 in NCC
# (benchmarks/records/2026-12-04-rotation-at-few-counts.md)
AUTO = "(auto measures it)"


def tells_handedness(found: Orientation) -> bool:
    """Whether the centre of mass ``found`` tells its handedness: little curl left at its best angle (CURL_CLEAR)
    and the other handedness MIRRORED times as much."""
    return found.curl_left <= CURL_CLEAR and found.curl_other > MIRRORED * found.curl_left


def com_warnings(found: Orientation, flags: tuple[bool, bool, bool], rotation_deg: float,
                 rotation_measured: bool = False, flags_measured: bool = False,
                 least_deg: float = ROTATION_OFF_DEG) -> list[str]:
    """The warnings of the centre of mass's orientation ``found`` (free flags, rotation nearest the
    one used) against the ``flags`` (transpose, flip_y, flip_x) and ``rotation_deg`` the run uses;
    none for what the run measured itself (``rotation_measured``, ``flags_measured``), nor for a rotation
    under ``least_deg`` away (X-rays: XRAY_TURN_DEG)."""
    if found.curl_left > CURL_CLEAR or (rotation_measured and flags_measured):
        return []
    mirrored, off = frame_difference(flags, rotation_deg, found.flags, found.rotation_deg)
    said = []
    if mirrored:
        if not flags_measured and tells_handedness(found):
            t, fy, fx = found.flags
            said.append(f"warning: the patterns' centre of mass says they are mirrored against the scan (curl left "
                        f"{found.curl_left:.2f}, mirrored {found.curl_other:.2f}): data.transform transpose "
                        f"{flags[0]}, flip_y {flags[1]}, flip_x {flags[2]} do not fit the data; set "
                        f"data.transform.orientation: auto {AUTO} (the data say transpose {t}, flip_y {fy}, "
                        f"flip_x {fx})")
        return said
    if not found.tells_turn and abs(off) > 90:  # the centre of mass cannot tell a turn by 180 degrees
        off = wrapped_deg(off + 180.0, 360.0)
    spread = abs(found.halves_deg[0] - found.halves_deg[1]) / 2
    if not rotation_measured and abs(off) > max(least_deg, 3 * spread):
        said.append(f"warning: the patterns' centre of mass says the scan is turned {rotation_deg - off:.1f} deg "
                    f"against the detector, {-off:+.1f} deg from experiment.scan_rotation_deg {rotation_deg:g} "
                    f"(halves of the scan +-{spread:.1f} deg): set experiment.scan_rotation_deg: auto {AUTO}")
    return said


def search_warnings(searched, flags: tuple[bool, bool, bool], rotation_deg: float, defocus_A: float) -> list[str]:
    """The warnings of a clear Fourier regions' search ``searched`` (``overlap_orientation.OverlapOrientation``:
    its flags, rotation nearest the one used, and defocus of the given one's sign) against the ``flags``,
    ``rotation_deg`` and ``defocus_A`` given: for few counts, where the centre of mass is noise. A turn by
    180 degrees of the search's answer is also what a defocus of the wrong sign gives."""
    mirrored, off = frame_difference(flags, rotation_deg, searched.flags, searched.rotation_deg)
    head = f"warning: the bright-field pixels' coherence in Fourier space (its peak {searched.contrast:.1f} times the next)"
    if mirrored:
        t, fy, fx = searched.flags
        return [f"{head} says the patterns are mirrored against the scan: data.transform transpose {flags[0]}, flip_y "
                f"{flags[1]}, flip_x {flags[2]} do not fit the data; set data.transform.orientation: auto {AUTO} (the "
                f"data say transpose {t}, flip_y {fy}, flip_x {fx})"]
    said = []
    if abs(off) > 90:
        said.append(f"{head} says the scan is turned by {-off:+.0f} deg against experiment.scan_rotation_deg "
                    f"{rotation_deg:g}, or experiment.defocus_A {defocus_A:g} has the wrong sign: set "
                    f"experiment.scan_rotation_deg: auto {AUTO}, or check the defocus's sign")
    elif abs(off) > ROTATION_OFF_DEG:
        said.append(f"{head} says the scan is turned {rotation_deg - off:.1f} deg against the detector, {-off:+.1f} deg "
                    f"from experiment.scan_rotation_deg {rotation_deg:g}: set experiment.scan_rotation_deg: auto {AUTO}")
    if abs(searched.defocus_A - defocus_A) > DEFOCUS_OFF * abs(defocus_A):
        said.append(f"{head} gives a defocus of {searched.defocus_A:.1f} A, {searched.defocus_A - defocus_A:+.1f} A from "
                    f"experiment.defocus_A {defocus_A:g}: set experiment.defocus_A: auto {AUTO}")
    return said


def weak_orientation_warning(found: Orientation, parallax: ParallaxOrientation | None = None) -> str:
    """The warning for a scan rotation and transpose/flip taken from a centre of mass ``found`` that is mostly
    noise, or from the real-space ``parallax`` where its handedness was barely told, with no clear Fourier
    search to confirm them."""
    spread = abs(found.halves_deg[0] - found.halves_deg[1]) / 2
    source = (f"the bright-field parallax, whose handedness is only {parallax.ratio:.1f} times the other's, "
              if parallax is not None else "")
    return (f"warning: the scan rotation and the transpose/flip come from {source or 'a centre of mass that is '}"
            f"{'beside a centre of mass ' if source else ''}mostly noise (curl left {found.curl_left:.2f} of the worst "
            f"angle's, the scan's halves +-{spread:.1f} deg apart), and the Fourier regions' search found no clear "
            "peak: the reconstruction may be turned or "
            "mirrored against the truth; set experiment.scan_rotation_deg and data.transform.transpose, flip_y, "
            "flip_x by hand if they are known, or check the result against a second orientation")


def aliased_frame_warning(step_A: float, finest_A: float, candidates: int) -> str:
    """The warning for a scan whose step ``step_A`` exceeds lambda / (2 alpha) ``finest_A`` where no trial
    reconstructions judge among the ``candidates`` frames the measures left (``autocalibration.aliased_step``)."""
    tried = (f"ptyacc run tries the {candidates} candidate frames by short reconstructions "
             "(data.transform.orientation_trials)" if candidates > 1 else "no second frame was found to try")
    return (f"warning: the scan's step {step_A:.2f} A is coarser than lambda / (2 alpha) = {finest_A:.2f} A: the "
            "bright-field images' detail folds (aliasing), and the centre of mass, the parallax and the Fourier "
            f"regions' search can give the frame mirrored or turned; {tried}; set data.transform.transpose, flip_y, "
            "flip_x and experiment.scan_rotation_deg by hand if they are known, or scan with a step under "
            f"{finest_A:.2f} A")


def mirror_disagreement_warning(ratio: float, contrast: float) -> str:
    """The warning for a bright-field parallax whose handedness looked clear (``ratio`` times the other's) and a
    clear Fourier regions' search (its peak ``contrast`` times the next) that see mirrored frames, beside a centre of
    mass that is noise, where no trial reconstructions judge between them."""
    return (f"warning: the bright-field parallax (its handedness {ratio:.1f} times the other's) and the bright-field "
            f"pixels' coherence in Fourier space (its peak {contrast:.1f} times the next) see mirrored frames, and the "
            "centre of mass is mostly noise: the parallax's is used, and the reconstruction may be mirrored against "
            "the truth; ptyacc run judges between them by short reconstructions (data.transform.orientation_trials); "
            "set data.transform.transpose, flip_y, flip_x and experiment.scan_rotation_deg by hand if they are known")


def com_search_disagreement_warning(found: Orientation, searched: OverlapOrientation, mirrored: bool,
                                    apart_deg: float) -> str:
    """The warning for a centre of mass ``found`` used alone while a clear Fourier regions' search ``searched`` sees
    its mirror or a frame ``apart_deg`` from it (over the 10 degrees within which the search replaces it), where no
    trial reconstructions judge between them."""
    how = "its mirror" if mirrored else f"a frame {abs(apart_deg):.1f} deg apart"
    t, fy, fx = searched.flags
    return (f"warning: the centre of mass (scan rotation {found.rotation_deg:.2f} deg) and the Fourier regions' search "
            f"(its peak {searched.contrast:.1f} times the next: transpose {t}, flip_y {fy}, flip_x {fx}, rotation "
            f"{searched.rotation_deg:.2f} deg) see {how}: the centre of mass's is used, and the reconstruction may lie "
            "in the wrong frame; ptyacc run judges between them by short reconstructions "
            "(data.transform.orientation_trials); set experiment.scan_rotation_deg and data.transform.transpose, "
            "flip_y, flip_x by hand if they are known")


UNSURE_BY = {"parallax": ("the bright-field parallax", "few counts, a small raster or little contrast"),
             "search": ("the Fourier regions' search", "the spread of its peak with each eighth of the disk's pixels "
                        "left out in turn; few counts, a small raster, or a crystal's lattice frequencies between the "
                        "raster's bins")}


def unsure_rotation_warning(chosen: ParallaxOrientation | OverlapOrientation, by: str = "parallax") -> list[str]:
    """The warning for a scan rotation taken from the bright-field parallax ``chosen`` (``by`` "parallax") or the
    Fourier regions' search (``by`` "search") whose standard error exceeds ROTATION_UNSURE_DEG: the reconstruction
    may be turned by about as much, and the run's refinement cannot be trusted to find the angle where the patterns'
    own measure could not (the same signal tells it)."""
    error = chosen.rotation_error_deg
    if not error > ROTATION_UNSURE_DEG:
        return []
    low, high = chosen.rotation_deg - error, chosen.rotation_deg + error
    source, why = UNSURE_BY[by]
    return [f"warning: {source} fixes the scan rotation only to {chosen.rotation_deg:.2f} +- {error:.2f} "
            f"deg ({why}), and at such counts the reconstruction's data term "
            "does not fix it better: the image may be turned by about as much against the truth; set "
            "experiment.scan_rotation_deg if it is known, or compare runs started at experiment.scan_rotation_deg "
            f"{low:.2f} and {high:.2f}"]


ROTATIONS_APART_DEG = 2.5  # the parallax's rotation and a clear search's of its handedness this far apart: the run starts
# between them and says so (seeds 70-82 of the calibration matrix: benchmarks/records/2026-12-04-rotations-apart.md)
SEARCH_SHARE = 0.25  # of the way from the parallax's angle to the search's where they lie apart: the weight of the
# search's by their inverse variances, from their typical errors where both are clear (0.4 and 0.7 degrees, 61 files)


def rotations_apart_deg(parallax: ParallaxOrientation, searched: OverlapOrientation | None) -> float | None:
    """How far the bright-field parallax's scan rotation lies from a clear Fourier regions' search of the same
    handedness (degrees, ``frame_difference``'s sense: the parallax's less the search's, in the parallax's flags),
    where more than ROTATIONS_APART_DEG; None otherwise. Two measures of one angle that far apart: at least one is
    off by more than its standard error says (each error counts the noise, not how the sample's structure pulls
    the measure, which on small rasters reaches degrees at any dose)."""
    if searched is None or not searched.clear:
        return None
    mirrored, off = frame_difference(parallax.flags, parallax.rotation_deg, searched.flags, searched.rotation_deg)
    return None if mirrored or not abs(off) > ROTATIONS_APART_DEG else off


def rotations_apart_warning(parallax: ParallaxOrientation, off_deg: float) -> list[str]:
    """The warning for a parallax's rotation and a search's ``off_deg`` apart (``rotations_apart_deg``): the run
    starts SEARCH_SHARE of the way from the parallax's to the search's (``blended_rotation_deg``); the two angles
    in the parallax's frame."""
    ends = (parallax.rotation_deg, parallax.rotation_deg - off_deg)
    near, far = SEARCH_SHARE * abs(off_deg), (1 - SEARCH_SHARE) * abs(off_deg)
    return [f"warning: the bright-field parallax and the Fourier regions' search put the scan rotation {abs(off_deg):.1f} "
            f"deg apart ({ends[0]:.2f} and {ends[1]:.2f} deg): at least one of them is off by more than its error "
            f"says, so the run starts between them, at {blended_rotation_deg(parallax, off_deg):.2f} deg (weighted by "
            f"their typical errors): the image may be turned against the truth by {near:.1f} deg if the parallax is "
            f"right, {far:.1f} if the search is (the run's refinement of the rotation seldom finishes the job); set "
            "experiment.scan_rotation_deg if it is known, or compare runs started at experiment.scan_rotation_deg "
            f"{ends[0]:.2f} and {ends[1]:.2f}"]


def blended_rotation_deg(parallax: ParallaxOrientation, off_deg: float) -> float:
    """The rotation a run starts at where the parallax's and a search's lie ``off_deg`` apart
    (``rotations_apart_deg``): SEARCH_SHARE of the way from the parallax's to the search's, in the parallax's frame."""
    return parallax.rotation_deg - SEARCH_SHARE * off_deg


def trials_turn_warning(searched: OverlapOrientation, off_deg: float, start_deg: float) -> str:
    """The warning where trial reconstructions turned the scan rotation of a clear but broad Fourier regions' peak
    ``searched`` by ``off_deg`` (the same flags), over ROTATION_OFF_DEG, and the run starts at ``start_deg`` between
    the two: two measures of one angle that far apart, at counts where the trials' data term hardly tells angles
    apart (graphene at 1e3 counts: a peak 4 degrees off turned 8.5 degrees past the truth, the calibration matrix's
    h96-17)."""
    trials_deg = wrapped_deg(searched.rotation_deg + off_deg, 360.0)
    return (f"warning: the trial reconstructions turned the scan rotation {off_deg:+.1f} deg from the Fourier regions' "
            f"peak ({searched.rotation_deg:.2f} deg, its peak {searched.contrast:.1f} times the next: broad) to "
            f"{trials_deg:.2f} deg: two measures of one angle that far apart; the run starts halfway, at "
            f"{start_deg:.2f} deg, and the image may be turned against the truth by degrees; set "
            "experiment.scan_rotation_deg if it is known, or compare runs started at experiment.scan_rotation_deg "
            f"{searched.rotation_deg:.2f} and {trials_deg:.2f}")


def trials_doubt_warning(margin: float, rival: str | None, sure: float) -> str:
    """The warning for an orientation that trial reconstructions chose by a data term only ``margin`` (relative)
    below the next candidate's, ``rival`` (its line), under ``sure``: at few counts a wrong frame's short
    reconstruction can end that close, or lower."""
    return (f"warning: the trial reconstructions barely told the candidate orientations apart (the next one, {rival}, "
            f"ended {margin:.3%} above the one taken, under {sure:.2%}): the data carry little of the orientation, and "
            + frame_advice("that orientation"))


def frame_advice(compare: str) -> str:
    """What the trials' warnings advise where the frame they chose may be wrong, a run in ``compare`` beside."""
    return ("the reconstruction may lie in a turned or mirrored frame; set experiment.scan_rotation_deg and "
            f"data.transform.transpose, flip_y, flip_x by hand if they are known, or compare a run in {compare}")


def unmeasured_frame_warning(count: int, margin: float | None, rival: str | None) -> str:
    """The warning for a frame (transpose, flips, scan rotation) that trial reconstructions chose among ``count``
    candidates where nothing measured it clearly (the centre of mass mostly noise, no clear peak of the Fourier
    regions' search, the parallax's pixel groups hardly aligned), by a margin (``margin``, next to ``rival``) that
    ``trials_doubt_warning`` does not call close: at such counts a clear margin still chooses a wrong frame often."""
    ahead = f", the next one ({rival}) {margin:.2%} above it" if margin is not None and rival else ""
    return (f"warning: nothing measured the scan's frame against the detector clearly (the centre of mass is mostly "
            f"noise and the Fourier regions' search found no clear peak), so trial reconstructions chose it among "
            f"{count} candidates by their data terms{ahead}; at such counts that choice is often a wrong frame, and "
            + frame_advice("the next candidate's frame"))


@dataclass(frozen=True)
class Unsettled:
    """A quantity (``name``: "scan rotation", "defocus") whose trial reconstructions' data term still fell at
    ``value``, the last one they tried; ``key``, the config key that sets it by hand; ``kept``, what was used instead
    (None: ``value`` was taken)."""

    name: str
    value: str
    key: str
    kept: str | None = None


def trials_unsettled_warning(unsettled: Unsettled) -> str:
    """The warning for a quantity whose trial reconstructions' data term still fell at the last value they tried (the
    end of the range tried, not a minimum): that value taken, or, for the defocus, the measured one kept
    (``Unsettled.kept``)."""
    name, value, key = unsettled.name, unsettled.value, unsettled.key
    if unsettled.kept is not None:
        return (f"warning: the trial reconstructions' data term still fell at the last {name} they tried, {value}: the "
                f"end of the range tried, not a minimum, so {unsettled.kept} is kept (a data term that falls on and on "
                f"says the model lacks something the {name} stands in for, such as a partly coherent beam's modes or a "
                f"detector blur); set {key} by hand if it is known")
    return (f"warning: the trial reconstructions' data term still fell at the last {name} they tried, {value}, "
            f"which is used: the end of the range tried, not a minimum, so the {name} may lie further out; set "
            f"{key} by hand if it is known")


DEFOCUS_FAR = 1.75  # a defocus that trials or the search chose this many times the file's (or under its share) is said:
# the matrix's readouts are 0.7-1.3 times the truth, and a graphene file at 1e3 counts and 66 A ended at 222 A (h71-19)


def far_defocus_warning(defocus_A: float, nominal_A: float | None, by: str) -> list[str]:
    """The warning for a defocus that ``by`` (trial reconstructions, the Fourier search) chose where the parallax
    could not measure it, DEFOCUS_FAR times the file's nominal one or more (or less): at such counts the trials'
    losses can prefer a wrong frame's defocus, and a microscope's readout is seldom off by so much."""
    if not nominal_A or not defocus_A or 1 / DEFOCUS_FAR < defocus_A / nominal_A < DEFOCUS_FAR:
        return []
    return [f"warning: the defocus {defocus_A:.1f} A of {by} is {defocus_A / nominal_A:.2f} times the file's "
            f"{nominal_A:g} A, and the bright-field parallax could not measure it: at few counts or a small defocus "
            "the data hardly tell it, and the orientation chosen with it may be wrong too; if the file's value is "
            f"near the truth set experiment.defocus_A: {nominal_A:g} (and compare a run at the defocus found)"]


def rival_defocus_warning(parallax_A: float, searched_A: float) -> str:
    """The warning where the bright-field parallax's defocus and a clear Fourier regions' search's lie over
    DEFOCUS_OFF apart and no trial reconstruction decides between them (``data.transform.orientation_trials: 0``)."""
    return (f"warning: the bright-field parallax and the Fourier regions' search disagree on the defocus "
            f"({parallax_A:.1f} and {searched_A:.1f} A, {abs(searched_A - parallax_A) / abs(parallax_A):.0%} apart, where "
            f"they mostly agree within a few percent): the parallax's is used, and no trial reconstruction chose "
            f"between them (data.transform.orientation_trials is 0); set experiment.defocus_A if the microscope's focus "
            f"is known, or compare runs at the two")


def parallax_warnings(found: Parallax | None, defocus_A: float | None, rotation_deg: float | None,
                      flags_measured: bool, outvoted_under: float | None = None) -> list[str]:
    """The warnings of the bright-field parallax ``found``, measured on the prepared patterns at the
    run's positions, against the defocus (``defocus_A``; None where the run took the parallax's) and
    the scan rotation (``rotation_deg``; None where it was measured) the run uses, and the
    transpose/flip (unless ``flags_measured``). ``outvoted_under``: where a clear centre of mass or search
    gave the flags' handedness, a mirror part under this many times the rotating part is no warning: on small
    partly coherent rasters the parallax told the mirror of right flags 3 and 5 times."""
    if found is None or found.fit_A is None or found.misfit > MAX_MISFIT:
        return []
    rotating, reflecting = conformal_parts(found.fit_A[:, 1:])
    if reflecting > SURE * rotating:
        if outvoted_under is not None and reflecting < outvoted_under * rotating:
            return []
        return [] if flags_measured else [
            f"warning: the bright-field parallax says the patterns are mirrored against the scan (its mirror part "
            f"{reflecting / rotating:.1f} times its rotating part): set data.transform.orientation: auto {AUTO}"]
    if not found.reliable or rotating < SURE * reflecting:
        return []
    said = []
    if defocus_A is not None and defocus_A * found.defocus_A < 0:
        said.append(f"warning: the bright-field parallax measures a defocus of {found.defocus_A:.1f} A, the opposite "
                    f"sign to the {defocus_A:g} A the run uses (or the scan is turned by 180 deg): set "
                    f"experiment.defocus_A: auto {AUTO}")
    elif defocus_A is not None and abs(found.defocus_A - defocus_A) > max(DEFOCUS_OFF * abs(found.defocus_A),
                                                                          3 * found.defocus_error_A):
        said.append(f"warning: the bright-field parallax measures a defocus of {found.defocus_A:.1f} +- "
                    f"{found.defocus_error_A:.1f} A, {(defocus_A - found.defocus_A) / abs(found.defocus_A):+.0%} off "
                    f"the {defocus_A:g} A the run uses: set experiment.defocus_A: auto {AUTO}")
    if rotation_deg is not None and abs(found.rotation_left_deg) > ROTATION_OFF_DEG:
        said.append(f"warning: the bright-field parallax says the scan is turned {found.rotation_left_deg:+.1f} deg "
                    f"from experiment.scan_rotation_deg {rotation_deg:g}: set experiment.scan_rotation_deg: auto "
                    f"{AUTO}")
    return said


def relative_misfit(deviance: float, counts: float) -> float:
    """The rms share of the counts by which a model's intensities would miss them to give this Poisson ``deviance``
    per counted pixel at ``counts`` per counted pixel: a model off by a share d of intensities I has a deviance of
    about 1 + I d^2 per pixel (the noise's 1, the misfit's I d^2)."""
    return math.sqrt(max(deviance - 1.0, 0.0) / counts) if counts > 0 else math.inf


LONGER = "or, if the loss still falls, set optim.iterations: auto (the run ends once converged) or raise it"
# the stop rule reads a slow late fall as converged: abTEM's 62 A SrTiO3 stopped after 37 iterations at a phase NCC of 0.72,
# 400 reached 0.967 (benchmarks/records/2026-12-06-thick-crystal-deviance.md)
LONGER_AFTER_STOP = ("or give optim.iterations a number: the stop rule judged the run converged, and a slow late fall "
                     "(a thick crystal's) can go on for hundreds of iterations")


def deviance_warning(deviance: float, counts: float | None = None, electron: bool = True, slices: int = 1,
                     scattering: float | None = None, converged: bool = False) -> list[str]:
    """A warning when the final Poisson deviance per counted pixel lies far above the noise level (DEVIANCE_HIGH)
    and, where the mean ``counts`` per counted pixel are known, the misfit it stands for is beyond MISFIT_HIGH of
    the counts (module docstring); the keys it names are the electron autos' (``electron``) or an X-ray run's, and
    for several ``slices`` the multislice model's; on one slice of a strongly scattering sample (``scattering``: its
    share of the counts beyond the bright-field disk, given where it is strong) ``model.slices``. Its last remedy is
    ``optim.iterations: auto``, or, where the stop rule ended the run (``converged``), a number of iterations."""
    if not deviance > DEVIANCE_HIGH:
        return []
    misfit = None if counts is None else relative_misfit(deviance, counts)
    if misfit is not None and misfit <= MISFIT_HIGH:
        return []
    share = "" if misfit is None else (f", a misfit of {100 * misfit:.0f} % of the {counts:.3g} counts per counted "
                                       f"pixel (over {100 * MISFIT_HIGH:.0f} %)")
    keys = ("experiment.scan_rotation_deg, data.transform.orientation and experiment.defocus_A (auto measures them), "
            "experiment.dk_invA" if electron else
            "data.transform's flips and transpose (against the file's basis vectors), the geometry "
            "(experiment.geometry: near_field for holograms, experiment.detector_distance_m, "
            "experiment.focus_to_sample_m), model.background")
    if slices > 1:  # a thick sample: the slices' depth, a tilt the model leaves out
        keys += ", model.slices and model.slice_thickness_A, experiment.tilt_mrad (or optim.start.tilt)"
    elif scattering is not None:
        keys += (f", model.slices and model.slice_thickness_A ({100 * scattering:.1f} % of the counts lie beyond the "
                 "bright-field disk: a thick or strongly scattering sample wants several slices)")
    return [f"warning: the final Poisson deviance {deviance:.3g} per counted pixel is far above the about 1 of a "
            f"model at the noise level (over {DEVIANCE_HIGH:g}){share}: the model does not explain the data; check "
            f"{keys}; {LONGER_AFTER_STOP if converged else LONGER}"]


# a turn of TURN_TOLD_DEG or more: the object formed at the angle the run started from and holds the scan near it, so
# a run started where this one ended comes nearer the data's angle (on the calibration matrix's 21 files that started
# 0.8-3.8 degrees off: nearer the truth on 20, as near on one; benchmarks/records/2026-12-04-rotation-equilibrium-and-seed-76.md)
AGAIN_NEARER = (" (a run started there comes nearer still: the object holds the scan near the angle it first formed "
                "at)")


FOCUS_TOLD_SHARE = 0.05  # a change of focus of this share of the defocus started at, or more, is said on the terminal too


def refocused_probe_said(results) -> list[tuple[str, bool]]:
    """run.log's line on the change of focus a run refined (``optim.start.probe_focus``): the change from the defocus
    it started at and the ``experiment.defocus_A`` that starts a run there (X-rays: the sample's place past the focus
    and ``experiment.focus_to_sample_m``), for the terminal too from FOCUS_TOLD_SHARE of it (``RunLog.say``'s pairs);
    none where it was not refined."""
    attrs = results.attrs or {}
    change = attrs.get("probe_focus_change_A")
    place = attrs.get("probe_focus_to_sample_start_m")
    if change is not None and place is not None:  # X-rays: the sample's place past the focus, the other sign
        moved_m, place = -float(change) * 1e-10, float(place)
        said = f"probe focus: the run moved the sample's place past the focus by {moved_m * 1e3:+.4g} mm"
        if not math.isfinite(place):
            return [(f"{said} from where the initial probe was made (run.log's initial-probe line)", False)]
        return [(f"{said} from the {place * 1e3:.4g} mm it started at; experiment.focus_to_sample_m: "
                 f"{place + moved_m:.6g} starts a run there", abs(moved_m) >= FOCUS_TOLD_SHARE * abs(place))]
    started = (results.calibration or {}).get("defocus_A")
    if change is None or started is None:
        return []
    far = abs(float(change)) >= FOCUS_TOLD_SHARE * max(abs(float(started[0])), 1.0)
    return [(f"probe focus: the run changed the defocus by {float(change):+.1f} A from the {started[0]:.1f} A it "
             f"started at ({started[1]}); experiment.defocus_A: {started[0] + float(change):.1f} starts a run there",
             far)]


ASTIGMATISM_TOLD_A = 5.0  # a change of C12 this large (Å, either part), or more, is said on the terminal too


def astigmatism_said(results) -> list[tuple[str, bool]]:
    """run.log's line on the change of two-fold astigmatism a run refined (``optim.start.probe_astigmatism``): the
    change from the C12 it started at and the ``experiment.aberrations`` that start a run there, for the terminal too
    from ASTIGMATISM_TOLD_A (``RunLog.say``'s pairs); none where it was not refined."""
    attrs = results.attrs or {}
    if "probe_c12a_change_A" not in attrs:
        return []
    change = (float(attrs["probe_c12a_change_A"]), float(attrs["probe_c12b_change_A"]))
    start = (float(attrs.get("probe_c12a_start_A", 0.0)), float(attrs.get("probe_c12b_start_A", 0.0)))
    far = max(abs(part) for part in change) >= ASTIGMATISM_TOLD_A
    return [(f"probe astigmatism: the run changed C12a by {change[0]:+.1f} A and C12b by {change[1]:+.1f} A from the "
             f"({start[0]:.1f}, {start[1]:.1f}) A it started at; experiment.aberrations with C12a: "
             f"{start[0] + change[0]:.1f}, C12b: {start[1] + change[1]:.1f} (the others as they were) starts a run "
             "there", far)]


def turned_scan_said(results) -> list[tuple[str, bool]]:
    """run.log's line on the scan rotation a run refined (``model.scan_affine: rotation``): the turn from the one it
    started at and the ``experiment.scan_rotation_deg`` that starts a run there, for the terminal too from TURN_TOLD_DEG
    (``RunLog.say``'s pairs); none where it was not refined. Not a warning: the refinement mostly brings a rotation a
    few degrees off to the data's, and the object with it, but it can also turn a right one away."""
    turn = ((results.quantities or {}).get("fitted") or {}).get("scan_turn_deg")
    started = (results.calibration or {}).get("scan_rotation_deg")
    if turn is None or started is None:
        return []
    far = abs(float(turn)) >= TURN_TOLD_DEG
    return [(f"scan rotation: the run turned the scan {float(turn):+.2f} deg from the {started[0]:.2f} deg it started "
             f"at ({started[1]}); experiment.scan_rotation_deg: {started[0] + float(turn):.2f} starts a run there"
             + (AGAIN_NEARER if far else ""), far)]


CONJUGATE_CLEAR = 0.3  # the correlation of an X-ray object's phase with its log amplitude beyond which the sign is said


def conjugate_warning(correlation: float, flags: tuple[bool, bool, bool], side: str | None = None) -> list[str]:
    """X-ray far field: the warning for an object whose phase rises where it absorbs (``correlation`` of its phase
    with its log amplitude below -CONJUGATE_CLEAR), which X-ray matter (refractive index 1 - delta + i beta, delta and
    beta positive) never does. Patterns flipped along both axes are exactly those of the conjugate object under the
    conjugate probe, so the data fit such a run as well as the right one: only this sign tells them apart. ``flags``:
    the transpose, flip_y and flip_x the run used; ``side``: the sample's side of the focus its probe started on
    (``experiment.sample_side``), None where ``experiment.focus_to_sample_m`` gave it."""
    if correlation >= -CONJUGATE_CLEAR:
        return []
    other = _other_side(side)
    return [f"warning: the object's phase rises where its amplitude falls (their correlation over the scanned region "
            f"{correlation:+.2f}), where X-ray matter delays the phase where it absorbs: this is the conjugate of the "
            f"object (read the phase with its sign reversed), which patterns flipped along both axes fit as well as the "
            f"object itself under a probe curved the other way; to reconstruct the object itself, set both "
            f"{_other_member(flags)} and {other}"]


PHASE_ADVANCED_SKEW = 1.0  # the skew of an X-ray object's phase beyond which it departs from its background forward
# (the far-field simulator's 48 files of three draws: the side's trial objects -1.8 to -3.0 where they held the object's
# member, +2.3 to +2.5 where the conjugate's; after 30 iterations -1.9 to -3.1 and +2.5)


def conjugate_reason(correlation: float, skew: float | None) -> str | None:
    """X-ray far field: run.log's words for why an object (its phase against its log amplitude ``correlation``, its
    phase's skew ``skew``) reads as the conjugate, None where it does not. Its phase rises where it absorbs (below
    -CONJUGATE_CLEAR), or, where it absorbs too little to say (within CONJUGATE_CLEAR), its phase departs from its
    background forward (skew over PHASE_ADVANCED_SKEW): matter on an empty support delays an X-ray's phase, so that
    the phase of such a sample has a long tail backward; forward, it is the conjugate, or holes in a film."""
    if correlation < -CONJUGATE_CLEAR:
        return f"its phase against its log amplitude {correlation:+.2f}"
    if skew is not None and abs(correlation) < CONJUGATE_CLEAR and skew > PHASE_ADVANCED_SKEW:
        return (f"its phase departs from its background forward (skew {skew:+.2f}), as matter on an empty support "
                f"delays it, and it absorbs too little to say otherwise (its phase against its log amplitude "
                f"{correlation:+.2f})")
    return None


def advanced_phase_warning(correlation: float, skew: float, flags: tuple[bool, bool, bool], side: str | None) -> list[str]:
    """X-ray far field, where the flags or the scan rotation were auto (from the data, or the flags from the file's
    basis vectors): the warning for a weak absorber whose phase departs from its background forward
    (``conjugate_reason`` by its skew), the conjugate's mark unless the sample is a film with holes. ``side``: the
    sample's side of the focus its probe started on, None where ``experiment.focus_to_sample_m`` gave it."""
    if abs(correlation) >= CONJUGATE_CLEAR or (reason := conjugate_reason(correlation, skew)) is None:
        return []
    return [f"warning: this is likely the conjugate of the object (read the phase with its sign reversed): "
            f"{reason}, unless the sample is a film with holes; patterns flipped along "
            f"both axes fit the conjugate as well as the object under a probe curved the other way; to reconstruct the "
            f"object itself, set both {_other_member(flags)} and {_other_side(side)}"]


def pair_member_said(correlation: float, skew: float, flags: tuple[bool, bool, bool], side: str | None
                     ) -> list[tuple[str, bool]]:
    """X-ray far field, where the flags or the scan rotation were auto and nothing warned of the conjugate: run.log's
    line (for the terminal too) on what chose the pair's member where the object absorbs too little to say
    (``correlation`` within CONJUGATE_CLEAR) and its phase's ``skew`` is not a forward one. The data fit the object and
    its conjugate alike; the frame taken rests on the phase departing backward from its background, as matter on an
    empty support does. A weakly absorbing film with holes departs forward in truth: there the other frame holds the
    object (the far-field simulator's eight such files all ended the conjugate, none warned), and no check can see
    it; the line names its keys. None where the absorption said it, or a warning spoke."""
    if abs(correlation) >= CONJUGATE_CLEAR or skew > PHASE_ADVANCED_SKEW:
        return []
    other = _other_side(side)
    shape = (f"the frame taken makes its phase depart from its background backward (skew {skew:+.2f}), as matter on "
             f"an empty support does" if skew < -PHASE_ADVANCED_SKEW else
             f"its phase's skew ({skew:+.2f}) does not tell either")
    return [(f"conjugate pair: the object absorbs too little to tell it from its conjugate (its phase against its log "
             f"amplitude {correlation:+.2f}), which the data fit alike; {shape}; where the sample is a film with holes "
             f"(its phase departing forward), the other frame holds the object: {_other_member(flags)} with {other}",
             True)]


def _other_side(side: str | None) -> str:
    """The key that puts the sample on the other side of the focus from ``side`` (None: the side came from
    ``experiment.focus_to_sample_m``), the conjugate pair's other member's second half."""
    return ("experiment.focus_to_sample_m with the other sign" if side is None else
            f"experiment.sample_side: {'upstream' if side == 'downstream' else 'downstream'}")


def _other_member(flags: tuple[bool, bool, bool]) -> str:
    """The keys of the conjugate pair's other member of the frame ``flags``: both flips reversed."""
    t, fy, fx = flags
    return f"data.transform.orientation: manual, transpose: {t}, flip_y: {not fy}, flip_x: {not fx}"


def unsure_conjugate_warning(correlation: float, flags: tuple[bool, bool, bool], side: str,
                             skew: float | None = None) -> list[str]:
    """X-ray far field, where trial reconstructions chose the flags (the centre of mass could not tell the
    handedness) and ``experiment.sample_side: auto`` the side, ``side``: the warning that the object may be its own
    conjugate, where its phase against its log amplitude (``correlation``) is too weak to say (under
    CONJUGATE_CLEAR either way: a weak absorber) and its phase's ``skew`` does not say it is delayed (over
    -PHASE_ADVANCED_SKEW; over +PHASE_ADVANCED_SKEW ``advanced_phase_warning`` speaks instead). The pair's two members
    then rest on the centre of mass's divergence skew (``autocalibration._phase_delayed``) and the trial objects'
    phase; the sample's side of the focus, where known, decides them."""
    if abs(correlation) >= CONJUGATE_CLEAR or skew is not None and skew < -PHASE_ADVANCED_SKEW:
        return []
    other = "upstream" if side == "downstream" else "downstream"
    return [f"warning: this may be the conjugate of the object (its phase reversed): the centre of mass could not tell "
            f"the detector's flips, and the object absorbs too little to tell it from its conjugate (its phase against "
            f"its log amplitude {correlation:+.2f}"
            + ("" if skew is None else f", its phase departing from its background either way, skew {skew:+.2f}")
            + f"), which patterns flipped along both axes fit as well under a probe curved the other way; where the "
            f"sample lies {other} of the focus, set experiment.sample_side: {other} with {_other_member(flags)}; where "
            f"it lies {side}, set experiment.sample_side: {side} to keep this frame"]


def warnings_said(warnings: list[str]) -> list[str]:
    """The end of a run's line that recalls its warnings and the config keys they name (without the word
    warning, so that run.log holds one line with it per warning); none without warnings."""
    if not warnings:
        return []
    keys = sorted({key for text in warnings for key in re.findall(r"(?:experiment|data|optim)\.[A-Za-z_.]*[A-Za-z]", text)})
    return [f"at the end: {len(warnings)} check{'s' if len(warnings) > 1 else ''} found trouble (said above, listed "
            f"in results.h5); the keys to look at: {', '.join(keys)}"]
