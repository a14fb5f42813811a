"""Reading the dataset of ``config.data``, in one line: the file opened once and inspected (what
it says about itself, with the positions ``experiment.positions`` names in it), calibrated with
the config (``calibration.calibrate``), the preparation planned, the patterns read and prepared,
the file closed, the dataset built."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ptyacc.config import Config, resolved_upsample
from ptyacc.data.bright_field import measured_radius_px, repaired, sample_rows
from ptyacc.data.calibration import SourceFacts, calibrate
from ptyacc.data.dataset import PtychoData, keep_only
from ptyacc.data.descan import Descanned, any_moved, disk_centres, measure_descan
from ptyacc.data.detector import good_pixels, measure_bad_pixels
from ptyacc.data.flat_field import read_flat_field
from ptyacc.data.hold import hold_patterns
from ptyacc.data.orientation import FLAGS, flag_matrix, measure_orientation, middle_block, rotation
from ptyacc.data.overlap_orientation import overlap_defocus, overlap_orientation
from ptyacc.data.parallax import MIN_EDGE_PHASE, MIN_SIDE, measure_parallax, stored_parallax
from ptyacc.data.parallax_orientation import parallax_orientation
from ptyacc.data.positions import raster_positions_A, turned_positions_A
from ptyacc.data.prepare import Preparation, orientation_from_basis, pattern_preparation
from ptyacc.data.readers import open_patterns, read_hdf5_array
from ptyacc.data.sanity import calibration_checks, scan_grid_steps
from ptyacc.data.simulate import simulate_dataset
from ptyacc.data.stored_scan import raster_or_positions
from ptyacc.data.trouble import (
    CURL_CLEAR,
    DEFOCUS_OFF,
    ROTATION_OFF_DEG,
    com_warnings,
    parallax_warnings,
    weak_orientation_warning,
)
from ptyacc.errors import ConfigError, DataError

Keep = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Measured:
    """What a measurement from the data adds to run.log (``lines``) and results.h5 /detector (``arrays``)."""

    lines: tuple[str, ...] = ()
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

POSITIONS_SETTING = "experiment.positions.key"
BASIS = "detector_basis_vectors_m"  # the file attribute of data.transform.orientation: auto
MIN_RASTER = 8  # positions along each side for the centre of mass to tell a rotation
SIGN_WARNING = "warning: the data's bright-field parallax says the defocus has the opposite sign"  # sanity.py's
OPPOSITE = ", the opposite sign to the"  # trouble.parallax_warnings's, which says the same


def descan_left_to_model(config: Config) -> bool:
    """Whether ``data.transform.descan_model`` leaves the measured descan to the model (``ramp``, or ``auto`` with
    one scan and the patterns neither padded nor upsampled) rather than shifting the patterns."""
    transform = config.data.transform
    if transform.descan_model != "auto":
        return transform.descan_model == "ramp"
    return not config.scans and transform.pad is None and resolved_upsample(config)[0] == 1


def load_data(config: Config, keep: Keep | None = None, device: torch.device | str = "cpu") -> PtychoData:
    """Read or simulate the dataset that ``config.data`` describes, calibrated by
    ``config.experiment`` (values it leaves out come from the file's attributes).
    keep: given all positions (N, 2) in Å, the sorted indices of the patterns to hold
    (the others are never read); default all.
    device: where the run computes; ``data.hold`` chooses from its free memory whether the
    patterns are read now (device) or held in host memory or left in the file (``streamed``)."""
    if config.data.simulate is not None:
        return _simulated(config, keep)
    data, experiment = config.data, config.experiment
    calibrating = "auto" in (experiment.scan_rotation_deg, experiment.defocus_A, data.bad_pixels,
                             data.transform.orientation, data.transform.descan)  # autos that _resolved names
    path, positions_path = _input_paths(config)
    in_data_file = positions_path == path
    options = {"scan_shape": tuple(data.scan_shape)} if data.scan_shape else {}
    with open_patterns(path, data.key, positions_key=experiment.positions.key if in_data_file else None,
                       **options) as source:
        info, name = source.info, str(source.path)
        named = None
        if positions_path is not None:  # read with the rest when in the data file, else from its own file
            array = info.named_positions if in_data_file else read_hdf5_array(
                positions_path, experiment.positions.key, POSITIONS_SETTING)
            named = f"{positions_path}:{experiment.positions.key}", array
        facts = SourceFacts(name, info.shape, info.attrs, info.positions_A, named)
        needs = [key for key, asked in (
            ("experiment.scan_rotation_deg", experiment.scan_rotation_deg == "auto"),
            ("data.transform.orientation", data.transform.orientation == "auto" and BASIS not in info.attrs),
            ("experiment.defocus_A", experiment.defocus_A == "auto")) if asked]
        experiment, facts, scan_shape, read_as = raster_or_positions(experiment, facts, data.scan_shape, needs)
        defocus_auto = experiment.defocus_A == "auto"
        if defocus_auto:  # the nominal value from the file or aberrations.C10
            experiment = dataclasses.replace(experiment, defocus_A=None)
        rotation_auto = experiment.scan_rotation_deg == "auto"
        calibration = calibrate(dataclasses.replace(experiment, scan_rotation_deg=0.0) if rotation_auto else experiment,
                                facts, scan_shape)
        file_mask, bad, gain = info.mask if data.use_mask else None, Measured(), None
        if data.flat_field is not None:  # its pixels without a usable gain are left out, as bad ones
            gain, usable = read_flat_field(config.resolve_input(data.flat_field), data.flat_field_key, info.shape[-2:])
            file_mask = usable if file_mask is None else np.asarray(file_mask, dtype=bool) & usable
        if data.bad_pixels == "auto":
            file_mask, bad = _without_bad_pixels(data, source, file_mask, len(calibration.positions_A))
        transform, turned = dataclasses.replace(data.transform, upsample=resolved_upsample(config)[0]), Measured()
        if rotation_auto or (transform.orientation == "auto" and BASIS not in info.attrs
                             and experiment.radiation == "electron"):
            experiment, transform, turned = _oriented(experiment, transform, source, calibration, file_mask,
                                                      info.background if data.subtract_background else None,
                                                      defocus_auto)
            calibration = calibrate(experiment, facts, scan_shape)
            calibration.sources["scan_rotation_deg"] = "fitted" if rotation_auto else "config"
        elif experiment.check_calibration and experiment.radiation == "electron" and experiment.geometry == "far_field":
            turned = _orientation_checked(experiment, transform, source, calibration, file_mask,
                                          info.background if data.subtract_background else None)
        background = info.background if data.subtract_background else None
        prep = Preparation.from_config(transform, info.shape[-2:], experiment.geometry == "far_field", name, info.attrs)
        flipped = Measured()
        measured_flags = data.transform.orientation == "auto" and BASIS not in info.attrs
        if prep.far_field and experiment.radiation == "electron" and measured_flags:  # given flips reverse, as said
            unoriented = dataclasses.replace(prep, transpose=False, flip_y=False, flip_x=False)
            offset = _disk_offset_px(source, len(calibration.positions_A), unoriented.mask(file_mask),
                                     pattern_preparation(unoriented, name, data.nonfinite, data.negative, background,
                                                         gain))
            prep, flipped = _centred_orientation(prep, offset, experiment.scan_rotation_deg if rotation_auto else None)
            if "scan_rotation_deg" in flipped.arrays:  # turned by 90 or 180 degrees with the flags
                transform = dataclasses.replace(transform, transpose=prep.transpose, flip_y=prep.flip_y,
                                                flip_x=prep.flip_x)
                experiment = dataclasses.replace(experiment, scan_rotation_deg=float(flipped.arrays["scan_rotation_deg"]))
                calibration = calibrate(experiment, facts, scan_shape)
                calibration.sources["scan_rotation_deg"] = "fitted"
                turned = Measured(turned.lines, {**turned.arrays, **flipped.arrays})
        shape = prep.shape
        prepare = pattern_preparation(prep, name, data.nonfinite, data.negative, background, gain)
        mask = prep.mask(file_mask)
        radius_px = None
        if calibration.stored_dx_A is None:  # experiment.dk_from_bright_field
            radius_px = measured_radius_px(source, len(calibration.positions_A), prepare) * prep.bin  # binning shrinks the disk
            calibration = calibrate(experiment, facts, scan_shape, bright_field_radius_px=radius_px)
        dx_A = prep.object_pixel_A(calibration.stored_dx_A)
        reopen, descan = (lambda: open_patterns(path, info.key, **options)), Measured()
        if data.transform.descan == "auto":
            source, reopen, descan = _descanned(source, calibration.positions_A, prepare, mask, reopen,
                                                descan_left_to_model(config))
        focus, nominal = Measured(), calibration.aberrations
        if defocus_auto:
            depth_A = (config.model.slices - 1) * config.model.slice_thickness_A / 2
            experiment, calibration, focus = _with_parallax(experiment, calibration, facts, scan_shape, radius_px,
                                                            (source, prepare, mask, dx_A, shape[-1]), rotation_auto,
                                                            turned.arrays.get("orientation_skew"), depth_A,
                                                            data.transform.orientation == "auto",
                                                            turned.arrays.get("overlap_defocus_A"))
        elif experiment.check_calibration and experiment.radiation == "electron" and experiment.geometry == "far_field":
            focus = _parallax_checked(experiment, calibration, (source, prepare, mask, dx_A, shape[-1]),
                                      rotation_auto, data.transform.orientation == "auto")
        rows = None if keep is None else np.asarray(keep(calibration.positions_A))
        patterns, streamed, choice = hold_patterns(data, source, rows, prepare, shape, len(calibration.positions_A),
                                                   device, reopen)
        every = patterns if streamed is None and rows is None else None  # all patterns, prepared, in memory
        checks = calibration_checks(experiment, calibration, dx_A, source, prepare, prep.bin, shape[-1],
                                    every) if experiment.check_calibration else ()
        if any(line.startswith(SIGN_WARNING) for line in checks):  # one warning for one wrong sign
            focus = dataclasses.replace(focus, lines=tuple(line for line in focus.lines if OPPOSITE not in line))
    return PtychoData.calibrated(torch.from_numpy(patterns), calibration, dx_A, name, pattern_rows=rows,
                                 mask=None if mask is None else torch.from_numpy(mask),
                                 stored_pattern_shape=tuple(info.shape[-2:]),
                                 checks=read_as + bad.lines + turned.lines + flipped.lines + descan.lines + focus.lines
                                 + tuple(checks),
                                 detector={**bad.arrays, **turned.arrays, **flipped.arrays, **descan.arrays, **focus.arrays},
                                 hold=choice, streamed=streamed,
                                 autos=_resolved(config, experiment, prep, nominal, calibration.aberrations,
                                                 {**bad.arrays, **descan.arrays}) if calibrating else {})


def _simulated(config: Config, keep: Keep | None) -> PtychoData:
    """The dataset ``data.simulate`` describes, which has no rotation or defocus to measure."""
    if config.experiment.scan_rotation_deg == "auto":
        raise ConfigError("experiment.scan_rotation_deg: auto measures the rotation in a data file; a data.simulate "
                          "dataset is made with the rotation given (set a number)")
    if config.experiment.defocus_A == "auto":
        raise ConfigError("experiment.defocus_A: auto measures the defocus in a data file; a data.simulate dataset "
                          "is made with the defocus given (set a number)")
    return keep_only(simulate_dataset(config), keep)


def _resolved(config: Config, experiment, prep: Preparation, nominal: dict[str, float], aberrations: dict[str, float],
              detector: dict[str, np.ndarray]) -> dict[str, float | int | str | bool]:
    """{key: value} of the calibration autos of ``config`` as this load resolved them, for
    ``reconstruction/autos.py`` (the run's config and results.h5's ``auto_values``): the scan rotation
    (``experiment``'s), the defocus and the C12 the parallax set (``aberrations`` against the
    ``nominal`` ones), the transpose/flip ``prep`` applies, the number of bad pixels left out,
    the largest descan (px, 0 where none was taken out) and how the model takes it."""
    data, transform, found = config.data, config.data.transform, {}
    if config.experiment.scan_rotation_deg == "auto":
        found["experiment.scan_rotation_deg"] = float(experiment.scan_rotation_deg)
    if config.experiment.defocus_A == "auto":
        found["experiment.defocus_A"] = -float(aberrations.get("C10", 0.0))
        found.update({f"experiment.aberrations.{name}": float(aberrations[name]) for name in ("C12a", "C12b")
                      if name in aberrations and aberrations[name] != nominal.get(name)})
    if transform.orientation == "auto":
        found.update({"data.transform.transpose": bool(prep.transpose), "data.transform.flip_y": bool(prep.flip_y),
                      "data.transform.flip_x": bool(prep.flip_x)})
    if data.bad_pixels == "auto":
        found["data.bad_pixels"] = len(detector["bad_pixels"])
    if transform.descan == "auto":
        found["data.transform.descan"] = float(np.abs(detector["descan_px"]).max()) if len(detector["descan_px"]) \
            else 0.0
        if transform.descan_model == "auto":
            found["data.transform.descan_model"] = "ramp" if descan_left_to_model(config) else "shift"
    return found


def _without_bad_pixels(data, source, file_mask: np.ndarray | None, n_patterns: int) -> tuple[np.ndarray, Measured]:
    """``data.bad_pixels: auto``: the detector mask as stored (``file_mask``, None = all good) less
    the bad pixels found in the data; and what to report."""
    bad, line = measure_bad_pixels(source, n_patterns, source.info.background if data.subtract_background else None)
    return good_pixels(file_mask, bad), Measured((line,), bad.arrays())


def _oriented(experiment, transform, source, calibration, file_mask: np.ndarray | None,
              background: np.ndarray | None, defocus_auto: bool = False):
    """``experiment.scan_rotation_deg: auto`` and/or ``data.transform.orientation: auto`` in a file
    without basis vectors: the experiment and transform with the rotation and flags measured from
    the centre of mass of the stored patterns (``orientation.py``; on the raster's grid, or, for
    positions that are no raster, at the positions, whose rotation then turns them about their centre),
    and what to report. Where a defocus is known (given, or the nominal one of ``defocus_auto``) the
    flags and rotation are the parallax's where it tells them (``_parallax_oriented``); else, with
    ``defocus_auto``, the flags are turned by 180 degrees where the centre of mass could hardly tell
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
    fixed = None
    if transform.orientation == "manual":
        fixed = (transform.transpose, transform.flip_y, transform.flip_x)
    elif BASIS in source.info.attrs:
        fixed = tuple(orientation_from_basis(source.info.attrs[BASIS], str(source.path)).values())
    found, line = measure_orientation(source, shape, file_mask, background, fixed, given,
                                      None if raster else base)
    flags, rotation_deg = found.flags, found.rotation_deg
    grid = shape if shape is not None and scan_grid_steps(base, shape) is not None else None
    chosen = _parallax_oriented(source, calibration, base, grid, file_mask, background) if fixed is None else None
    if chosen is not None:  # the parallax tells the orientation far better than a weak centre of mass
        flags, rotation_deg = chosen.flags, chosen.rotation_deg
        line += f"; {chosen.line()}: these are used"
    warnings, arrays = [], {}
    if fixed is None and grid is not None and weak_com(found) and (chosen is None or chosen.ratio < PARALLAX_SURE):
        # few counts: the centre of mass is noise and the real-space parallax's groups hardly align; the
        # Fourier regions' coherence sums every pixel and frequency
        searched = _overlap_oriented(source, calibration, base, grid, file_mask, background, given)
        if searched is not None and searched.clear:
            flags, rotation_deg = searched.flags, searched.rotation_deg
            line += f"; {searched.line()}: these are used"
            arrays["overlap_defocus_A"] = np.float64(searched.defocus_A)
        else:
            line += "" if searched is None else f"; {searched.line()}: not clear enough to use"
            warnings.append(weak_orientation_warning(found, chosen))
    if rotation_auto:
        experiment = dataclasses.replace(experiment, scan_rotation_deg=rotation_deg)
    else:
        line += f"; the rotation used is experiment.scan_rotation_deg: {experiment.scan_rotation_deg:g}"
        if chosen is None:
            warnings = com_warnings(found, flags, given, SKEW_SURE, flags_measured=True)
    # the search's flags already carry the nominal defocus's sign: no second turn by 180 degrees
    searched_flags = "overlap_defocus_A" in arrays
    if (chosen is None and not searched_flags and fixed is None and defocus_auto and abs(found.skew) < SKEW_SURE
            and grid is not None):
        flags, said = _turned_by_parallax(source, calibration, turned_positions_A(base, experiment.scan_rotation_deg),
                                          grid, flags, file_mask, background)
        line += said
    if fixed is None:
        transform = dataclasses.replace(transform, orientation="manual", transpose=flags[0], flip_y=flags[1],
                                        flip_x=flags[2])
    return experiment, transform, Measured((line, *warnings), {"scan_rotation_deg": np.float64(rotation_deg),
                                                      "orientation_flags": np.array(flags),
                                                      "orientation_skew": np.float64(found.skew), **arrays})


PARALLAX_SURE = 10.0  # the real-space parallax's handedness ratio above which its orientation needs no second opinion


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
                      background: np.ndarray | None, near_deg: float):
    """The orientation and defocus the Fourier regions' coherence of the stored patterns gives on the scan's
    own positions ``base_A`` (N, 2) Å near the raster ``shape`` (``overlap_orientation.py``), the rotation
    nearest ``near_deg``; None without a nominal defocus or a raster grid."""
    read = _stored_middle(source, calibration, base_A, shape, background)
    if read is None:
        return None
    patterns, block, steps, dk_invA, nominal = read
    return overlap_orientation(patterns, block, steps, calibration.wavelength_A, dk_invA, nominal, file_mask, near_deg)


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


