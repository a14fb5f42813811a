"""The calibration autos of a data load, in one step (``autocalibrate``), which ``load_data`` (and so
``ptyacc run``, ``info`` and ``init``'s report) goes through: the scan read as a raster where an auto needs
its grid, the calibration (``calibration.calibrate``), the bad pixels, the scan rotation and the patterns'
transpose/flip (centre of mass, ``orientation.py``; the bright-field parallax, ``parallax_orientation.py``;
the Fourier regions' coherence, ``overlap_orientation.py``; X-rays: the holograms' motion in the near field,
``hologram_motion.py``, and in the far field the centre of mass's turn refined by trials, ``_xray_turn_tried``),
the flips about the zero frequency, the
preparation that follows, the descan, the defocus (parallax, ``parallax.py``, or coherence, which ``ptyacc run``'s
trial reconstructions then try: ``_focus_tried``), and the checks of values given against the data
(``trouble.py``, ``sanity.py``).

What the autos found and decided is one record, ``AutoCalibration``: it gives results.h5's ``/detector``
arrays, the run's config with the numbers in place of the autos (``in_config``) and the ``auto_values`` that
name them (results.h5, run.log, ``info --save``). The scan's middle block, which half a dozen of these
measurements read, and the samples are read from the file once (``ReadOnce``) and prepared as each asks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ptyacc.config import Config, ExperimentConfig, resolved_upsample
from ptyacc.data.bright_field import measured_radius_px, sample_rows
from ptyacc.data.calibration import Calibration, SourceFacts, calibrate
from ptyacc.data.descan import Descan, Descanned, any_moved, beam_axis_px, disk_offset_px, measure_descan
from ptyacc.data.detector import BadPixels, good_pixels, measure_bad_pixels
from ptyacc.data.hologram_motion import MIN_MOTION_POSITIONS, NearFieldGeometry, measure_motion, near_field_geometry
from ptyacc.data.orientation import (
    FLAGS,
    PHASE_SIGN,
    equivalent_orientations,
    flag_matrix,
    frame_difference,
    measure_orientation,
    middle_block,
    rotation,
    wrapped_deg,
)
from ptyacc.data.overlap_orientation import overlap_defocus, overlap_orientation
from ptyacc.data.parallax import MIN_EDGE_PHASE, MIN_SIDE, Parallax, measure_parallax, stored_parallax
from ptyacc.data.parallax_orientation import parallax_orientation
from ptyacc.data.positions import raster_positions_A, turned_positions_A
from ptyacc.data.prepare import Preparation, orientation_from_basis, pattern_preparation
from ptyacc.data.sanity import calibration_checks, scan_grid_steps
from ptyacc.data.stored_scan import raster_or_positions
from ptyacc.data.trouble import (
    CURL_CLEAR,
    DEFOCUS_OFF,
    ROTATION_OFF_DEG,
    XRAY_TURN_DEG,
    Unsettled,
    aliased_frame_warning,
    blended_rotation_deg,
    com_search_disagreement_warning,
    com_warnings,
    conjugate_reason,
    far_defocus_warning,
    mirror_disagreement_warning,
    parallax_warnings,
    rival_defocus_warning,
    rotations_apart_deg,
    rotations_apart_warning,
    search_warnings,
    tells_handedness,
    trials_doubt_warning,
    trials_turn_warning,
    trials_unsettled_warning,
    unmeasured_frame_warning,
    unsure_rotation_warning,
    weak_orientation_warning,
)
from ptyacc.errors import DataError
from ptyacc.physics.footprint import cone_numerical_aperture, overlap_defocus_A

BASIS = "detector_basis_vectors_m"  # the file attribute of data.transform.orientation: auto
MIN_RASTER = 8  # positions along each side for the centre of mass to tell a rotation
SIGN_WARNING = "warning: the data's bright-field parallax says the defocus has the opposite sign"  # sanity.py's
OPPOSITE = ", the opposite sign to the"  # trouble.parallax_warnings's, which says the same
C12_SIGMAS = 3.0  # standard errors from 0 beyond which the parallax's C12 is used: its error is estimated low (on
# the calibration matrix's files, which have none, it read 2-11 sigma; one taken at 2.2 sigma, 12 A on an 86 A defocus,
# cost 0.035 in NCC), while a C12 that matters (20 A) reads beyond 4
PARALLAX_SURE = 10.0  # the real-space parallax's handedness ratio above which its orientation needs no second opinion
SEARCH_SURE = 2.5  # the Fourier regions' contrast below which ``ptyacc run`` tries the rotation by reconstructions
TRIALS_SURE = 0.0025  # the trials' relative margin below which the orientation they chose is said to be in doubt
SEARCH_APART_DEG = 10.0  # a clear search this near a centre of mass alone (or its turn by 180) gives the orientation
DEFOCUS_HEAD = "defocus from the bright-field parallax (experiment.defocus_A: auto)"  # run.log's defocus line
BY_SEARCH = "the Fourier regions' coherence"  # what gave an orientation's defocus (``MeasuredOrientation.defocus_by``)
BY_TRIALS = "trial reconstructions"
BY_PARALLAX = "the bright-field parallax"
SEARCH_READING = "the Fourier regions' defocus"  # the search's reading as a trials' candidate against the parallax's
BY_PEAK = "the Fourier regions' peak"  # a candidate orientation's ``found_by``: the search's clear peak
FLIP_SAMPLE = 64  # patterns whose mean tells where the bright-field disk lies
RECENTRED_PX = 0.25  # how much nearer the zero frequency other flags must bring the disk to be taken instead (a
# reversal moves an axis by a whole pixel: a disk over half a pixel off along it comes back within half a pixel)

Flags = tuple[bool, bool, bool]


@dataclass(frozen=True)
class MeasuredOrientation:
    """The transpose/flip ``flags`` (transpose, flip_y, flip_x) and scan rotation ``rotation_deg`` measured
    from the data (after the flips about zero and the parallax's correction, where they changed them), the
    centre of mass's divergence ``skew`` and whether it told a turn by 180 degrees (``tells_turn``); the defocus that
    came with the orientation, ``defocus_A``, and what gave
    it, ``defocus_by`` (``BY_SEARCH``, ``BY_TRIALS``, or a guess's source; None where none did); and ``by_trials``
    whether trial reconstructions judged the orientation (the parallax's later correction of the rotation is then
    not taken: at the counts that call for trials its groups hardly align); ``blended`` whether the rotation lies
    between the parallax's and a Fourier regions' search's that lay apart (``trouble.blended_rotation_deg``; nor is
    it taken then: it would take the rotation back to the parallax's)."""

    flags: Flags
    rotation_deg: float
    skew: float
    defocus_A: float | None = None
    defocus_by: str | None = None
    by_trials: bool = False  # trial reconstructions judged it (``reconstruction/trials.py``)
    tells_turn: bool = False
    blended: bool = False  # the rotation between the parallax's and a search's (``trouble.blended_rotation_deg``)
    # a clear Fourier regions' search's defocus in the frame used, where the orientation came without a defocus of
    # its own (the parallax's, or the centre of mass's or search's without trials): the parallax's defocus is checked
    # against it (``_defocused``)
    searched_defocus_A: float | None = None


@dataclass(frozen=True)
class MeasuredDescan:
    """``data.transform.descan: auto``: the ``descan`` found, each pattern's shift ``shifts_px`` (N, 2) (its
    ``applied_px``) and whether the model moves its predictions by them (``descan_model: ramp``) rather than
    the patterns being shifted back."""

    descan: Descan
    shifts_px: np.ndarray
    in_model: bool = False

    @property
    def moves_patterns(self) -> bool:
        """Whether the patterns are shifted back as they are read: a shift moves one (``any_moved``) and the model
        does not take it."""
        return not self.in_model and any_moved(self.shifts_px)


@dataclass(frozen=True)
class MeasuredDefocus:
    """``experiment.defocus_A: auto``: the defocus used (Å, = -C10, at the model's entrance surface) with its
    standard error (NaN where the Fourier regions' coherence or trials gave it), the ``parallax`` measurement it
    came from (None for the coherence's); ``searched_A`` the coherence of the prepared patterns' reading where it gave
    the defocus (the parallax could not tell; ``_focus_tried`` then has trials try it), and ``tried`` whether trial
    reconstructions chose ``defocus_A`` from it."""

    defocus_A: float
    error_A: float
    parallax: Parallax | None = None
    searched_A: float | None = None
    tried: bool = False
    rival_A: float | None = None  # a clear Fourier regions' search's defocus far from the parallax's: trials try both
    turn_deg: float = 0.0  # the parallax's rotation left, added to the scan rotation with its defocus
    c12_set: tuple[str, ...] = ()  # the aberrations (C12a, C12b) that the parallax's reading set
    # the parallax's C12 (a, b) Å not set because trial reconstructions judged the orientation: they try it (``_c12_tried``)
    c12_withheld: tuple[float, float] | None = None


@dataclass(frozen=True)
class OrientationCandidate:
    """One orientation the data leave open where they cannot tell it clearly: the transpose/flip ``flags``, the
    scan rotation ``rotation_deg`` and the defocus that goes with them, ``defocus_A`` (the Fourier regions'
    search's, or for the centre of mass's or parallax's guess the parallax's or the nominal one; None where none
    is known: then measured as for any other orientation); ``found_by`` names the measurement, ``defocus_by`` what
    gave the defocus; ``flip_about_zero`` (y, x) the flips that turn about the zero frequency where the centre's
    place decided them already (the trials of a measured defocus, ``_focus_tried``)."""

    flags: Flags
    rotation_deg: float
    defocus_A: float | None
    found_by: str
    defocus_by: str | None = BY_SEARCH
    flip_about_zero: tuple[bool, bool] = (False, False)
    c12_A: tuple[float, float] | None = None  # the two-fold astigmatism (C12a, C12b) it takes; None: as the run's
    focus_to_sample_m: float | None = None  # X-ray far field: the initial probe's distance from its focus; None: the run's

    def line(self) -> str:
        t, fy, fx = self.flags
        defocus = "" if self.defocus_A is None else f", defocus {self.defocus_A:.1f} A"
        c12 = "" if self.c12_A is None else f", C12a {self.c12_A[0]:+.1f} A, C12b {self.c12_A[1]:+.1f} A"
        side = "" if self.focus_to_sample_m is None else \
            f", the sample {abs(self.focus_to_sample_m) * 1e3:.3g} mm {side_of(self.focus_to_sample_m)} of the focus"
        return (f"transpose {t}, flip_y {fy}, flip_x {fx}, rotation {self.rotation_deg:.2f} deg{defocus}{c12}{side} "
                f"({self.found_by})")


@dataclass(frozen=True)
class Verdict:
    """A judge's choice among candidate orientations: the candidate ``taken`` (its rotation and defocus as the
    judge refined them) and run.log's line ``said``; where it chose among several, ``margin``, how far the next
    one's data term ended above the taken one's, relative to it, and ``rival``, that one's line; ``unsettled``, the
    quantities whose trials' data term still fell at the last value tried."""

    taken: OrientationCandidate
    said: str
    margin: float | None = None
    rival: str | None = None
    unsettled: tuple[Unsettled, ...] = ()
    # X-ray far field: the phase against absorption of the object of the trial ``correlated`` (the taken candidate's
    # own, or where its rotation lies between the finer trials' and was never reconstructed, the nearest one's)
    correlation: float | None = None
    losses: tuple[float, ...] = ()  # each candidate's trial's final data term, in order
    correlated: OrientationCandidate | None = None
    phase_skew: float | None = None  # the skew of that object's phase (``results.quality.phase_skew``)


# chooses among candidate orientations (``reconstruction/trials.py``), refining the rotation (``turn``) and the
# search's defocus (``focus``) by default
Judge = Callable[..., Verdict]
SAME_FRAME_DEG = 5.0  # candidates whose frames (R(theta)^T F) are this close are one


def orientation_candidates(flags: Flags, rotation_deg: float, found_by: str, searched,
                           defocus_A: float | None = None, defocus_by: str | None = None
                           ) -> list[OrientationCandidate]:
    """The distinct orientations an unclear Fourier regions' search ``searched`` (its best peak, then its rivals)
    and the centre of mass's or parallax's guess (``flags``, ``rotation_deg``, ``found_by``, with ``defocus_A``
    the parallax's or the nominal one, whose sign goes with the flags, as ``defocus_by`` says) leave open."""
    found = [OrientationCandidate(s.flags, s.rotation_deg, s.defocus_A, name) for s, name in
             ((searched, "the Fourier regions' best peak"), *((r, "a rival peak") for r in searched.rivals))]
    found.append(OrientationCandidate(flags, rotation_deg, defocus_A, found_by,
                                      None if defocus_A is None else defocus_by))
    kept: list[OrientationCandidate] = []
    for one in found:
        differences = (frame_difference(one.flags, one.rotation_deg, k.flags, k.rotation_deg) for k in kept)
        if all(mirrored or abs(off_deg) > SAME_FRAME_DEG for mirrored, off_deg in differences):
            kept.append(one)
    return kept


@dataclass(frozen=True)
class AutoCalibration:
    """What the calibration autos of one load found and decided: the ``bad_pixels`` left out, the
    ``orientation`` measured, the flips that turn about the zero frequency (``flip_about_zero`` (y, x), where
    any does), the ``descan``, the ``defocus``; with what the preparation and the calibration use after them:
    the transpose/flip ``flags``, the scan rotation ``scan_rotation_deg`` and the ``aberrations`` (against the
    ``nominal_aberrations`` the config or file gave); ``asked``, the keys of ``CALIBRATION_AUTOS`` the config gave
    as auto, and ``descan_model``, how the descan is taken ("ramp": by the model, ``descan_left_to_model``;
    "shift")."""

    flags: Flags
    scan_rotation_deg: float
    aberrations: Mapping[str, float]
    nominal_aberrations: Mapping[str, float]
    bad_pixels: BadPixels | None = None
    orientation: MeasuredOrientation | None = None
    flip_about_zero: tuple[bool, bool] | None = None
    descan: MeasuredDescan | None = None
    defocus: MeasuredDefocus | None = None
    asked: frozenset[str] = frozenset()
    descan_model: str = "shift"
    # X-ray far field, ``experiment.sample_side: auto``: the side of the focus taken and the distance (m, signed: negative
    # upstream) the initial probe starts at, None where the side is taken without trials (downstream, the overlap's)
    sample_place: tuple[str, float | None] | None = None
    near_field_focus_m: float | None = None  # X-ray near field: the focus-to-sample distance the holograms' motion gave

    def detector_arrays(self) -> dict[str, np.ndarray]:
        """results.h5's ``/detector`` group (names and dtypes in ``results/h5file.py``'s docstring)."""
        arrays = {} if self.bad_pixels is None else self.bad_pixels.arrays()
        if self.orientation is not None:
            arrays.update(scan_rotation_deg=np.float64(self.orientation.rotation_deg),
                          orientation_flags=np.array(self.orientation.flags),
                          orientation_skew=np.float64(self.orientation.skew))
            if self.orientation.by_trials:
                arrays["orientation_by_trials"] = np.bool_(True)
            name = {BY_SEARCH: "overlap_defocus_A", BY_TRIALS: "trials_defocus_A"}.get(self.orientation.defocus_by)
            if name is not None:
                arrays[name] = np.float64(self.orientation.defocus_A)
        if self.flip_about_zero is not None:
            arrays["flip_about_zero"] = np.array(self.flip_about_zero)
        if self.descan is not None:
            arrays.update(self.descan.descan.arrays(self.descan.shifts_px))
            if self.descan.in_model:
                arrays["descan_in_model"] = np.bool_(True)
        if self.defocus is not None:
            arrays["parallax_defocus_A"] = np.array([self.defocus.defocus_A, self.defocus.error_A])
            # the coherence gave it (no orientation's defocus was used then), or read one far from the parallax's
            searched = self.defocus.searched_A if self.defocus.searched_A is not None else self.defocus.rival_A
            if searched is not None:
                arrays["overlap_defocus_A"] = np.float64(searched)
            if self.defocus.tried:
                arrays["trials_defocus_A"] = np.float64(self.defocus.defocus_A)
            found = self.defocus.parallax
            if found is not None:
                arrays.update(parallax_c12_A=np.array([found.c12a_A, found.c12b_A, found.c12_error_A]),
                              parallax_rotation_left_deg=np.float64(found.rotation_left_deg),
                              parallax_k_invA=found.k_invA[found.used], parallax_shifts_A=found.shifts_A[found.used],
                              parallax_fit_A=found.fit_A, parallax_image=found.image)
        return arrays

    def auto_values(self) -> dict[str, float | int | str | bool]:
        """{key: value} of the calibration autos as resolved (results.h5's and ``info --save``'s ``auto_values``,
        run.log's "auto:" line): the scan rotation, the defocus and the C12 the parallax set, the transpose/flip
        (and which flips turn about the zero frequency), the number of bad pixels left out, the largest descan
        (px, 0 where none was taken out) and how the model takes it. The values ``in_config`` puts in the config,
        and the two it does not (``MEASURED_ONLY``)."""
        found: dict[str, float | int | str | bool] = {}
        if "experiment.scan_rotation_deg" in self.asked:
            found["experiment.scan_rotation_deg"] = float(self.scan_rotation_deg)
        if "experiment.defocus_A" in self.asked:
            found["experiment.defocus_A"] = self.defocus_A
            found.update({f"experiment.aberrations.{name}": value for name, value in self.fitted_c12().items()})
        if "data.transform.orientation" in self.asked:
            found.update({"data.transform.transpose": bool(self.flags[0]), "data.transform.flip_y": bool(self.flags[1]),
                          "data.transform.flip_x": bool(self.flags[2]),
                          "data.transform.flip_about_zero": [bool(v) for v in self.flip_about_zero or (False, False)]})
        if "experiment.sample_side" in self.asked and self.sample_place is not None:
            found["experiment.sample_side"] = self.sample_place[0]
            if self.sample_place[1] is not None:
                found["experiment.focus_to_sample_m"] = self.sample_place[1]
        if "experiment.focus_to_sample_m" in self.asked and self.near_field_focus_m is not None:
            found["experiment.focus_to_sample_m"] = self.near_field_focus_m
        if "data.bad_pixels" in self.asked:
            found["data.bad_pixels"] = self.bad_pixels.count
        if "data.transform.descan" in self.asked:
            shifts = self.descan.shifts_px
            found["data.transform.descan"] = float(np.abs(shifts).max()) if len(shifts) else 0.0
            if "data.transform.descan_model" in self.asked:
                found["data.transform.descan_model"] = self.descan_model
        return found

    @property
    def defocus_A(self) -> float:
        """The defocus the run takes (Å, = -C10 of ``aberrations``)."""
        return -float(self.aberrations.get("C10", 0.0))

    def fitted_c12(self) -> dict[str, float]:
        """{"C12a", "C12b": Å} that the parallax set, where they differ from the nominal ones."""
        return {name: float(self.aberrations[name]) for name in ("C12a", "C12b")
                if name in self.aberrations and self.aberrations[name] != self.nominal_aberrations.get(name)}

    def in_config(self, config: Config) -> Config:
        """``config`` with what the autos found in place of its calibration autos: the scan rotation, the defocus
        (``experiment.aberrations`` less its C10, the nominal one, with the C12 the parallax set), the orientation
        manual with its flags and flips about the zero frequency, the descan model. ``data.bad_pixels`` and
        ``data.transform.descan`` keep their auto (``MEASURED_ONLY``: the mask and the shifts are the data's)."""
        experiment, transform = config.experiment, config.data.transform
        if "experiment.scan_rotation_deg" in self.asked:
            experiment = dataclasses.replace(experiment, scan_rotation_deg=float(self.scan_rotation_deg))
        if "experiment.defocus_A" in self.asked:
            aberrations = {name: value for name, value in experiment.aberrations.items() if name != "C10"}
            experiment = dataclasses.replace(experiment, defocus_A=self.defocus_A,
                                             aberrations={**aberrations, **self.fitted_c12()})
        if "experiment.sample_side" in self.asked and self.sample_place is not None:
            experiment = dataclasses.replace(experiment, sample_side=self.sample_place[0],
                                             focus_to_sample_m=self.sample_place[1])
        if "experiment.focus_to_sample_m" in self.asked and self.near_field_focus_m is not None:
            experiment = dataclasses.replace(experiment, focus_to_sample_m=self.near_field_focus_m)
        if "data.transform.orientation" in self.asked:
            transform = dataclasses.replace(transform, orientation="manual", transpose=bool(self.flags[0]),
                                            flip_y=bool(self.flags[1]), flip_x=bool(self.flags[2]),
                                            flip_about_zero=[bool(v) for v in self.flip_about_zero or (False, False)])
        if {"data.transform.descan", "data.transform.descan_model"} <= self.asked:
            transform = dataclasses.replace(transform, descan_model=self.descan_model)
        if experiment is config.experiment and transform is config.data.transform:
            return config
        return dataclasses.replace(config, experiment=experiment,
                                   data=dataclasses.replace(config.data, transform=transform))


# the config's calibration keys that may be auto, each resolved by the load (``AutoCalibration.asked``)
CALIBRATION_AUTOS = ("experiment.scan_rotation_deg", "experiment.defocus_A", "data.transform.orientation",
                     "data.bad_pixels", "data.transform.descan", "data.transform.descan_model", "experiment.sample_side",
                     "experiment.focus_to_sample_m")
# those named in ``auto_values`` by a count or size found, which keep their auto in the run's config
MEASURED_ONLY = ("data.bad_pixels", "data.transform.descan")


def asked_autos(config: Config) -> frozenset[str]:
    """The keys of ``CALIBRATION_AUTOS`` that ``config`` gives as auto."""
    given = {"experiment.scan_rotation_deg": config.experiment.scan_rotation_deg,
             "experiment.defocus_A": config.experiment.defocus_A,
             "data.transform.orientation": config.data.transform.orientation, "data.bad_pixels": config.data.bad_pixels,
             "data.transform.descan": config.data.transform.descan,
             "data.transform.descan_model": config.data.transform.descan_model,
             "experiment.sample_side": config.experiment.sample_side,
             "experiment.focus_to_sample_m": config.experiment.focus_to_sample_m}
    return frozenset(key for key in CALIBRATION_AUTOS if given[key] == "auto")


@dataclass(frozen=True)
class ScansCalibration:
    """The calibration autos of several scans (the config's ``scans:``), ``scans[i]`` scan i's record (None where
    none ran), each resolved in its own scan's config (``quantities/scans.py``): results.h5's ``/detector`` is scan
    0's, the auto values are every scan's, named ``scans[i].<key>``, and the run's config keeps its own."""

    scans: tuple[AutoCalibration | None, ...]

    @property
    def descan(self) -> MeasuredDescan | None:
        """Scan 0's descan (several scans take theirs as shifts of the patterns, never in the model)."""
        return None if self.scans[0] is None else self.scans[0].descan

    def detector_arrays(self) -> dict[str, np.ndarray]:
        """Scan 0's (``AutoCalibration.detector_arrays``)."""
        return {} if self.scans[0] is None else self.scans[0].detector_arrays()

    def auto_values(self) -> dict[str, float | int | str | bool]:
        """Every scan's ``AutoCalibration.auto_values``, named ``scans[i].<key>``."""
        return {f"scans[{i}].{key}": value for i, found in enumerate(self.scans) if found is not None
                for key, value in found.auto_values().items()}

    def in_config(self, config: Config) -> Config:
        """``config`` as it is: the run's config is no one scan's; what each scan's autos found is in its own
        dataset's calibration."""
        return config


@dataclass(frozen=True)
class Calibrated:
    """What the calibration step gives the load: the ``experiment`` and ``calibration`` the autos resolved,
    the preparation (``prep``, its per-chunk ``prepare`` and the prepared detector ``mask``), the object pixel
    ``dx_A``, the file to read the patterns from (``source``, descanned where the descan shifts them, and
    ``reopen``, which opens it anew), what the autos ``found``, and their run.log lines (``said``, then
    ``defocus_said``, which a sign check may shorten)."""

    experiment: ExperimentConfig
    calibration: Calibration
    prep: Preparation
    prepare: Callable[[np.ndarray], np.ndarray]
    mask: np.ndarray | None
    dx_A: float
    source: object
    reopen: Callable[[], object]
    found: AutoCalibration
    said: tuple[str, ...]
    defocus_said: tuple[str, ...]

    def checked(self, every: np.ndarray | None) -> tuple[str, ...]:
        """run.log's lines of the calibration: the autos', then the checks of the calibration against the
        data (``sanity.calibration_checks``, on ``every``, all the prepared patterns (N, K, K) where the load
        holds them in memory, else on a sample read), one warning for a defocus of the wrong sign."""
        checks = calibration_checks(self.experiment, self.calibration, self.dx_A, self.source, self.prepare,
                                    self.prep.bin, self.prep.shape[-1], every) if self.experiment.check_calibration else ()
        defocus = self.defocus_said
        if any(line.startswith(SIGN_WARNING) for line in checks):  # one warning for one wrong sign
            defocus = tuple(line for line in defocus if OPPOSITE not in line)
        return self.said + defocus + tuple(checks)


class ReadOnce:
    """A pattern file (``readers.PatternFile``) whose ``read`` reads each pattern from the file once, as
    stored, and gives it again, prepared by the ``prepare`` asked for (the preparation maps each pattern
    on its own: the same values as a read through it). For the calibration step, whose measurements read
    the scan's middle block and a few samples up to six times; everything else is the file's."""

    def __init__(self, source) -> None:
        self._source, self._blocks, self._where = source, [], {}  # {row: (block, index in it)}

    def __getattr__(self, name):
        return getattr(self._source, name)

    def read(self, rows: np.ndarray | None = None, prepare=None):
        if rows is None or len(rows) == 0:
            return self._source.read(rows, prepare)
        wanted = np.asarray(rows, dtype=np.int64)
        missing = np.array([row for row in wanted.tolist() if row not in self._where], dtype=np.int64)
        if len(missing):
            self._blocks.append(self._source.read(missing))
            self._where.update((row, (len(self._blocks) - 1, i)) for i, row in enumerate(missing.tolist()))
        block, index = np.array([self._where[row] for row in wanted.tolist()]).T
        first = self._blocks[int(block[0])]
        patterns = np.empty((len(wanted), *first.patterns.shape[1:]), dtype=np.float32)
        for b in np.unique(block):
            patterns[block == b] = self._blocks[int(b)].patterns[index[block == b]]
        if prepare is not None:
            patterns = np.ascontiguousarray(prepare(patterns), dtype=np.float32)
        return dataclasses.replace(first, patterns=patterns)


def descan_left_to_model(config: Config) -> bool:
    """Whether ``data.transform.descan_model`` leaves the measured descan to the model (``ramp``, or ``auto`` with
    one scan and the patterns neither padded nor upsampled) rather than shifting the patterns."""
    transform = config.data.transform
    if transform.descan_model != "auto":
        return transform.descan_model == "ramp"
    return not config.scans and transform.pad is None and resolved_upsample(config)[0] == 1


def autocalibrate(config: Config, source, facts: SourceFacts, file_mask: np.ndarray | None,
                  gain: np.ndarray | None, reopen: Callable[[], object], judge: Judge | None = None) -> Calibrated:
    """The calibration of the open pattern file ``source`` (``facts``: what it says about itself) under
    ``config``, with its autos measured: see the module docstring. ``file_mask`` (stored layout, None = all
    good) and ``gain`` (1 / gain, ``flat_field``) as the file and ``data.flat_field`` give them; ``reopen``
    opens the file anew (for the patterns streamed during the run); ``judge`` chooses among the orientations that
    an unclear search leaves open (``ptyacc run``'s trial reconstructions; None: the guess, with a warning)."""
    data, experiment, info, name = config.data, config.experiment, source.info, facts.name
    original, source = source, ReadOnce(source)
    needs = [key for key, asked in (
        ("experiment.scan_rotation_deg", experiment.scan_rotation_deg == "auto"),
        ("data.transform.orientation", data.transform.orientation == "auto" and BASIS not in info.attrs),
        ("experiment.defocus_A", experiment.defocus_A == "auto")) if asked]
    experiment, facts, scan_shape, said = raster_or_positions(experiment, facts, data.scan_shape, needs)
    defocus_auto = experiment.defocus_A == "auto"
    if defocus_auto:  # the nominal value from the file or aberrations.C10
        experiment = dataclasses.replace(experiment, defocus_A=None)
    rotation_auto = experiment.scan_rotation_deg == "auto"
    background = info.background if data.subtract_background else None
    transform, orientation, near = data.transform, None, None
    if experiment.radiation == "xray" and experiment.geometry == "near_field" and (
            experiment.focus_to_sample_m == "auto" or rotation_auto or experiment.check_calibration
            or transform.orientation == "auto" and BASIS not in info.attrs):
        experiment, transform, orientation, near = _near_field(experiment, transform, source, facts, scan_shape,
                                                               file_mask, background)
        said += near.lines
    rotation_measured, rotation_auto = rotation_auto and near is not None, rotation_auto and near is None
    calibration = calibrate(dataclasses.replace(experiment, scan_rotation_deg=0.0) if rotation_auto else experiment,
                            facts, scan_shape)
    if rotation_measured:
        calibration.sources["scan_rotation_deg"] = "fitted"
    bad = None
    if data.bad_pixels == "auto":  # the detector mask as stored less the bad pixels found in the data
        bad, line = measure_bad_pixels(source, len(calibration.positions_A), background)
        file_mask, said = good_pixels(file_mask, bad), said + (line,)
    transform = dataclasses.replace(transform, upsample=resolved_upsample(config)[0])
    flags_confirmed = False  # a clear centre of mass or search gave the handedness of the flags given
    if experiment.radiation == "xray" and experiment.geometry == "far_field" and experiment.check_calibration:
        said += _far_field_unmoved(source, calibration.positions_A, file_mask, background)
    if experiment.radiation == "xray" and experiment.geometry == "far_field" and (
            rotation_auto or transform.orientation == "auto" and BASIS not in info.attrs):
        experiment, transform, orientation, lines = _xray_oriented(experiment, transform, source, calibration,
                                                                   file_mask, background, judge)
        said += lines
        calibration = calibrate(experiment, facts, scan_shape)
        calibration.sources["scan_rotation_deg"] = "fitted" if rotation_auto else "config"
    elif rotation_auto or (transform.orientation == "auto" and BASIS not in info.attrs
                           and experiment.radiation == "electron"):
        experiment, transform, orientation, lines = _oriented(experiment, transform, source, calibration, file_mask,
                                                              background, defocus_auto, judge)
        said += lines
        calibration = calibrate(experiment, facts, scan_shape)
        calibration.sources["scan_rotation_deg"] = "fitted" if rotation_auto else "config"
    elif experiment.check_calibration and experiment.geometry == "far_field":
        checked, flags_confirmed = _orientation_checked(experiment, transform, source, calibration, file_mask,
                                                        background, PHASE_SIGN[experiment.radiation])
        said += checked
    prep = Preparation.from_config(transform, info.shape[-2:], experiment.geometry == "far_field", name, info.attrs)
    about, offset_px = None, None
    if prep.far_field and data.transform.orientation == "auto" and BASIS not in info.attrs:  # given flips reverse
        prep, turned_deg, lines, offset_px = _centred_orientation(
            prep, source, len(calibration.positions_A), file_mask, data, background, gain,
            experiment.scan_rotation_deg if rotation_auto else None)
        said += lines
        about = prep.flip_about_zero if any(prep.flip_about_zero) else None
        if turned_deg is not None:  # turned by 90 or 180 degrees with the flags
            transform = dataclasses.replace(transform, transpose=prep.transpose, flip_y=prep.flip_y, flip_x=prep.flip_x)
            experiment, calibration = _at_rotation(experiment, facts, scan_shape, None, turned_deg)
            orientation = dataclasses.replace(orientation, flags=(prep.transpose, prep.flip_y, prep.flip_x),
                                              rotation_deg=turned_deg)
    prepare = pattern_preparation(prep, name, data.nonfinite, data.negative, background, gain)
    mask = prep.mask(file_mask)
    radius_px = None
    if calibration.stored_dx_A is None:  # experiment.dk_from_bright_field
        radius_px = measured_radius_px(source, len(calibration.positions_A), prepare) * prep.bin  # binning shrinks the disk
        calibration = calibrate(experiment, facts, scan_shape, bright_field_radius_px=radius_px)
    dx_A = prep.object_pixel_A(calibration.stored_dx_A)
    place, measured = None, data.transform.orientation == "auto" and BASIS not in info.attrs  # given flags stay
    if (experiment.radiation == "xray" and experiment.geometry == "far_field" and experiment.sample_side == "auto"
            and experiment.focus_to_sample_m is None and config.model.probe_init is None):
        flags = (prep.transpose, prep.flip_y, prep.flip_x)
        place = _sample_place(judge, flags, experiment.scan_rotation_deg, tuple(prep.flip_about_zero), measured,
                              _overlap_distance_A(experiment, calibration, source, prepare, mask, prep.shape[-1] * dx_A),
                              rotation_auto)
        said += (place.line,)
        if place.rotation_deg != experiment.scan_rotation_deg:  # the object's own frame: turned by 180 degrees
            experiment, calibration = _at_rotation(experiment, facts, scan_shape, radius_px, place.rotation_deg)
            orientation = dataclasses.replace(orientation, rotation_deg=place.rotation_deg)
        if place.flags != flags:  # the object's own frame, the rotation given: the preparation again
            transform = dataclasses.replace(transform, orientation="manual", transpose=place.flags[0],
                                            flip_y=place.flags[1], flip_x=place.flags[2])
            orientation = dataclasses.replace(orientation, flags=place.flags)
            prep = Preparation.from_config(transform, info.shape[-2:], True, name, info.attrs)
            # the new flips, too, about the zero frequency where the beam's centre says so
            prep, _, lines, offset_px = _centred_orientation(prep, source, len(calibration.positions_A), file_mask,
                                                             data, background, gain, None, offset_px)
            said += lines
            about = prep.flip_about_zero if any(prep.flip_about_zero) else None
            prepare = pattern_preparation(prep, name, data.nonfinite, data.negative, background, gain)
            mask = prep.mask(file_mask)
    if experiment.radiation == "xray" and experiment.geometry == "far_field" and rotation_auto and judge is not None:
        experiment, calibration, orientation, line, place = _xray_turn_tried(judge, prep, experiment, orientation,
                                                                             facts, scan_shape, radius_px, place,
                                                                             measured)
        said += (line,)
    read_from, descan = original, None
    if data.transform.descan == "auto":
        descan, line = _descanned(source, calibration.positions_A, prepare, mask, descan_left_to_model(config))
        said += (line,)
        if descan.moves_patterns:
            source = Descanned(source, descan.descan, descan.shifts_px, mask)
            read_from = Descanned(original, descan.descan, descan.shifts_px, mask)
            reopen = _descanned_reopen(reopen, descan, mask)
    nominal, defocus, defocus_said = calibration.aberrations, None, ()
    read = (source, prepare, mask, dx_A, prep.shape[-1])
    if defocus_auto:
        depth_A = (config.model.slices - 1) * config.model.slice_thickness_A / 2
        # a rotation the trials chose is not turned again by the parallax, which at such counts is mostly noise
        experiment, calibration, defocus, defocus_said = _with_parallax(
            experiment, calibration, facts, scan_shape, radius_px, read, rotation_auto, orientation, depth_A,
            data.transform.orientation == "auto")
        if defocus is not None and (defocus.searched_A is not None or defocus.rival_A is not None):
            calibration, defocus, lines, rotation_deg = _focus_tried(
                judge, data.transform.orientation_trials == 0, experiment, calibration, prep, about, defocus)
            defocus_said += lines
            if rotation_deg != experiment.scan_rotation_deg:  # the search's reading taken whole, without the parallax's
                taken = calibration.aberrations
                experiment, calibration = _at_rotation(experiment, facts, scan_shape, radius_px, rotation_deg)
                calibration = _with_aberrations(calibration, taken)
        if defocus is not None and defocus.c12_withheld is not None and judge is not None:
            calibration, defocus, lines = _c12_tried(judge, experiment, calibration, prep, about, defocus)
            defocus_said += lines
        if orientation is not None and rotation_auto:
            orientation = dataclasses.replace(orientation, rotation_deg=experiment.scan_rotation_deg)
    elif experiment.check_calibration and experiment.radiation == "electron" and experiment.geometry == "far_field":
        defocus_said = _parallax_checked(calibration, read, rotation_auto, data.transform.orientation == "auto",
                                         flags_confirmed)
    found = AutoCalibration(flags=(prep.transpose, prep.flip_y, prep.flip_x),
                            scan_rotation_deg=experiment.scan_rotation_deg, aberrations=calibration.aberrations,
                            nominal_aberrations=nominal, bad_pixels=bad, orientation=orientation, flip_about_zero=about,
                            descan=descan, defocus=defocus, asked=asked_autos(config),
                            descan_model="ramp" if descan_left_to_model(config) else "shift",
                            sample_place=None if place is None else (place.side, place.focus_to_sample_m),
                            near_field_focus_m=near.focus_to_sample_m if near is not None and near.focus_measured
                            else None)
    return Calibrated(experiment, calibration, prep, prepare, mask, dx_A, read_from, reopen, found, said, defocus_said)


def _focus_tried(judge: Judge | None, trials_off: bool, experiment, calibration, prep: Preparation,
                 about: tuple[bool, bool] | None, defocus: MeasuredDefocus
                 ) -> tuple[Calibration, MeasuredDefocus, tuple[str, ...], float]:
    """The defocus the Fourier regions' coherence of the prepared patterns gave where the parallax could not tell
    (``defocus``, its ``searched_A``) tried by ``judge``'s short reconstructions, scaled FOCUS_STEP apart, in the orientation
    and scan rotation used and with the run's probe modes (``reconstruction/trials.py``): the calibration with the
    defocus the trials take, that defocus, and run.log's lines (a warning where the trials' loss still fell at the
    last scale tried). The coherence reads low on small rasters, by 10-15 % with a partly coherent beam; a single
    mode's trials take such a defocus 4-14 % high (the mode widens to stand in for the others). On the calibration
    matrix's 55 files whose defocus the coherence gave: the defocus within 5 % of the truth on 45 against 31 (one mode
    in the trials: 38), over 10 % off on 7 against 13; 50 pass against 48 (one mode: 48), none lost; the runs' CPU
    time 55 % more (benchmarks/records/2026-12-04-search-defocus-tried.md). The trials prepare the patterns
    as the run does, with the flips about the zero frequency ``about`` (y, x; None: none). Without a judge (``ptyacc
    init``, or ``data.transform.orientation_trials: 0``: ``trials_off``) the coherence's defocus stands, and the line
    says so. Where the parallax told the defocus and a clear Fourier regions' search in the same frame read one over
    DEFOCUS_OFF from it (``defocus.rival_A``), the two are the trials' candidates, the better one's defocus refined
    the same way, each in its own scan rotation: the parallax's with its rotation left added
    (``defocus.turn_deg``), the search's without; where the search's is taken, the parallax's reading is dropped as a whole
    (its rotation left and its C12 too: a parallax whose defocus is that far off misread the rest with it). Without
    trials the parallax's stands, with a warning (``trouble.rival_defocus_warning``) where ``trials_off``. The
    calibration, the MeasuredDefocus, run.log's lines and the scan rotation taken."""
    rival, rotation = defocus.rival_A, float(experiment.scan_rotation_deg)
    if judge is None:
        if rival is None:
            kept = ("kept: data.transform.orientation_trials is 0" if trials_off else
                    "ptyacc run tries it by short reconstructions (data.transform.orientation_trials)")
            return calibration, defocus, (f"the defocus {defocus.defocus_A:.1f} A of {BY_SEARCH}: {kept}",), rotation
        if not trials_off:
            return calibration, defocus, (f"the defocus {rival:.1f} A of {BY_SEARCH} lies far from the parallax's "
                                          f"{defocus.defocus_A:.1f} A: ptyacc run tries both by short reconstructions "
                                          "(data.transform.orientation_trials)",), rotation
        return calibration, defocus, (rival_defocus_warning(defocus.defocus_A, rival),), rotation
    flags = (prep.transpose, prep.flip_y, prep.flip_x)
    about = (False, False) if about is None else about
    unturned = wrapped_deg(rotation - defocus.turn_deg, 360.0)
    tried = ([OrientationCandidate(flags, rotation, float(defocus.defocus_A), "the orientation used",
                                   flip_about_zero=about)]
             if rival is None else  # the parallax's first: on a tie it stays
             [OrientationCandidate(flags, rotation, float(defocus.defocus_A), "the parallax's defocus", BY_PARALLAX,
                                   about),
              OrientationCandidate(flags, unturned, float(rival), SEARCH_READING, BY_SEARCH, about)])
    verdict = judge(tried, turn=False, focus=True, modes=True)
    taken, aberrations, notes = float(verdict.taken.defocus_A), dict(calibration.aberrations), ()
    if rival is not None and verdict.taken.found_by == SEARCH_READING:  # its defocus then refined by the trials
        for name in defocus.c12_set:
            del aberrations[name]
        dropped = ([f"its rotation left ({defocus.turn_deg:+.2f} deg: the scan rotation {unturned:.2f} deg)"]
                   * bool(defocus.turn_deg) + ["its C12"] * bool(defocus.c12_set))
        notes = (f"the parallax's reading dropped as a whole: {' and '.join(dropped)} not used",) if dropped else ()
    withheld = None if rival is not None and verdict.taken.found_by == SEARCH_READING else defocus.c12_withheld
    return (_with_aberrations(dataclasses.replace(calibration, aberrations=aberrations), {"C10": -taken}),
            MeasuredDefocus(taken, np.nan, defocus.parallax, searched_A=defocus.searched_A, tried=True, rival_A=rival,
                            c12_withheld=withheld),
            (verdict.said, *notes, *(trials_unsettled_warning(one) for one in verdict.unsettled)),
            float(verdict.taken.rotation_deg))


def _c12_tried(judge: Judge, experiment, calibration, prep: Preparation, about: tuple[bool, bool] | None,
               defocus: MeasuredDefocus) -> tuple[Calibration, MeasuredDefocus, tuple[str, ...]]:
    """The parallax's C12 that was withheld because trial reconstructions judged the orientation
    (``defocus.c12_withheld``) tried by ``judge``'s short reconstructions with the run's probe modes: the orientation,
    scan rotation and defocus used, without a two-fold astigmatism and with the parallax's; the calibration with the one
    whose data term ends lower, the MeasuredDefocus and run.log's line. Where trials judge the orientation the counts are
    often few and the parallax's groups hardly align: a C12 read there can be their noise (the calibration matrix's
    c14, 1e3 counts and none simulated: 54 A read at 4.2 sigma cost 0.21 in NCC), or the beam's own (the wide draw's
    w117-11, 1e6 counts, 17 A simulated: dropped, 0.904 against the told run's 0.962; taken, 0.950)."""
    c12 = defocus.c12_withheld
    flags, about = (prep.transpose, prep.flip_y, prep.flip_x), (False, False) if about is None else about
    rotation, defocus_A = float(experiment.scan_rotation_deg), float(defocus.defocus_A)
    tried = [OrientationCandidate(flags, rotation, defocus_A, "without a C12", flip_about_zero=about, c12_A=(0.0, 0.0)),
             OrientationCandidate(flags, rotation, defocus_A, "the parallax's C12", flip_about_zero=about, c12_A=c12)]
    verdict = judge(tried, turn=False, focus=False, modes=True, subject="the beam's astigmatism (the parallax's C12)")
    used = verdict.taken.c12_A is not None and verdict.taken.c12_A != (0.0, 0.0)
    if used:
        calibration = dataclasses.replace(calibration, aberrations=dict(calibration.aberrations, C12a=c12[0], C12b=c12[1]))
        defocus = dataclasses.replace(defocus, c12_set=("C12a", "C12b"), c12_withheld=None)
    return calibration, defocus, (f"the parallax's C12a {c12[0]:+.1f} A and C12b {c12[1]:+.1f} A "
                                  f"{'used' if used else 'not used'}: {verdict.said}",)


def _descanned_reopen(reopen: Callable[[], object], descan: MeasuredDescan, mask: np.ndarray | None
                      ) -> Callable[[], Descanned]:
    """What opens the file anew with its patterns shifted back by ``descan``."""
    return lambda: Descanned(reopen(), descan.descan, descan.shifts_px, mask)


@dataclass
class _Orienting:
    """The orientation ``_oriented`` is deciding: the flags and scan rotation so far, the report's line and warnings,
    the candidate taken with the defocus that came with it (a clear search's peak or the trials' choice; None
    otherwise), whether trial reconstructions chose it and whether a Fourier regions' search turned the centre of
    mass's."""

    flags: Flags
    rotation_deg: float
    line: str
    warnings: list[str] = dataclasses.field(default_factory=list)
    used: OrientationCandidate | None = None
    by_trials: bool = False
    by_search: bool = False
    blended: bool = False  # the rotation between the parallax's and a search's that lay apart
    halved: bool = False  # the rotation halfway between a broad search peak's and the trials' far turn of it


def _oriented(experiment, transform, source, calibration, file_mask: np.ndarray | None,
              background: np.ndarray | None, defocus_auto: bool = False, judge: Judge | None = None):
    """``experiment.scan_rotation_deg: auto`` and/or ``data.transform.orientation: auto`` in a file
    without basis vectors: the experiment and transform with the rotation and flags measured from
    the centre of mass of the stored patterns (``orientation.py``; on the raster's grid, or, for
    positions that are no raster, at the positions, whose rotation then turns them about their centre),
    what was measured, and what to report. Where a defocus is known (given, or the nominal one of
    ``defocus_auto``) the flags and rotation are the parallax's where it tells them (``_parallax_oriented``).
    At few counts the Fourier regions' search decides, or ``judge`` (if given) among the candidates it leaves
    open (``_few_counts_oriented``); a centre of mass used alone is checked by that search (``_com_searched``);
    else, with ``defocus_auto``, the flags are turned by 180 degrees where the centre of mass could hardly tell
    them from those (``_turned_by_parallax``)."""
    step, shape = calibration.values.get("scan_step_A"), calibration.scan_shape
    rotation_auto = experiment.scan_rotation_deg == "auto"
    given = 0.0 if rotation_auto else experiment.scan_rotation_deg
    raster = shape is not None and step is not None and np.allclose(calibration.positions_A,
                                                                    raster_positions_A(shape, step, given))
    # the scan's own frame: the raster's grid, or the positions as read (the calibration's are turned by ``given``)
    base = raster_positions_A(shape, step, 0.0) if raster else turned_positions_A(calibration.positions_A, -given)
    if raster and min(shape) < MIN_RASTER or not raster and len(base) < MIN_RASTER * MIN_RASTER:
        raise DataError(f"{source.path}: data.transform.orientation: auto needs the detector's basis_vectors (CXI), and "
                        f"experiment.scan_rotation_deg: auto or orientation from the data a scan of at least "
                        f"{MIN_RASTER} x {MIN_RASTER} positions, found {len(base)}; set them by hand")
    fixed = _fixed_flags(transform, source)
    found, line = measure_orientation(source, shape, file_mask, background, fixed, given,
                                      None if raster else base)
    grid = shape if shape is not None and scan_grid_steps(base, shape) is not None else None
    chosen = _parallax_oriented(source, calibration, base, grid, file_mask, background) if fixed is None else None
    if chosen is not None and outvoted(chosen, found):
        line += f"; {chosen.line()}: not used, its handedness against the centre of mass's"
        chosen = None
    state = _Orienting(found.flags, found.rotation_deg, line)
    if chosen is not None:  # the parallax tells the orientation far better than a weak centre of mass
        state.flags, state.rotation_deg = chosen.flags, chosen.rotation_deg
        state.line += f"; {chosen.line()}: these are used"
    weak = weak_com(found)
    few_counts = weak and (chosen is None or chosen.ratio < PARALLAX_SURE)
    # a clear parallax beside a centre of mass that is noise: the search checks its handedness
    checked = weak and chosen is not None and not few_counts
    # a scan too coarse for the bright-field images' detail: every measure of the frame sees it folded
    coarse = None if fixed is not None or grid is None else aliased_step(calibration, base, grid)
    searched = None
    if fixed is None and grid is not None and (few_counts or checked or coarse or chosen is None and rotation_auto):
        searched = _overlap_oriented(source, calibration, base, grid, file_mask, background, given,
                                     rivals=coarse is not None)
        if coarse:
            _coarse_oriented(state, searched, chosen, calibration, coarse, judge)
        elif few_counts:
            _few_counts_oriented(state, searched, found, chosen, calibration, judge, defocus_auto)
        elif checked:
            _parallax_searched(state, searched, chosen, judge)
        else:
            _com_searched(state, searched, found, judge)
    if rotation_auto:
        if chosen is not None and state.rotation_deg == chosen.rotation_deg and state.flags == chosen.flags:
            # the parallax's rotation, as it measured it; moved towards a clear search of its handedness far from it
            # (the calibration matrix's 16 such files of seeds 70-82: 11 pass against 9 at the parallax's angle)
            off = rotations_apart_deg(chosen, searched)
            if off is None:
                state.warnings += unsure_rotation_warning(chosen)
            else:
                state.rotation_deg, state.blended = blended_rotation_deg(chosen, off), True
                state.line += f"; the rotation used lies between the two: {state.rotation_deg:.2f} deg"
                state.warnings += rotations_apart_warning(chosen, off)
        elif searched is not None and state.flags == searched.flags and _search_s_angle(state, searched):
            state.warnings += unsure_rotation_warning(searched, by="search")  # the search's spread, as it found it
        experiment = dataclasses.replace(experiment, scan_rotation_deg=state.rotation_deg)
    else:
        state.line += f"; the rotation used is experiment.scan_rotation_deg: {experiment.scan_rotation_deg:g}"
        if chosen is None:  # beside what the search or the trials said of the flags
            state.warnings += com_warnings(found, state.flags, given, flags_measured=True)
    # the search's flags already carry the nominal defocus's sign, and the trials chose among the turns: no
    # second turn by 180 degrees
    if (chosen is None and state.used is None and not state.by_search and fixed is None and defocus_auto
            and not found.tells_turn and grid is not None):
        state.flags, said = _turned_by_parallax(source, calibration,
                                                turned_positions_A(base, experiment.scan_rotation_deg), grid,
                                                state.flags, file_mask, background)
        state.line += said
    flags = state.flags
    if fixed is None:
        transform = dataclasses.replace(transform, orientation="manual", transpose=flags[0], flip_y=flags[1],
                                        flip_x=flags[2])
    used = state.used
    defocus_A, defocus_by = (None, None) if used is None or used.defocus_A is None else (used.defocus_A, used.defocus_by)
    return (experiment, transform,
            MeasuredOrientation(flags, state.rotation_deg, found.skew, defocus_A, defocus_by, state.by_trials,
                                found.tells_turn, state.blended,
                                None if used is not None else _searched_defocus_A(searched, flags, state.rotation_deg)),
            (state.line, *state.warnings))


def _near_field(experiment, transform, source, facts: SourceFacts, scan_shape, file_mask: np.ndarray | None,
                background: np.ndarray | None):
    """X-ray near field: the experiment and transform with the focus-to-sample distance, the detector's
    transpose/flips and the scan rotation from the holograms' motion (``hologram_motion.py``) where they are auto
    (the flags: without the file's basis vectors), the ``MeasuredOrientation`` where flags or rotation were
    measured (else None), and the ``NearFieldGeometry`` (its run.log lines: the given values checked)."""
    near = _near_field_geometry(experiment, transform, source, facts, scan_shape, file_mask, background)
    experiment = dataclasses.replace(experiment, focus_to_sample_m=near.focus_to_sample_m,
                                     scan_rotation_deg=near.rotation_deg)
    orientation = None
    if near.flags_measured:
        transform = dataclasses.replace(transform, orientation="manual", transpose=near.flags[0],
                                        flip_y=near.flags[1], flip_x=near.flags[2])
    if near.flags_measured or near.rotation_measured:
        orientation = MeasuredOrientation(near.flags, near.rotation_deg, math.nan)
    return experiment, transform, orientation, near


def _near_field_geometry(experiment, transform, source, facts: SourceFacts, scan_shape, file_mask: np.ndarray | None,
                         background: np.ndarray | None) -> NearFieldGeometry:
    """``_near_field``'s measurement and checks."""
    fixed = _fixed_flags(transform, source)
    provisional = dataclasses.replace(experiment, scan_rotation_deg=0.0)  # the scan's own frame
    if experiment.focus_to_sample_m == "auto":
        provisional = dataclasses.replace(provisional, focus_to_sample_m=1.0)  # the positions do not depend on it
    base = calibrate(provisional, facts, scan_shape)
    if len(base.positions_A) < MIN_MOTION_POSITIONS:
        asked = [key for key, auto in (("experiment.focus_to_sample_m", experiment.focus_to_sample_m == "auto"),
                                       ("experiment.scan_rotation_deg", experiment.scan_rotation_deg == "auto"),
                                       ("data.transform.orientation", fixed is None))
                 if auto]
        if asked:
            raise DataError(f"{source.path}: {', '.join(asked)}: auto measures the near field from the holograms' "
                            f"motion between neighbouring positions, which needs {MIN_MOTION_POSITIONS} positions or "
                            f"more, found {len(base.positions_A)}; give them by hand")
        return NearFieldGeometry(None, experiment.focus_to_sample_m, fixed, experiment.scan_rotation_deg, False, False,
                                 ())
    motion, line = measure_motion(source, base.positions_A, file_mask, background)
    return near_field_geometry(motion, line, focus_to_sample_m=experiment.focus_to_sample_m,
                               distance_m=base.values["detector_distance_m"], pixel_m=base.values["detector_pixel_m"],
                               fixed=fixed, rotation_deg=experiment.scan_rotation_deg,
                               where=str(source.path))


def _far_field_unmoved(source, positions_A: np.ndarray, file_mask: np.ndarray | None, background: np.ndarray | None
                       ) -> tuple[str, ...]:
    """X-ray far field: a warning where the patterns travel with the scan, as near-field holograms do."""
    if len(positions_A) < MIN_MOTION_POSITIONS:
        return ()
    motion, line = measure_motion(source, positions_A, file_mask, background)
    if not motion.moves:
        return ()
    return (line, f"warning: the patterns travel with the scan ({motion.step_px:.1f} px between neighbours), as "
                  "near-field holograms do, not far-field patterns: set experiment.geometry: near_field with "
                  "experiment.focus_to_sample_m: auto (ptyacc init writes them for such a file)")


def _fixed_flags(transform, source) -> Flags | None:
    """The transpose/flip the orientation measurement must keep: the config's (``manual``) or the file's basis
    vectors'; None where it chooses them."""
    if transform.orientation == "manual":
        return (transform.transpose, transform.flip_y, transform.flip_x)
    if BASIS in source.info.attrs:
        return tuple(orientation_from_basis(source.info.attrs[BASIS], str(source.path)).values())
    return None


def _xray_oriented(experiment, transform, source, calibration, file_mask: np.ndarray | None,
                   background: np.ndarray | None, judge: Judge | None = None):
    """X-ray far field: ``data.transform.orientation: auto`` in a file without the detector's basis vectors and/or
    ``experiment.scan_rotation_deg: auto``, from the centre of mass of the stored patterns at the scan's positions
    (``orientation.py``, the phase of X-ray matter negative): the experiment and transform with what was measured,
    the ``MeasuredOrientation`` and run.log's lines. A given rotation (stage positions are usually in the
    detector's frame) is kept and checked (``trouble.com_warnings``); where the centre of mass cannot tell the
    handedness, ``judge`` (``ptyacc run``) tries all eight by short reconstructions; without one, the flags given are
    kept, with a warning. Flags that differ by flip_y and flip_x together give the conjugate object's data under the
    conjugate probe: the centre of mass tells them apart by the sign of the phase, which a defocused probe's view of
    a strong absorber can outweigh; the probe's side of the focus is then tried with the flags taken
    (``_sample_place``), and the run's end checks the object's phase against its absorption
    (``trouble.conjugate_warning``)."""
    rotation_auto = experiment.scan_rotation_deg == "auto"
    given = 0.0 if rotation_auto else experiment.scan_rotation_deg
    base = turned_positions_A(calibration.positions_A, -given)
    if len(base) < MIN_RASTER * MIN_RASTER:
        raise DataError(f"{source.path}: data.transform.orientation: auto needs the detector's basis_vectors (CXI), and "
                        f"experiment.scan_rotation_deg: auto or orientation from the data a scan of at least "
                        f"{MIN_RASTER * MIN_RASTER} positions, found {len(base)}; set them by hand")
    fixed = _fixed_flags(transform, source)
    found, line = measure_orientation(source, None, file_mask, background, fixed, given, base, PHASE_SIGN["xray"])
    flags, warnings, rotation_deg = found.flags, [], found.rotation_deg if rotation_auto else given
    judged = fixed is None and not tells_handedness(found) and judge is not None
    if judged:  # every flag set, by trials
        # with the rotation auto, the frames around the circle too: a centre of mass that cannot tell the handedness
        # reads the angle no better (a stage turned 126 degrees: 34 read, the halves 27 and 40)
        verdict = judge([OrientationCandidate(candidate, given, None, "the centre of mass's" if candidate == flags else
                                              "one of eight") for candidate in FLAGS], turn=False, focus=False,
                        grid=rotation_auto)
        flags, line = verdict.taken.flags, f"{line}; the centre of mass cannot tell the flags: {verdict.said}"
        rotation_deg = verdict.taken.rotation_deg if rotation_auto else given
        flags, rotation_deg, turned = _phase_delayed(flags, rotation_deg, found, rotation_auto)
        line += turned
    elif fixed is None and not tells_handedness(found):
        flags = (transform.transpose, transform.flip_y, transform.flip_x)
        warnings.append(f"warning: the patterns' centre of mass cannot tell the detector's transpose and flips against "
                        f"the scan (curl left {found.curl_left:.2f} of the worst angle's, the other handedness "
                        f"{found.curl_other:.2f}): transpose {flags[0]}, flip_y {flags[1]}, flip_x {flags[2]} kept; "
                        f"set them by hand (data.transform.orientation: manual) and read the final deviance")
    elif fixed is None:
        line += "; these flags are used, their turn by 180 deg (flip_y and flip_x together) from the X-ray phase's sign"
    if rotation_auto:
        experiment = dataclasses.replace(experiment, scan_rotation_deg=rotation_deg)
    else:
        line += f"; the rotation used is experiment.scan_rotation_deg: {given:g}"
        if fixed is not None or tells_handedness(found):  # a centre of mass that told nothing judges nothing
            warnings += com_warnings(found, flags, given, flags_measured=fixed is None, least_deg=XRAY_TURN_DEG)
    if fixed is None:
        transform = dataclasses.replace(transform, orientation="manual", transpose=flags[0], flip_y=flags[1],
                                        flip_x=flags[2])
    return (experiment, transform, MeasuredOrientation(flags, rotation_deg, found.skew, by_trials=judged,
                                                       tells_turn=found.tells_turn), (line, *warnings))


TURNED_APART_DEG = 20.0  # frames this close to a turn by 180 degrees apart are the pair's two members


def _phase_delayed(flags: Flags, rotation_deg: float, found, rotation_auto: bool) -> tuple[Flags, float, str]:
    """X-ray far field, the trials' frame (``flags``, ``rotation_deg``) where the centre of mass ``found`` could not
    tell the handedness: the trials ran at the default side of the focus (downstream), and at a fixed side the pair's
    two members (the frame and its turn by 180 degrees: the object's data and its conjugate's) are told apart by that
    side alone, a toss where the sample lies upstream and absorbs too little for its phase against its absorption to
    say. Where the trials' frame is the turn of the centre of mass's, whose divergence skew says which member delays
    the phase (its sign was right on every X-ray file so far, even where the handedness was unclear), the centre of
    mass's member is taken (the side's trials then find the side that goes with it): the rotation turned by 180
    degrees where measured, else flip_y and flip_x reversed. The frame taken and run.log's words."""
    mirrored, off_deg = frame_difference(flags, rotation_deg, found.flags, found.rotation_deg)
    if mirrored or abs(abs(off_deg) - 180.0) > TURNED_APART_DEG:
        return flags, rotation_deg, ""
    (t, fy, fx), turned_deg = _turned_frame(flags, rotation_deg, rotation_auto)
    taken = (f"experiment.scan_rotation_deg {turned_deg:.2f}" if rotation_auto else
             f"transpose {t}, flip_y {fy}, flip_x {fx}")
    return (t, fy, fx), turned_deg, (
        f"; the trials' frame is the centre of mass's turned by 180 degrees, which the trials' side of the focus "
        f"chose: {taken} is used, the member whose phase the centre of mass reads as delayed (divergence skew "
        f"{found.skew:+.2f}), the side's trials to follow")


def _turned_frame(flags: Flags, rotation_deg: float, turn_rotation: bool) -> tuple[Flags, float]:
    """The frame (``flags``, ``rotation_deg``) turned by 180 degrees, the conjugate pair's other member: the rotation
    turned (into (-180, 180]) where ``turn_rotation`` (it was measured: the flips keep their place against the zero
    frequency), else flip_y and flip_x reversed."""
    if turn_rotation:
        return flags, rotation_deg + (180.0 if rotation_deg <= 0 else -180.0)
    t, fy, fx = flags
    return (t, not fy, not fx), rotation_deg


PLACE_SCALES = (0.6, 1.0, 1.6)  # the overlap's distance from the focus tried times these (1 on either side first)
PLACE_GRAIN = 0.005  # the parabola's lowest point through their data terms set on this grain of the log distance,
PLACE_APART = 0.05  # tried where it lies this far (in the log) from the three, and taken where its data term ends
PLACE_MARGIN = 1e-6  # lower by this share of the lowest (a tie, which the process count's rounding could break, is not)
# (on 24 drawn files the true distance lay 0.55-1.6 times the overlap's; the probe's refinement takes up the rest)


def _overlap_distance_A(experiment, calibration, source, prepare, mask: np.ndarray | None, window_A: float) -> float:
    """X-ray far field: the distance from the focus (Å) at which the beam overlaps as assumed at the scan's spacing,
    its numerical aperture the optics' or the mean prepared pattern's cone (``physics/footprint.py``)."""
    if experiment.optics is not None:  # the pupil the probe starts from
        na = experiment.optics.numerical_aperture(calibration.wavelength_A * 1e-10)
    else:
        mean = source.read(sample_rows(len(calibration.positions_A)), prepare).patterns.mean(0, dtype=np.float64)
        axis = beam_axis_px(mean, None if mask is None else mask > 0)  # the cone's outer edge about its centre
        na = cone_numerical_aperture(mean if mask is None else mean * mask, 1.0 / window_A, calibration.wavelength_A,
                                     axis)
    return overlap_defocus_A(calibration.positions_A, na)[0]


def side_of(focus_to_sample_m: float) -> str:
    return "upstream" if focus_to_sample_m < 0 else "downstream"


@dataclass(frozen=True)
class SamplePlace:
    """``_sample_place``'s answer: the sample's ``side`` of the focus, the initial probe's signed distance from it
    ``focus_to_sample_m`` (None: the overlap's, downstream), the ``flags`` and scan ``rotation_deg`` to use, and
    run.log's ``line``."""

    side: str
    focus_to_sample_m: float | None
    flags: Flags
    line: str
    rotation_deg: float


def _sample_place(judge: Judge | None, flags: Flags, rotation_deg: float, about: tuple[bool, bool],
                  measured: bool, overlap_A: float, rotation_measured: bool = False) -> SamplePlace:
    """X-ray far field, ``experiment.sample_side: auto`` with no ``focus_to_sample_m`` and no probe file: where the
    sample lies against the probe's focus, which the initial probe's curvature and size take. ``judge`` (``ptyacc
    run``) reconstructs a few iterations at ``overlap_A`` (the distance at which the beam overlaps 60 % at the scan's
    spacing) on either side, then at the other PLACE_SCALES of it on the side that fitted, under the ``flags`` and
    ``rotation_deg`` the run takes (flips about zero ``about``), and takes the lowest data term, then tries the lowest
    point of the parabola through the three distances' data terms: from the wrong side the run stalls, and a start
    a quarter short of the true distance costs many iterations. Where that trial's object reads as the conjugate (its
    phase against its absorption, or a weak absorber's phase departing forward: ``trouble.conjugate_reason``) and the
    flags were ``measured`` or the rotation (``rotation_measured``) (the centre of mass took the pair's wrong member, as
    a strong absorber's pull through a defocused probe or a weak absorber's skew lost in noise can make it), the pair's
    other member and the other side are taken: the object itself, whose data those are too (``_object_framed``: with
    the rotation measured, the scan rotation turned by 180 degrees rather than the flips reversed). Without a judge:
    downstream at the overlap's distance, the flags as they are."""
    if judge is None:
        return SamplePlace("downstream", None, flags, "experiment.sample_side: downstream (auto; ptyacc run tries "
                                                      "both sides and three distances by short reconstructions)",
                           rotation_deg)

    def at(distance_m: float) -> OrientationCandidate:
        return OrientationCandidate(flags, rotation_deg, None, "the orientation used", flip_about_zero=about,
                                    focus_to_sample_m=distance_m)

    # the side at the overlap's distance, then the other distances on that side
    sides = judge([at(overlap_A * 1e-10), at(-overlap_A * 1e-10)], turn=False, focus=False,
                  subject="the sample's side of the probe's focus")
    sign = 1.0 if sides.taken.focus_to_sample_m > 0 else -1.0
    verdict = judge([at(sign * scale * overlap_A * 1e-10) for scale in PLACE_SCALES if scale != 1.0], turn=False,
                    focus=False, subject="the sample's distance from the probe's focus")
    others = verdict
    if min(verdict.losses) >= min(sides.losses):
        verdict = sides
    # the lowest point of the parabola through the three distances' data terms (in the log of the distance), tried:
    # the trials tell a distance 20 % off clearly, and the true one often lies between two of the three
    scales = [scale for scale in PLACE_SCALES if scale != 1.0]
    u = np.log(np.array([1.0, *scales]))
    between, lowest = "", parabola_lowest(u, [min(sides.losses), *others.losses])
    if lowest is not None and u.min() < lowest < u.max() and np.abs(u - lowest).min() > PLACE_APART:
        # on a grain of PLACE_GRAIN in the log: the same distance whatever the process count's rounding of the losses
        vertex = sign * overlap_A * 1e-10 * math.exp(round(lowest / PLACE_GRAIN) * PLACE_GRAIN)
        tried = judge([at(vertex)], turn=False, focus=False, subject="the sample's distance from the probe's focus")
        between = (f"; the parabola through the three distances lowest at {abs(vertex) * 1e3:.3g} mm, tried: "
                   f"{tried.losses[0]:.9g} against {min(verdict.losses):.9g}")
        if tried.losses[0] < min(verdict.losses) - PLACE_MARGIN * abs(min(verdict.losses)):
            verdict = tried
    distance = verdict.taken.focus_to_sample_m
    line = (f"experiment.sample_side: {side_of(distance)}, experiment.focus_to_sample_m: {distance:.4g} (auto: "
            f"{sides.said}; {others.said if min(others.losses) < min(sides.losses) else 'the other distances ended higher'}"
            f"{between}"
            + ("" if verdict.correlation is None else
               f"; its object's phase against its log amplitude {verdict.correlation:+.2f}")
            + ("" if verdict.phase_skew is None else f", its phase's skew {verdict.phase_skew:+.2f}") + ")")
    return _object_framed(SamplePlace(side_of(distance), distance, flags, line, rotation_deg), verdict.correlation,
                          measured, rotation_measured, skew=verdict.phase_skew)


def parabola_lowest(offsets, losses) -> float | None:
    """Where the least-squares parabola through the points (``offsets``, ``losses``) is lowest; None where it opens
    downwards or is flat (no lowest point)."""
    losses = np.asarray(losses, dtype=np.float64)
    curvature, slope, _ = np.polyfit(np.asarray(offsets, dtype=np.float64), losses - losses.min(), 2)
    return float(-slope / (2 * curvature)) if curvature > 0 else None


def _object_framed(place: SamplePlace, correlation: float | None, measured: bool, rotation_measured: bool,
                   read_on: str = "that trial's object", skew: float | None = None) -> SamplePlace:
    """``place`` in the object's own frame where the trial object whose phase against its log amplitude is
    ``correlation`` and whose phase's skew is ``skew`` reads as the conjugate (``trouble.conjugate_reason``) and the
    data chose the pair's member (the centre of mass took the wrong one, as a strong absorber's pull through a
    defocused probe, a weak absorber's skew lost in the noise, or a rotation read far off, can make it): the pair's
    other member and the other side, whose data those are too. Patterns flipped along both
    axes are the scan turned by 180 degrees: with the rotation measured (``rotation_measured``, whether the flags
    were measured or given) the rotation is turned, which keeps the flips and their place against the zero frequency
    that the beam's centre chose (``_centred_orientation``); with a rotation given and the flags ``measured``, flip_y
    and flip_x are reversed; with both given, nothing is changed. ``read_on``: run.log's words for the trial object
    that ``correlation`` was read on."""
    reason = None if correlation is None else conjugate_reason(correlation, skew)
    if not (measured or rotation_measured) or reason is None:
        return place
    distance = -place.focus_to_sample_m
    (t, fy, fx), turned = _turned_frame(place.flags, place.rotation_deg, rotation_measured)
    said = f"; {read_on} is the conjugate ({reason}): the sample "
    if rotation_measured:
        return SamplePlace(side_of(distance), distance, place.flags, place.line + said + (
            f"{side_of(distance)} of the focus and the scan turned by 180 degrees, experiment.scan_rotation_deg "
            f"{turned:.2f}, are used, the object's own frame"), turned)
    return SamplePlace(side_of(distance), distance, (t, fy, fx), place.line + said + (
        f"{side_of(distance)} of the focus and transpose {t}, flip_y {fy}, flip_x {fx} are used, the object's "
        "own frame"), place.rotation_deg)


def _xray_turn_tried(judge: Judge, prep: Preparation, experiment, orientation, facts: SourceFacts, scan_shape,
                     radius_px: float | None, place: SamplePlace | None, measured: bool):
    """X-ray far field, ``experiment.scan_rotation_deg: auto``: the centre of mass's rotation (``experiment``'s)
    refined by trial reconstructions (``judge``: TURN_DEG apart, then finer by longer ones) under ``prep``'s flags and
    the sample's ``place`` the run takes (None: the focus the config gives). The centre of mass reads a stage's turn
    to a degree or three, and at many photons a third of a degree already costs a tenth of the NCC; the trials' data
    terms tell it far finer. The experiment, calibration and ``orientation`` at the rotation taken, run.log's line,
    and the ``place``; where the longer trials' object, at the rotation taken, is the conjugate, the object's own
    frame (``_object_framed``: the rotation turned by 180 degrees, the other side; at the centre of mass's rotation,
    some degrees off, the sample place's shorter trials may not yet show it)."""
    flags = (prep.transpose, prep.flip_y, prep.flip_x)
    verdict = judge([OrientationCandidate(flags, experiment.scan_rotation_deg, None, "the centre of mass's",
                                          flip_about_zero=tuple(prep.flip_about_zero),
                                          focus_to_sample_m=None if place is None else place.focus_to_sample_m)],
                    turn=True, focus=False, subject="the scan rotation")
    turned_deg = verdict.taken.rotation_deg
    line = f"experiment.scan_rotation_deg: {turned_deg:.2f} (auto: {verdict.said})"
    if place is not None:
        near = verdict.correlated
        place = _object_framed(dataclasses.replace(place, line=line, rotation_deg=turned_deg), verdict.correlation,
                               measured, True, "that trial's object" if near is None or near.rotation_deg == turned_deg
                               else f"the object of the finer trial nearest it ({near.rotation_deg:.2f} deg)",
                               verdict.phase_skew)
        line, turned_deg = place.line, place.rotation_deg
    experiment, calibration = _at_rotation(experiment, facts, scan_shape, radius_px, turned_deg)
    return experiment, calibration, dataclasses.replace(orientation, rotation_deg=turned_deg), line, place


def _searched_defocus_A(searched, flags: Flags, rotation_deg: float) -> float | None:
    """The defocus of a clear Fourier regions' search ``searched`` whose frame is the one used (``flags``,
    ``rotation_deg``: the same handedness, the rotation within a quarter turn, so its defocus has the same sign);
    None where there is none."""
    if searched is None or not searched.clear:
        return None
    mirrored, off_deg = frame_difference(flags, rotation_deg, searched.flags, searched.rotation_deg)
    return None if mirrored or abs(off_deg) >= 90.0 else float(searched.defocus_A)


def _few_counts_oriented(state: _Orienting, searched, found, chosen, calibration, judge: Judge | None,
                         defocus_auto: bool) -> None:
    """At few counts the centre of mass ``found`` is noise and the real-space parallax's groups (``chosen``, if
    any) hardly align; the Fourier regions' coherence ``searched`` sums every pixel and frequency. Its clear peak
    is used (with ``judge``, a broad peak's rotation and, with ``defocus_auto``, its defocus tried by
    reconstructions); where it is not clear, ``judge`` chooses among the candidates it leaves open, or, without one,
    the guess stands with a warning. ``state`` takes the result."""
    if searched is not None and searched.clear:
        state.flags, state.rotation_deg = searched.flags, searched.rotation_deg
        state.line += f"; {searched.line()}: these are used"
        state.used = OrientationCandidate(state.flags, state.rotation_deg, searched.defocus_A, BY_PEAK)
        broad = searched.contrast < SEARCH_SURE
        # a broad peak's rotation, the search's defocus tried. A sharp peak's rotation is not: 6 iterations' losses
        # turned the calibration matrix's c49 (graphene, 1e4 counts) 3.5 degrees the wrong way, alike over seeds
        # (NCC 0.667 -> 0.580), though they took c27's (1e6 counts) half a degree nearer the truth
        if judge is not None and (broad or defocus_auto):
            _take(state, judge([state.used], turn=broad, focus=defocus_auto))
            if broad:
                _far_turn_halved(state, searched)
        return
    state.line += "" if searched is None else f"; {searched.line()}: not clear enough to use"
    candidates = [] if searched is None else _beside_search(state, searched, chosen, calibration)
    if judge is not None and len(candidates) > 1:
        _judged(state, judge, candidates, measured=False)
        return
    state.warnings.append(weak_orientation_warning(found, chosen))
    if len(candidates) > 1:  # init and info: what the run will do
        state.line += (f"; ptyacc run chooses among {len(candidates)} candidates by short reconstructions "
                       "(data.transform.orientation_trials)")


def aliased_step(calibration, base_A: np.ndarray, shape) -> tuple[float, float] | None:
    """The scan's longer step (Å) and lambda / (2 alpha) (Å) where the step is the longer (the raster ``shape`` of the
    scan's own positions ``base_A``); None where it is not, or the semi-angle or a raster grid is not known. A bright-
    field pixel's image holds the sample's detail out to alpha / lambda and beyond; a scan whose step exceeds
    lambda / (2 alpha) samples even the central pixel's image below its detail, so that the finer detail folds
    onto coarser (aliasing), and moves the wrong way as the pixels' images shift: the centre of mass, the parallax
    and the Fourier regions' search can then give the frame mirrored or turned, and agree on it. On the calibration
    matrix's wide draw of seed 117 (steps 0.9-2.7 times lambda / (2 alpha)) four crystals at 1e4-1e6 counts ended
    mirrored; on one (WSe2, 1e5 counts) all three gave the mirror, and the run scored -0.001 where the run given the
    true frame scored 0.803."""
    semiangle = calibration.values.get("semiangle_mrad")
    steps = scan_grid_steps(base_A, shape)
    if not semiangle or steps is None:
        return None
    step_A, finest_A = float(np.max(np.linalg.norm(steps, axis=0))), calibration.wavelength_A / (2e-3 * semiangle)
    return (step_A, finest_A) if step_A > finest_A else None


def _coarse_oriented(state: _Orienting, searched, chosen, calibration, aliased: tuple[float, float],
                     judge: Judge | None) -> None:
    """A scan too coarse for the bright-field images' detail (``aliased``: ``aliased_step``'s step and lambda /
    (2 alpha)): the frame used so far (the
    parallax's ``chosen`` or the centre of mass's, in ``state``), the Fourier regions' best peak ``searched`` and its
    rivals (the other handedness's best among them) are the candidates, and ``judge`` chooses among them by short
    reconstructions, which model the sample on the object's own pixel and see nothing folded, and refine the taken
    one's rotation (the search's peaks lie a few degrees off there, as the measured frame can); without one, a
    warning. ``state`` takes the result. Measured, on the wide draw of seed 117: 12 of 24 within 0.02 of the told
    runs against 7 before; with the candidates' rotations kept as measured and the measured frame kept where the
    trials took it, 6 (``benchmarks/records/2026-12-05-wide-draw-coarse-scans.md``)."""
    step_A, finest_A = aliased
    said = (f"the scan's step {step_A:.2f} A is coarser than lambda / (2 alpha) = {finest_A:.2f} A, the bright-field "
            "images' detail folds (aliasing) and the frame's measures can be mirrored or turned")
    if searched is None:
        state.line += f"; {said}"
        state.warnings.append(aliased_frame_warning(step_A, finest_A, 1))
        return
    candidates = _beside_search(state, searched, chosen, calibration)
    state.line += f"; {searched.line()}; {said}"
    if judge is not None and len(candidates) > 1:
        _judged(state, judge, candidates, grid=True)
        return
    state.warnings.append(aliased_frame_warning(step_A, finest_A, len(candidates)))
    if len(candidates) > 1:  # init and info: what the run will do
        state.line += (f"; ptyacc run chooses among {len(candidates)} candidates by short reconstructions "
                       "(data.transform.orientation_trials)")


def _beside_search(state: _Orienting, searched, chosen, calibration) -> list[OrientationCandidate]:
    """``orientation_candidates`` of the Fourier regions' search ``searched`` beside the frame used so far (in
    ``state``: the parallax's ``chosen``, with its defocus, or the centre of mass's, with the nominal one)."""
    nominal = calibration.aberrations.get("C10")
    guessed_A = chosen.defocus_A if chosen is not None else None if nominal is None else -nominal
    return orientation_candidates(
        state.flags, state.rotation_deg, BY_PARALLAX if chosen is not None else "the centre of mass", searched,
        guessed_A, BY_PARALLAX if chosen is not None else "the nominal defocus")


def _search_s_angle(state: _Orienting, searched) -> bool:
    """Whether the rotation used is the Fourier regions' search's ``searched``: as it found it, or its broad peak
    turned by trial reconstructions within ROTATION_OFF_DEG (a farther turn is halved and said:
    ``_far_turn_halved``). Such a turn leaves the search's spread the angle's uncertainty: fresh h107-23 (graphene,
    1e4 counts, a spread of 2.3 degrees) was turned 0.2 degrees and failed 3 degrees off with the spread's warning
    in init's config alone."""
    if state.rotation_deg == searched.rotation_deg:
        return True
    if state.halved:
        return False
    turned = wrapped_deg(state.rotation_deg - searched.rotation_deg, 360.0)
    return (state.by_trials and state.used is not None and state.used.found_by == BY_PEAK
            and abs(turned) <= ROTATION_OFF_DEG)


def _far_turn_halved(state: _Orienting, searched) -> None:
    """Where the trials turned a broad Fourier regions' peak ``searched`` by over ROTATION_OFF_DEG, the run starts
    halfway between the two angles, and a warning names all three. Of the four such turns on the calibration
    matrix's fresh files (seeds 93-107) three went past the truth (the peak 2.7-4.0 degrees off, the trials 2.9-4.9
    the other side: h96-17, h105-10, h107-02) and one to it (h99-17, a peak 6.3 degrees off)."""
    trials_deg = state.rotation_deg
    off = wrapped_deg(trials_deg - searched.rotation_deg, 360.0)
    if abs(off) <= ROTATION_OFF_DEG:
        return
    state.rotation_deg, state.halved = wrapped_deg(searched.rotation_deg + off / 2, 360.0), True
    state.used = dataclasses.replace(state.used, rotation_deg=state.rotation_deg)
    state.warnings.append(trials_turn_warning(searched, off, state.rotation_deg))


def _take(state: _Orienting, verdict: Verdict) -> None:
    """``state`` takes the candidate of the trials' ``verdict``, its line, and a warning per unsettled quantity."""
    state.used, state.by_trials = verdict.taken, True
    state.flags, state.rotation_deg = verdict.taken.flags, verdict.taken.rotation_deg
    state.line += f"; {verdict.said}"
    state.warnings += [trials_unsettled_warning(one) for one in verdict.unsettled]


def _judged(state: _Orienting, judge: Judge, candidates: list[OrientationCandidate], measured: bool = True,
            grid: bool = False) -> None:
    """``state`` takes the candidate ``judge`` chooses among ``candidates`` (with ``grid``, among every frame around
    the circle too: ``trials.OrientationTrials.frames_tried``), and the doubt where its data term ended under
    TRIALS_SURE below the next one's. Where nothing ``measured`` the frame clearly, a wider margin is
    said too: of the calibration matrix's fresh files that took that path (seeds 70-90, 1e3-1e4 counts), 14 without
    the doubt had the truth's frame on 8 and failed on 10, five of them with no warning (record
    2026-12-05-few-counts-and-coherence.md)."""
    verdict = judge(candidates, grid=True) if grid else judge(candidates)
    _take(state, verdict)
    if verdict.margin is not None and verdict.margin < TRIALS_SURE:
        state.warnings.append(trials_doubt_warning(verdict.margin, verdict.rival, TRIALS_SURE))
    elif not measured:
        state.warnings.append(unmeasured_frame_warning(len(candidates), verdict.margin, verdict.rival))


def _parallax_searched(state: _Orienting, searched, chosen, judge: Judge | None) -> None:
    """The parallax's orientation ``chosen``, its handedness told at least PARALLAX_SURE times the other's, beside
    a centre of mass that is noise: a clear Fourier regions' search ``searched`` that mirrors it leaves the
    handedness open (on the calibration matrix's 200 files it did once, at 1e3 counts, where the parallax, 16 times
    sure, was the mirror and the search right): ``judge`` chooses between the two, or, without one, the parallax's
    stands with a warning. Otherwise the parallax's rotation is kept: on 61 such files with a clear search of the
    same handedness it lay nearer the truth (median 0.4 against 0.7 degrees). ``state`` takes the result."""
    if searched is None:
        return
    if not searched.clear or not frame_difference(chosen.flags, chosen.rotation_deg, searched.flags,
                                                  searched.rotation_deg)[0]:
        state.line += f"; {searched.line()}: " + ("the same handedness" if searched.clear else "not clear")
        return
    candidates = [OrientationCandidate(chosen.flags, chosen.rotation_deg, chosen.defocus_A, BY_PARALLAX, BY_PARALLAX),
                  OrientationCandidate(searched.flags, searched.rotation_deg, searched.defocus_A,
                                       BY_PEAK)]
    state.line += f"; {searched.line()}: its mirror"
    if judge is not None:
        _judged(state, judge, candidates)
        return
    state.warnings.append(mirror_disagreement_warning(chosen.ratio, searched.contrast))
    state.line += ("; ptyacc run chooses between them by short reconstructions "
                   "(data.transform.orientation_trials)")


def _com_searched(state: _Orienting, searched, found, judge: Judge | None = None) -> None:
    """The centre of mass ``found`` alone, clear of curl: its rotation still errs by degrees (noise, on a crystal)
    well beyond its halves' spread, and a clear Fourier regions' peak ``searched`` of the same frame lies far nearer
    the truth: that peak is used where ``_search_turned`` says so. A clear peak further away (or mirrored) is a second
    measure that disagrees: ``judge`` chooses between the two, or, without one, the centre of mass's stands with a
    warning (once in the calibration matrix's 264 fresh files of seeds 93-103, a graphene raster at 3e4 counts whose
    centre of mass lay 12.4 degrees off and the search right, silent). ``state`` takes the result."""
    off = _search_turned(found, searched)
    if off is not None:
        state.flags, state.rotation_deg, state.by_search = searched.flags, searched.rotation_deg, True
        state.line += f"; {searched.line()}: these are used, {-off:+.2f} deg from the centre of mass's"
        if abs(off) > 90:
            state.line += " (its turn by 180 degrees, which the centre of mass's skew cannot tell)"
    elif searched is not None and searched.clear:
        mirrored, apart = frame_difference(found.flags, found.rotation_deg, searched.flags, searched.rotation_deg)
        state.line += f"; {searched.line()}: " + ("its mirror" if mirrored else f"{abs(apart):.1f} deg apart")
        if judge is not None:
            _judged(state, judge, [OrientationCandidate(found.flags, found.rotation_deg, None, "the centre of mass", None),
                                   OrientationCandidate(searched.flags, searched.rotation_deg, searched.defocus_A,
                                                        BY_PEAK)])
            return
        state.warnings.append(com_search_disagreement_warning(found, searched, mirrored, apart))
    elif searched is not None:
        state.line += f"; {searched.line()}: not used (the centre of mass's orientation is kept)"


def _search_turned(found, searched) -> float | None:
    """How far (degrees, ``frame_difference``'s sense) a clear Fourier regions' search ``searched`` that gives the
    orientation in place of the centre of mass's ``found`` lies from it; None where it does not. It does where it
    has the same handedness and lies within SEARCH_APART_DEG, or within that of a turn by 180 degrees where the
    divergence's skew does not tell that turn (``Orientation.tells_turn``; the search's flags carry the nominal
    defocus's sign)."""
    if searched is None or not searched.clear:
        return None
    mirrored, off = frame_difference(found.flags, found.rotation_deg, searched.flags, searched.rotation_deg)
    apart = abs(off) if found.tells_turn else min(abs(off), 180.0 - abs(off))
    return None if mirrored or apart > SEARCH_APART_DEG else off


def outvoted(chosen, found) -> bool:
    """Whether the parallax's orientation ``chosen``, its handedness told under PARALLAX_SURE times the other's, is
    the mirror of the centre of mass's ``found``, which tells its own clearly (little curl left at its best angle and
    the other handedness MIRRORED times more, ``trouble.com_warnings``'s test): on WSe2 at 1e5 counts such parallaxes
    (2 to 5 times) were the mirror, and the reconstructions noise."""
    return (chosen.ratio < PARALLAX_SURE and tells_handedness(found)
            and frame_difference(found.flags, found.rotation_deg, chosen.flags, chosen.rotation_deg)[0])


def weak_com(found) -> bool:
    """Whether the centre of mass's orientation ``found`` is mostly noise: much curl left at its best angle, or
    the scan's halves more than ROTATION_OFF_DEG apart."""
    spread = abs(found.halves_deg[0] - found.halves_deg[1]) / 2
    return found.curl_left > CURL_CLEAR or spread > ROTATION_OFF_DEG


def _stored_middle(source, calibration, base_A: np.ndarray, shape, background: np.ndarray | None):
    """The stored patterns of the middle block of the raster ``shape`` (``middle_block``) less ``background``,
    the block's shape, the step vectors of the scan's own positions ``base_A`` (N, 2) Å on that raster, the
    stored dk (1/Å) and the nominal defocus (Å); None without a nominal defocus, a stored pixel size or a
    raster grid."""
    nominal = -calibration.aberrations.get("C10", 0.0)
    if nominal == 0 or calibration.stored_dx_A is None or shape is None:
        return None
    steps = scan_grid_steps(base_A, shape)
    if steps is None:
        return None
    rows, block = middle_block(tuple(shape))
    patterns = source.read(rows, None if background is None else (lambda chunk: chunk - background)).patterns
    return patterns, block, steps, 1.0 / (source.info.shape[-1] * calibration.stored_dx_A), nominal


def _overlap_oriented(source, calibration, base_A: np.ndarray, shape, file_mask: np.ndarray | None,
                      background: np.ndarray | None, near_deg: float, rivals: bool = False):
    """The orientation and defocus the Fourier regions' coherence of the stored patterns gives on the scan's
    own positions ``base_A`` (N, 2) Å near the raster ``shape`` (``overlap_orientation.py``), the rotation
    nearest ``near_deg``, with its rival peaks where ``rivals`` (or the peak is not clear); None without a nominal
    defocus or a raster grid."""
    read = _stored_middle(source, calibration, base_A, shape, background)
    if read is None:
        return None
    patterns, block, steps, dk_invA, nominal = read
    return overlap_orientation(patterns, block, steps, calibration.wavelength_A, dk_invA, nominal, file_mask, near_deg,
                               rivals)


def _parallax_oriented(source, calibration, base_A: np.ndarray, shape, file_mask: np.ndarray | None,
                       background: np.ndarray | None):
    """The transpose/flip and rotation the parallax of the stored patterns gives on the scan's own positions
    ``base_A`` (N, 2) Å (the nominal raster, or positions near the raster ``shape``; ``parallax_orientation.py``),
    the nominal defocus telling the patterns from their 180-degree turn; None where there is no nominal
    defocus, no raster grid or the parallax cannot tell."""
    semiangle = calibration.values.get("semiangle_mrad")
    read = None if not semiangle else _stored_middle(source, calibration, base_A, shape, background)
    if read is None:
        return None
    patterns, block, steps, dk_invA, nominal = read
    return parallax_orientation(patterns, block, steps, calibration.wavelength_A, dk_invA, nominal, semiangle * 1e-3,
                                file_mask)


def _turned_by_parallax(source, calibration, positions_A: np.ndarray, shape, flags: Flags,
                        file_mask: np.ndarray | None, background: np.ndarray | None) -> tuple[Flags, str]:
    """The flags with flip_y and flip_x toggled (the patterns turned by 180 degrees) where the
    parallax of the stored patterns so oriented, at ``positions_A`` (N, 2) Å (on the raster ``shape``),
    gives a defocus of the nominal one's opposite sign
    (the parallax alone cannot tell a defocus from its opposite with the patterns turned by 180
    degrees; a nominal defocus, even 30 % off, has the right sign); and what to add to run.log."""
    nominal = -calibration.aberrations.get("C10", 0.0)
    if nominal == 0 or calibration.stored_dx_A is None:
        return flags, ""
    steps = scan_grid_steps(positions_A, shape)
    if steps is None:
        return flags, ""
    found = stored_parallax(source, shape, steps, calibration.wavelength_A,
                            1.0 / (source.info.shape[-1] * calibration.stored_dx_A), flags, file_mask, background)
    if found is None or found.defocus_A * nominal > 0:
        return flags, ""
    return (flags[0], not flags[1], not flags[2]), (
        f"; with these flags the bright-field parallax gives a defocus of {found.defocus_A:.1f} A, the nominal "
        f"{nominal:g} A's opposite sign: flip_y and flip_x toggled (the patterns turned by 180 deg)")


def _centred_orientation(prep: Preparation, source, n_patterns: int, file_mask: np.ndarray | None, data,
                         background: np.ndarray | None, gain: np.ndarray | None, rotation_deg: float | None,
                         offset_px: tuple[float, float] | None = None
                         ) -> tuple[Preparation, float | None, tuple[str, ...], tuple[float, float] | None]:
    """``prep`` with its flips chosen to leave the bright-field disk (``_disk_offset_px`` from the zero
    frequency before the transpose and flips) nearest it (``Preparation.centre_after``); the scan rotation
    that goes with new flags (None where they stay); and what to report. A flip that stands for the scan
    turned by 90 or 180 degrees must turn the patterns about k = 0, one that undoes a detector read out
    backwards must reverse them; on an even size the two differ by a pixel, which ``descan: auto`` would
    otherwise take for a descan. Where the data chose the flags and the scan rotation (``rotation_deg``
    given), the flags of the same handedness turned by 90, 180 or 270 degrees, with the rotation turned
    back, are taken instead where they bring the disk RECENTRED_PX nearer (a detector read out backwards
    along an axis that the flags nearest a rotation of 0 leave unflipped). Without flips or a rotation to
    turn back there is nothing to choose, and nothing is read. The disk's offset is returned too, and taken as
    ``offset_px`` where an earlier call read it (it does not depend on the flags)."""
    if rotation_deg is None and not (prep.flip_y or prep.flip_x):
        return prep, None, (), offset_px
    if offset_px is None:
        unoriented = dataclasses.replace(prep, transpose=False, flip_y=False, flip_x=False)
        offset_px = _disk_offset_px(source, n_patterns, unoriented.mask(file_mask),
                                    pattern_preparation(unoriented, str(source.path), data.nonfinite, data.negative,
                                                        background, gain))
    landed, about = prep.centre_after(offset_px)
    chosen, turned_deg, said = dataclasses.replace(prep, flip_about_zero=about), None, []
    if rotation_deg is not None:
        best = None
        now = flag_matrix(prep.transpose, prep.flip_y, prep.flip_x)
        # of those that bring it nearest, the one whose rotation is nearest 0
        for flags, theta in equivalent_orientations(now.T @ rotation(rotation_deg)):
            candidate = dataclasses.replace(prep, transpose=flags[0], flip_y=flags[1], flip_x=flags[2])
            moved, turned_about = candidate.centre_after(offset_px)
            rank = (round(math.hypot(*moved), 2), abs(theta))
            if math.hypot(*moved) < math.hypot(*landed) - RECENTRED_PX and (best is None or rank < best[0]):
                best = (rank, dataclasses.replace(candidate, flip_about_zero=turned_about), moved, flags, theta)
        if best is not None:
            _, chosen, landed, flags, turned_deg = best
            t, fy, fx = (bool(v) for v in flags)
            said.append(f"orientation: transpose {t}, flip_y {fy}, flip_x {fx} and a scan rotation of "
                        f"{turned_deg:.2f} deg instead (the same up to a turn of the "
                        f"patterns): they leave the bright-field disk, ({offset_px[0]:+.2f}, {offset_px[1]:+.2f}) px "
                        f"(y, x) from the zero frequency as stored, {math.hypot(*landed):.2f} px from it")
    if any(chosen.flip_about_zero):
        axes = " and ".join(name for name, on in zip(("flip_y", "flip_x"), chosen.flip_about_zero, strict=True) if on)
        said.append(f"{axes}: the patterns turned about the zero frequency, not reversed, which leaves the "
                    f"bright-field disk 1 px nearer it (a flip that stands for the scan turned, not a detector read "
                    f"out backwards)")
    return chosen, turned_deg, tuple(said), offset_px


def _disk_offset_px(source, n_patterns: int, mask: np.ndarray | None, prepare) -> tuple[float, float]:
    """(y, x) px from the zero frequency of the bright-field disk's centre in the mean of a sample of the
    patterns ``prepare`` gives (model layout; ``mask`` the prepared detector mask, or None)."""
    patterns = np.fft.fftshift(source.read(sample_rows(n_patterns, FLIP_SAMPLE), prepare).patterns, axes=(-2, -1))
    return disk_offset_px(patterns.mean(0, dtype=np.float64), None if mask is None else np.fft.fftshift(mask))


def _descanned(source, positions_A: np.ndarray, prepare, mask: np.ndarray | None, in_model: bool = False
               ) -> tuple[MeasuredDescan, str]:
    """``data.transform.descan: auto``: the descan measured in the patterns and what to report; ``in_model``
    (``descan_model: ramp``): where it moves any pattern, the model takes it (``quantities/descan_ramp.py``),
    the patterns left as read."""
    descan, shifts, line = measure_descan(source, prepare, positions_A, mask)
    if not any_moved(shifts) or not in_model:  # nothing the data resolve: the patterns as read (counts stay counts)
        return MeasuredDescan(descan, shifts), line
    line = line.replace("patterns shifted back", "patterns to be moved by the model")
    return MeasuredDescan(descan, shifts, in_model=True), (line + "; data.transform.descan_model: ramp: the patterns "
                                                           "left as read, each exit wave given the phase ramp of its shift")


def _with_parallax(experiment, calibration, facts, scan_shape, radius_px: float | None, read: tuple,
                   rotation_auto: bool, orientation: MeasuredOrientation | None, depth_A: float = 0.0,
                   flags_measured: bool = True):
    """The experiment and calibration with the defocus (and a measured rotation's correction) from
    the parallax (``_defocused``; ``read``: its source, prepare, mask, dx_A and pattern width; the measured
    ``orientation`` (None: none measured) gives the centre of mass's skew where it could not tell a turn by 180
    degrees, the defocus that came with it, used
    where the parallax cannot tell, and whether trial reconstructions judged it, whose rotation is kept), what was
    measured and what to report."""
    unsure_skew, given, by_trials, kept = None, None, False, None
    if orientation is not None:
        unsure_skew, by_trials = None if orientation.tells_turn else orientation.skew, orientation.by_trials
        kept = ("trial reconstructions judged the orientation" if by_trials else
                "the rotation lies between the parallax's and the Fourier regions' search's" if orientation.blended
                else None)
        given = None if orientation.defocus_A is None else (float(orientation.defocus_A), orientation.defocus_by)
    found, turn_deg, defocus, said = _defocused(calibration, *read, rotation_auto, unsure_skew, depth_A, flags_measured,
                                                given, by_trials, kept,
                                                None if orientation is None else orientation.searched_defocus_A)
    if turn_deg:
        experiment, calibration = _at_rotation(experiment, facts, scan_shape, radius_px,
                                               wrapped_deg(experiment.scan_rotation_deg + turn_deg, 360.0))
    if found:
        calibration = _with_aberrations(calibration, found)
    return experiment, calibration, defocus, said


def _at_rotation(experiment, facts, scan_shape, radius_px: float | None, rotation_deg: float):
    """``experiment`` with the measured scan rotation ``rotation_deg`` and its calibration made anew (the rotation's
    source ``fitted``; the aberrations the experiment's own)."""
    experiment = dataclasses.replace(experiment, scan_rotation_deg=rotation_deg)
    calibration = calibrate(experiment, facts, scan_shape, bright_field_radius_px=radius_px)
    calibration.sources["scan_rotation_deg"] = "fitted"
    return experiment, calibration


def _with_aberrations(calibration: Calibration, found: dict[str, float]) -> Calibration:
    """``calibration`` with the aberrations ``found`` (C10 among them) measured from the data: the defocus fitted."""
    return dataclasses.replace(calibration, aberrations=dict(calibration.aberrations, **found),
                               values=dict(calibration.values, defocus_A=-found["C10"]),
                               sources=dict(calibration.sources, defocus_A="fitted"))


def _defocused(calibration, source, prepare, mask: np.ndarray | None, dx_A: float, k: int, rotation_auto: bool,
               unsure_skew: float | None, depth_A: float = 0.0, flags_measured: bool = True,
               given: tuple[float, str] | None = None, by_trials: bool = False, rotation_kept: str | None = None,
               rival_A: float | None = None
               ) -> tuple[dict[str, float], float, MeasuredDefocus | None, tuple[str, ...]]:
    """``experiment.defocus_A: auto``: the aberrations measured from the parallax of the prepared
    patterns (``parallax.py``): C10, and C12a and C12b where the config gives neither and they lie
    more than C12_SIGMAS sigma from 0; none where the data cannot tell (the nominal ones stay); the turn (deg)
    to add to a measured scan rotation (the parallax's rotation left, and 180 degrees where the
    parallax says the defocus has the nominal one's opposite sign while the centre of mass could
    hardly tell the rotation from the one 180 degrees away: its skew ``unsure_skew``, None where it could or
    none was measured); what was measured; and what to report. The
    parallax sees the probe's defocus at the sample's middle, ``depth_A`` below the entrance surface where
    the model's probe is defined (half the multislice model's propagated thickness), so that is added. ``given``:
    the defocus that came with the orientation and what gave it (``BY_SEARCH`` or ``BY_TRIALS``), used where the
    parallax cannot tell or disagrees with it. An orientation judged ``by_trials`` (reconstructions) takes no C12:
    the parallax's groups hardly align at the counts that call for trials. ``rotation_kept``: why the orientation's
    rotation is kept, its rotation left not taken (trials judged it, or it lies between the parallax's and a
    search's, where the correction would take it back to the parallax's); None: the rotation left is added.
    ``rival_A``: a clear Fourier regions' search's defocus in the frame used (at the sample's middle); where it
    lies over DEFOCUS_OFF from the parallax's (``_disagreeing_A``), the defocus carries it as a rival for trial
    reconstructions (``_focus_tried``)."""
    nominal = -calibration.aberrations["C10"] if "C10" in calibration.aberrations else None
    where = {"file": "the file's defocus_A", "config": "aberrations.C10"}.get(calibration.sources.get("defocus_A", ""),
                                                                               "none given")
    said = "none" if nominal is None else f"{nominal:g} A ({where})"
    steps = None if calibration.scan_shape is None else scan_grid_steps(calibration.positions_A, calibration.scan_shape)
    if steps is None:
        found, reason, seconds = None, ("it needs positions on a raster's grid (data.scan_shape and "
                                        "experiment.scan_step_A, or a file's positions that form one)"), 0.0
    else:
        found, reason, seconds = measure_parallax(source, calibration.scan_shape, steps, calibration.wavelength_A,
                                                  1.0 / (k * dx_A), prepare, mask)
    warnings = tuple(parallax_warnings(found, None, None if rotation_auto else calibration.values["scan_rotation_deg"],
                                       flags_measured))
    usable = found is not None and found.reliable
    if usable and given is not None and abs(found.defocus_A - given[0]) > DEFOCUS_OFF * abs(given[0]):
        # the orientation came from the Fourier search (or trials) because the counts are few: a real-space fit
        # that disagrees with it is the groups' noise (the calibration matrix's c50, 1e3 counts: 81 A for 139, and a
        # 13 degree turn that undid the search's right rotation)
        usable, reason = False, (f"its defocus is over {DEFOCUS_OFF:.0%} from the {given[0]:.1f} A of {given[1]} "
                                 "that gave the orientation")
    if usable:
        return _parallax_defocus(calibration, found, seconds, nominal, said, depth_A, rotation_auto, rotation_kept,
                                 unsure_skew, by_trials, rival_A, warnings)
    semiangle_rad, searched_A = (calibration.values.get("semiangle_mrad") or 0.0) * 1e-3, None
    if (given is None and nominal is not None and steps is not None
            and math.pi * abs(nominal) * semiangle_rad ** 2 / calibration.wavelength_A >= MIN_EDGE_PHASE):
        # a nominal defocus too small for the parallax is too small for the coherence's scale search too
        searched_A = _overlap_defocus(source, calibration, steps, prepare, mask, dx_A, k, nominal)
        given = None if searched_A is None else (searched_A, BY_SEARCH)
    measured = "" if found is None else f"measured {found.summary()}, "
    if given is None:
        kept = "no nominal defocus either: the probe starts in focus" if nominal is None else \
            f"the nominal defocus {said} is used"
        return {}, 0.0, None, (f"{DEFOCUS_HEAD}: {measured}not used: {reason}; {kept} ({seconds:.2g} s)",
                               f"auto not applied: experiment.defocus_A: {reason}; {kept}", *warnings)
    defocus = given[0] + depth_A
    searched = given[1] == BY_SEARCH and searched_A is not None  # the prepared patterns' coherence, just now
    with_orientation = "" if searched else " (with the orientation)"
    return {"C10": -defocus}, 0.0, MeasuredDefocus(defocus, np.nan, searched_A=defocus if searched else None), (
        f"{DEFOCUS_HEAD}: {measured}not used: {reason}; the defocus {defocus:.1f} A of {given[1]}{with_orientation} "
        f"is used{'' if nominal is None else f', {defocus - nominal:+.1f} A from the nominal {said}'} ({seconds:.2g} s)",
        *warnings, *far_defocus_warning(defocus, nominal, given[1]))


def _parallax_defocus(calibration, found: Parallax, seconds: float, nominal: float | None, said: str, depth_A: float,
                      rotation_auto: bool, rotation_kept: str | None, unsure_skew: float | None, by_trials: bool,
                      rival_A: float | None, warnings: tuple[str, ...]
                      ) -> tuple[dict[str, float], float, MeasuredDefocus, tuple[str, ...]]:
    """``_defocused`` where the parallax's defocus is used (its arguments, ``found`` the reliable Parallax, ``said``
    the nominal defocus as run.log names it): the aberrations, the turn, the MeasuredDefocus and the lines."""
    middle, turn, notes = found.defocus_A, 0.0, ""
    opposite = nominal is not None and nominal * (middle + depth_A) < 0
    if rotation_auto and rotation_kept:
        notes += f"; its rotation left ({found.rotation_left_deg:+.2f} deg) not taken: {rotation_kept}"
    elif rotation_auto:
        turn = found.rotation_left_deg
        if opposite and unsure_skew is not None:
            turn, middle, opposite = turn + 180.0, -middle, False
            notes += (f"; the scan rotation turned by 180 deg (the centre of mass could not tell it, divergence "
                      f"skew {float(unsure_skew):+.2f}, and the nominal defocus has the other sign)")
        notes += f"; the scan rotation measured before (centre of mass or parallax) corrected by {turn:+.2f} deg"
    if opposite:
        notes += "; its sign is the nominal one's opposite (or the scan is turned by 180 degrees)"
    defocus = middle + depth_A
    if depth_A:
        notes = f"; {middle:.1f} A at the sample's middle, {depth_A:g} A below the entrance surface{notes}"
    c12 = (found.c12a_A, found.c12b_A) if middle == found.defocus_A else (-found.c12a_A, -found.c12b_A)
    c12_found, c12_note, withheld = _c12_taken(calibration, c12, found.c12_error_A, by_trials)
    found_aberrations, notes = {"C10": -defocus, **c12_found}, notes + c12_note
    change = "" if nominal is None else (f", {defocus - nominal:+.1f} A from the nominal {said}"
                                         f"{f' ({(defocus - nominal) / abs(nominal):+.0%})' if nominal else ''}")
    rival_A = _disagreeing_A(rival_A, middle, opposite or abs(turn) >= 90.0)
    if rival_A is not None:
        notes += f"; the Fourier regions' search reads {rival_A:.1f} A, {(rival_A - middle) / abs(middle):+.0%} from it"
    line = (f"{DEFOCUS_HEAD}: {found.summary()}{change}; the measured defocus {defocus:.1f} A is used{notes} "
            f"({seconds:.2g} s)")
    rival = None if rival_A is None else rival_A + depth_A
    return (found_aberrations, turn, MeasuredDefocus(defocus, found.defocus_error_A, found, rival_A=rival, turn_deg=turn,
                                                     c12_set=tuple(c12_found), c12_withheld=withheld),
            (line, *warnings))


def _c12_taken(calibration, c12: tuple[float, float], error_A: float, by_trials: bool
               ) -> tuple[dict[str, float], str, tuple[float, float] | None]:
    """The parallax's C12 (``c12`` (a, b) Å in the frame used, ``error_A`` its standard error) as aberrations to use,
    run.log's note and the C12 withheld for trials: used where the config gives none and it lies over C12_SIGMAS sigma
    from 0, unless trial reconstructions judged the orientation; then withheld, for trials to try (``_c12_tried``)."""
    if "C12a" in calibration.aberrations or "C12b" in calibration.aberrations:
        return {}, "; C12 as the config gives it", None
    if math.hypot(*c12) <= C12_SIGMAS * error_A:
        return {}, "", None
    if by_trials:
        # as its rotation, not taken as read: at such counts it can be the groups' noise (``_c12_tried``)
        return {}, (f"; C12a {c12[0]:+.1f} A and C12b {c12[1]:+.1f} A not taken as read: trial reconstructions "
                    "judged the orientation (ptyacc run tries it the same way; give experiment.aberrations C12a and "
                    "C12b if the beam's astigmatism is known)"), c12
    return {"C12a": c12[0], "C12b": c12[1]}, f"; C12a {c12[0]:+.1f} A and C12b {c12[1]:+.1f} A are used", None


def _disagreeing_A(searched_A: float | None, parallax_A: float, turned: bool) -> float | None:
    """A clear search's defocus ``searched_A`` where it disagrees with the parallax's ``parallax_A`` (both at the
    sample's middle): of the same sign and over DEFOCUS_OFF from it, in the frame used (not where the parallax's
    sign or a turn by 180 degrees ``turned`` it away from the search's frame); None otherwise."""
    if searched_A is None or turned or searched_A * parallax_A <= 0:
        return None
    return searched_A if abs(searched_A - parallax_A) > DEFOCUS_OFF * abs(parallax_A) else None


def _overlap_defocus(source, calibration, steps_A: np.ndarray, prepare, mask: np.ndarray | None, dx_A: float, k: int,
                     nominal_A: float) -> float | None:
    """The defocus the Fourier regions' coherence of the prepared patterns gives (``overlap_orientation``'s
    ``overlap_defocus``, the orientation taken as right), for where the real-space parallax cannot tell
    (few counts, or shifts large against the scan); None where it cannot either."""
    rows, block = middle_block(tuple(calibration.scan_shape))
    centred = np.fft.fftshift(source.read(rows, prepare).patterns, axes=(-2, -1))
    good = None if mask is None else np.fft.fftshift(np.asarray(mask, dtype=bool))
    return overlap_defocus(centred, block, steps_A, calibration.wavelength_A, 1.0 / (k * dx_A), nominal_A, good)


def _orientation_checked(experiment, transform, source, calibration, file_mask: np.ndarray | None,
                         background: np.ndarray | None, phase_sign: float = 1.0) -> tuple[tuple[str, ...], bool]:
    """The transpose/flip and scan rotation given (none of them ``auto``) against the centre of mass of the
    stored patterns (``trouble.com_warnings``), on the raster's grid or at the positions, and where that is
    mostly noise against a clear Fourier regions' search on a raster's grid (``trouble.search_warnings``, the
    defocus too): the warnings (none where the scan is too small to tell), and whether a clear centre of mass or
    search gave the handedness of the flags given (the parallax's check asks it where its own is not sure).
    ``phase_sign``: the sign of the material's phase (``orientation.PHASE_SIGN``); X-rays have no search."""
    rotation_deg = experiment.scan_rotation_deg
    step, shape = calibration.values.get("scan_step_A"), calibration.scan_shape
    raster = shape is not None and step is not None and np.allclose(calibration.positions_A,
                                                                    raster_positions_A(shape, step, rotation_deg))
    base = None if raster else turned_positions_A(calibration.positions_A, -rotation_deg)
    if raster and min(shape) < MIN_RASTER or not raster and len(base) < MIN_RASTER * MIN_RASTER:
        return (), False
    flags = (transform.transpose, transform.flip_y, transform.flip_x)
    if transform.orientation == "auto" and BASIS in source.info.attrs:
        flags = tuple(orientation_from_basis(source.info.attrs[BASIS], str(source.path)).values())
    found, _ = measure_orientation(source, shape, file_mask, background, None, rotation_deg, base, phase_sign)
    said = com_warnings(found, flags, rotation_deg, least_deg=ROTATION_OFF_DEG if phase_sign > 0 else XRAY_TURN_DEG)
    base_A = raster_positions_A(shape, step, 0.0) if raster else base
    if said or not weak_com(found) or shape is None or scan_grid_steps(base_A, shape) is None or phase_sign < 0:
        same = not frame_difference(flags, rotation_deg, found.flags, found.rotation_deg)[0]
        return tuple(said), tells_handedness(found) and same
    # few counts: the centre of mass cannot tell, the Fourier regions' coherence of every pixel and frequency can
    searched = _overlap_oriented(source, calibration, base_A, shape, file_mask, background, rotation_deg)
    if searched is None or not searched.clear:
        return (), False
    return (tuple(search_warnings(searched, flags, rotation_deg, -calibration.aberrations.get("C10", 0.0))),
            not frame_difference(flags, rotation_deg, searched.flags, searched.rotation_deg)[0])


def _parallax_checked(calibration, read: tuple, rotation_auto: bool, flags_measured: bool,
                      flags_confirmed: bool = False) -> tuple[str, ...]:
    """The defocus given (not ``auto``), the scan rotation and the transpose/flip against the parallax of
    the prepared patterns (``read``: their source, prepare, mask, dx_A and width) at the run's positions
    (``trouble.parallax_warnings``; ``flags_confirmed``: a clear centre of mass or search gave the flags'
    handedness): the warnings; none where there is no raster grid, no defocus, or the parallax cannot be
    measured."""
    source, prepare, mask, dx_A, k = read
    defocus_A = -calibration.aberrations.get("C10", 0.0)
    shape = calibration.scan_shape
    steps = None if shape is None or not defocus_A else scan_grid_steps(calibration.positions_A, shape)
    if steps is None or min(shape) < MIN_SIDE:
        return ()
    found, _, _ = measure_parallax(source, shape, steps, calibration.wavelength_A, 1.0 / (k * dx_A), prepare, mask)
    rotation = None if rotation_auto else calibration.values["scan_rotation_deg"]
    return tuple(parallax_warnings(found, defocus_A, rotation, flags_measured,
                                   PARALLAX_SURE if flags_confirmed else None))