def _turned_by_parallax(source, calibration, positions_A: np.ndarray, shape, flags: tuple[bool, bool, bool],
                        file_mask: np.ndarray | None, background: np.ndarray | None) -> tuple[tuple, str]:
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


FLIP_SAMPLE = 64  # patterns whose mean tells where the bright-field disk lies
RECENTRED_PX = 0.25  # how much nearer the zero frequency other flags must bring the disk to be taken instead (a
# reversal moves an axis by a whole pixel: a disk over half a pixel off along it comes back within half a pixel)


def _disk_offset_px(source, n_patterns: int, mask: np.ndarray | None, prepare) -> tuple[float, float]:
    """(y, x) px from the zero frequency of the bright-field disk's centre in the mean of a sample of the
    patterns ``prepare`` gives (model layout; ``mask`` the prepared detector mask, or None)."""
    patterns = np.fft.fftshift(source.read(sample_rows(n_patterns, FLIP_SAMPLE), prepare).patterns, axes=(-2, -1))
    mean = repaired(patterns.mean(0, dtype=np.float64))
    centre = disk_centres(mean[None], None if mask is None else np.fft.fftshift(mask), mean)[0]
    return float(centre[0] - mean.shape[0] // 2), float(centre[1] - mean.shape[1] // 2)


def _centred_orientation(prep: Preparation, offset_px: tuple[float, float], rotation_deg: float | None
                         ) -> tuple[Preparation, Measured]:
    """``prep`` with its flips chosen to leave the bright-field disk, found ``offset_px`` (y, x) from the
    zero frequency before the transpose and flips, nearest it (``Preparation.centre_after``); and what to
    report. A flip that stands for the scan turned by 90 or 180 degrees must turn the patterns about
    k = 0, one that undoes a detector read out backwards must reverse them; on an even size the two
    differ by a pixel, which ``descan: auto`` would otherwise take for a descan. Where the data chose
    the flags and the scan rotation (``rotation_deg`` given), the flags of the same handedness turned by
    90, 180 or 270 degrees, with the rotation turned back, are taken instead where they bring the disk
    RECENTRED_PX nearer (a detector read out backwards along an axis that the flags nearest a rotation
    of 0 leave unflipped); the arrays then hold the new ``orientation_flags`` and ``scan_rotation_deg``."""
    landed, about = prep.centre_after(offset_px)
    chosen, arrays, said = dataclasses.replace(prep, flip_about_zero=about), {}, []
    if rotation_deg is not None:
        now, best = flag_matrix(prep.transpose, prep.flip_y, prep.flip_x), None
        for flags in FLAGS:  # of those that bring it nearest, the one whose rotation is nearest 0
            turn = flag_matrix(*flags) @ now.T @ rotation(rotation_deg)
            candidate = dataclasses.replace(prep, transpose=flags[0], flip_y=flags[1], flip_x=flags[2])
            moved, turned_about = candidate.centre_after(offset_px)
            theta = math.degrees(math.atan2(turn[0, 1], turn[0, 0]))
            rank = (round(math.hypot(*moved), 2), abs(theta))
            if np.linalg.det(turn) > 0 and math.hypot(*moved) < math.hypot(*landed) - RECENTRED_PX and (
                    best is None or rank < best[0]):
                best = (rank, dataclasses.replace(candidate, flip_about_zero=turned_about), moved, flags, theta)
        if best is not None:
            _, chosen, landed, flags, theta = best
            arrays = {"orientation_flags": np.array(flags), "scan_rotation_deg": np.float64(theta)}
        if arrays:
            t, fy, fx = (bool(v) for v in arrays["orientation_flags"])
            said.append(f"orientation: transpose {t}, flip_y {fy}, flip_x {fx} and a scan rotation of "
                        f"{float(arrays['scan_rotation_deg']):.2f} deg instead (the same up to a turn of the "
                        f"patterns): they leave the bright-field disk, ({offset_px[0]:+.2f}, {offset_px[1]:+.2f}) px "
                        f"(y, x) from the zero frequency as stored, {math.hypot(*landed):.2f} px from it")
    if any(chosen.flip_about_zero):
        axes = " and ".join(name for name, on in zip(("flip_y", "flip_x"), chosen.flip_about_zero, strict=True) if on)
        said.append(f"{axes}: the patterns turned about the zero frequency, not reversed, which leaves the "
                    f"bright-field disk 1 px nearer it (a flip that stands for the scan turned, not a detector read "
                    f"out backwards)")
        arrays["flip_about_zero"] = np.array(chosen.flip_about_zero)
    return chosen, Measured(tuple(said), arrays)


def _descanned(source, positions_A: np.ndarray, prepare, mask: np.ndarray | None, reopen, in_model: bool = False):
    """``data.transform.descan: auto``: the file (and the way to open it again) whose patterns come
    shifted back by the descan measured in them, and what to report; ``in_model``
    (``descan_model: ramp``): the file as it is, the descan left to the model (``quantities/descan_ramp.py``)."""
    descan, shifts, line = measure_descan(source, prepare, positions_A, mask)
    measured = Measured((line,), descan.arrays(shifts))
    if not any_moved(shifts):  # nothing the data resolve: the patterns as read (counts stay counts)
        return source, reopen, measured
    if in_model:
        line = line.replace("patterns shifted back", "patterns to be moved by the model")
        return source, reopen, Measured((line + "; data.transform.descan_model: ramp: the patterns left as read, "
                                                "each exit wave given the phase ramp of its shift",),
                                        {**measured.arrays, "descan_in_model": np.bool_(True)})
    return Descanned(source, descan, shifts, mask), lambda: Descanned(reopen(), descan, shifts, mask), measured


def _with_parallax(experiment, calibration, facts, scan_shape, radius_px: float | None, read: tuple,
                   rotation_auto: bool, skew: np.ndarray | None, depth_A: float = 0.0, flags_measured: bool = True,
                   searched_A: np.ndarray | None = None):
    """The experiment and calibration with the defocus (and a measured rotation's correction) from
    the parallax (``_defocused``; ``read``: its source, prepare, mask, dx_A and pattern width; ``searched_A``
    the Fourier regions' defocus, used where the parallax cannot tell), and what to report."""
    found, turn_deg, focus = _defocused(calibration, *read, rotation_auto, skew, depth_A, flags_measured,
                                        None if searched_A is None else float(searched_A))
    if turn_deg:
        turned_deg = (experiment.scan_rotation_deg + turn_deg + 180.0) % 360.0 - 180.0
        experiment = dataclasses.replace(experiment, scan_rotation_deg=turned_deg)
        calibration = calibrate(experiment, facts, scan_shape, bright_field_radius_px=radius_px)
        calibration.sources["scan_rotation_deg"] = "fitted"
    if found:
        calibration = dataclasses.replace(calibration, aberrations=dict(calibration.aberrations, **found),
                                          values=dict(calibration.values, defocus_A=-found["C10"]),
                                          sources=dict(calibration.sources, defocus_A="fitted"))
    return experiment, calibration, focus


SKEW_SURE = 1.0  # |divergence skew| of the centre of mass above which its choice between a rotation and + 180 stands


def _defocused(calibration, source, prepare, mask: np.ndarray | None, dx_A: float, k: int, rotation_auto: bool,
               skew: np.ndarray | None, depth_A: float = 0.0, flags_measured: bool = True,
               searched_A: float | None = None) -> tuple[dict[str, float], float, Measured]:
    """``experiment.defocus_A: auto``: the aberrations measured from the parallax of the prepared
    patterns (``parallax.py``): C10, and C12a and C12b where the config gives neither and they lie
    more than 2 sigma from 0; none where the data cannot tell (the nominal ones stay); the turn (deg)
    to add to a measured scan rotation (the parallax's rotation left, and 180 degrees where the
    parallax says the defocus has the nominal one's opposite sign while the centre of mass could
    hardly tell the rotation from the one 180 degrees away); and what to report. The parallax sees
    the probe's defocus at the sample's middle, ``depth_A`` below the entrance surface where the
    model's probe is defined (half the multislice model's propagated thickness), so that is added."""
    nominal = -calibration.aberrations["C10"] if "C10" in calibration.aberrations else None
    where = {"file": "the file's defocus_A", "config": "aberrations.C10"}.get(calibration.sources.get("defocus_A", ""),
                                                                               "none given")
    said = "none" if nominal is None else f"{nominal:g} A ({where})"
    head = "defocus from the bright-field parallax (experiment.defocus_A: auto)"
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
    if usable and searched_A is not None and abs(found.defocus_A - searched_A) > DEFOCUS_OFF * abs(searched_A):
        # the orientation came from the Fourier search because the counts are few: a real-space fit that
        # disagrees with it is the groups' noise (the calibration matrix's c50, 1e3 counts: 81 A for 139, and a
        # 13 degree turn that undid the search's right rotation)
        usable, reason = False, (f"its defocus is over {DEFOCUS_OFF:.0%} from the {searched_A:.1f} A of the Fourier "
                                 "regions' coherence that gave the orientation")
    semiangle_rad = (calibration.values.get("semiangle_mrad") or 0.0) * 1e-3
    if (not usable and searched_A is None and nominal is not None and steps is not None
            and math.pi * abs(nominal) * semiangle_rad ** 2 / calibration.wavelength_A >= MIN_EDGE_PHASE):
        # a nominal defocus too small for the parallax is too small for the coherence's scale search too
        searched_A = _overlap_defocus(source, calibration, steps, prepare, mask, dx_A, k, nominal)
    if not usable and searched_A is not None:
        defocus = searched_A + depth_A
        return {"C10": -defocus}, 0.0, Measured((
            f"{head}: {'' if found is None else f'measured {found.summary()}, '}not used: {reason}; the defocus "
            f"{defocus:.1f} A of the Fourier regions' coherence (with the orientation) is used"
            f"{'' if nominal is None else f', {defocus - nominal:+.1f} A from the nominal {said}'} ({seconds:.2g} s)",
            *warnings), {"parallax_defocus_A": np.array([defocus, np.nan])})
    if found is None or not found.reliable:
        measured = "" if found is None else f"measured {found.summary()}, "
        kept = "no nominal defocus either: the probe starts in focus" if nominal is None else \
            f"the nominal defocus {said} is used"
        return {}, 0.0, Measured((f"{head}: {measured}not used: {reason}; {kept} ({seconds:.2g} s)",
                                  f"auto not applied: experiment.defocus_A: {reason}; {kept}", *warnings))
    middle, turn, notes = found.defocus_A, 0.0, ""
    opposite = nominal is not None and nominal * (middle + depth_A) < 0
    if rotation_auto:
        turn = found.rotation_left_deg
        if opposite and skew is not None and abs(float(skew)) < SKEW_SURE:
            turn, middle, opposite = turn + 180.0, -middle, False
            notes += (f"; the scan rotation turned by 180 deg (the centre of mass could not tell it, divergence "
                      f"skew {float(skew):+.2f}, and the nominal defocus has the other sign)")
        notes += f"; the scan rotation measured before (centre of mass or parallax) corrected by {turn:+.2f} deg"
    if opposite:
        notes += "; its sign is the nominal one's opposite (or the scan is turned by 180 degrees)"
    defocus = middle + depth_A
    if depth_A:
        notes = f"; {middle:.1f} A at the sample's middle, {depth_A:g} A below the entrance surface{notes}"
    found_aberrations = {"C10": -defocus}
    c12 = (found.c12a_A, found.c12b_A) if middle == found.defocus_A else (-found.c12a_A, -found.c12b_A)
    if "C12a" in calibration.aberrations or "C12b" in calibration.aberrations:
        notes += "; C12 as the config gives it"
    elif math.hypot(*c12) > 2 * found.c12_error_A:
        found_aberrations.update(C12a=c12[0], C12b=c12[1])
        notes += f"; C12a {c12[0]:+.1f} A and C12b {c12[1]:+.1f} A are used"
    change = "" if nominal is None else (f", {defocus - nominal:+.1f} A from the nominal {said}"
                                         f"{f' ({(defocus - nominal) / abs(nominal):+.0%})' if nominal else ''}")
    line = f"{head}: {found.summary()}{change}; the measured defocus {defocus:.1f} A is used{notes} ({seconds:.2g} s)"
    arrays = {"parallax_defocus_A": np.array([defocus, found.defocus_error_A]),
              "parallax_c12_A": np.array([found.c12a_A, found.c12b_A, found.c12_error_A]),
              "parallax_rotation_left_deg": np.float64(found.rotation_left_deg),
              "parallax_k_invA": found.k_invA[found.used], "parallax_shifts_A": found.shifts_A[found.used],
              "parallax_fit_A": found.fit_A, "parallax_image": found.image}
    if turn:
        arrays["scan_rotation_deg"] = np.float64((calibration.values["scan_rotation_deg"] + turn + 180.0) % 360.0 - 180.0)
    return found_aberrations, turn, Measured((line, *warnings), arrays)


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
                         background: np.ndarray | None) -> Measured:
    """The transpose/flip and scan rotation given (none of them ``auto``) against the centre of mass of the
    stored patterns (``trouble.com_warnings``), on the raster's grid or at the positions: the warnings; none
    where the scan is too small to tell."""
    rotation_deg = experiment.scan_rotation_deg
    step, shape = calibration.values.get("scan_step_A"), calibration.scan_shape
    raster = shape is not None and step is not None and np.allclose(calibration.positions_A,
                                                                    raster_positions_A(shape, step, rotation_deg))
    base = None if raster else turned_positions_A(calibration.positions_A, -rotation_deg)
    if raster and min(shape) < MIN_RASTER or not raster and len(base) < MIN_RASTER * MIN_RASTER:
        return Measured()
    flags = (transform.transpose, transform.flip_y, transform.flip_x)
    if transform.orientation == "auto" and BASIS in source.info.attrs:
        flags = tuple(orientation_from_basis(source.info.attrs[BASIS], str(source.path)).values())
    found, _ = measure_orientation(source, shape, file_mask, background, None, rotation_deg, base)
    return Measured(tuple(com_warnings(found, flags, rotation_deg, SKEW_SURE)))


def _parallax_checked(experiment, calibration, read: tuple, rotation_auto: bool, flags_measured: bool) -> Measured:
    """The defocus given (not ``auto``), the scan rotation and the transpose/flip against the parallax of
    the prepared patterns (``read``: their source, prepare, mask, dx_A and width) at the run's positions
    (``trouble.parallax_warnings``): the warnings; none where there is no raster grid, no defocus, or the
    parallax cannot be measured."""
    source, prepare, mask, dx_A, k = read
    defocus_A = -calibration.aberrations.get("C10", 0.0)
    shape = calibration.scan_shape
    steps = None if shape is None or not defocus_A else scan_grid_steps(calibration.positions_A, shape)
    if steps is None or min(shape) < MIN_SIDE:
        return Measured()
    found, _, _ = measure_parallax(source, shape, steps, calibration.wavelength_A, 1.0 / (k * dx_A), prepare, mask)
    rotation = None if rotation_auto else calibration.values["scan_rotation_deg"]
    return Measured(tuple(parallax_warnings(found, defocus_A, rotation, flags_measured)))


def _input_paths(config: Config) -> tuple[Path, Path | None]:
    """The data file, and the file of the positions that ``experiment.positions`` names (the data
    file unless it names another; None for raster positions), resolved like ``data.path``."""
    path = config.resolve_input(config.data.path)
    spec = config.experiment.positions
    if spec == "raster":
        return path, None
    return path, config.resolve_input(spec.path) if spec.path else path
