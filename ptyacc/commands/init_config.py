"""``ptyacc init DATAFILE``: a commented config for a data file, filled with what the file says
about itself (the same inspection as ``ptyacc info``): its patterns, the calibration it carries
(left to the file, shown in comments), what it lacks (a ``null`` to fill in, marked NEEDED), the
positions, and a batch size and window suggested from its size; then what ``ptyacc info`` derives
from it, or why it cannot yet."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ptyacc.data.autocalibration import MIN_RASTER
from ptyacc.data.bright_field import half_way_bright, repaired, sample_rows
from ptyacc.data.hologram_motion import MIN_MOTION_POSITIONS, measure_motion
from ptyacc.data.parallax import MIN_SIDE
from ptyacc.data.positions import RasterFit, raster_fit
from ptyacc.data.probe_file import probe_key, read_probe
from ptyacc.data.readers import PatternsInfo, inspect_patterns, open_patterns, read_patterns
from ptyacc.errors import ConfigError, PtyaccError
from ptyacc.reconstruction.batch_auto import STEPS, steps_batch

ELECTRON_PROBE_MODES = 4  # init's incoherent probe modes for electrons: on the calibration matrix's files a partly
# coherent beam's phase NCC gained 0.02-0.05 on average with them (up to 0.12), none lost over about 0.02; each
# iteration takes about twice as long
ROTATION_START = 4  # the iteration from which init's config refines a measured scan rotation: the object first takes
# shape at the measured angle (refined from iteration 0, the early steps against a blank object took rotations that
# started about a degree from the truth to 1-2.5 degrees from it, on calibration matrix files at few counts or with
# a partly coherent beam)

FOCUS_START = 1  # the iteration from which init's config refines the probe's focus where the defocus is measured
# (optim.start.probe_focus), with the probe: the measured defocus can be 5-15 % off (a partly coherent beam's parallax
# reads low, the trials on weak scatterers high), and the probe's own steps keep most of such an error; on ten
# calibration matrix files it moved every one towards the truth (from iteration 1 a little further than from 4)
ASTIGMATISM_START = 1  # the iteration from which init's config refines the probe's two-fold astigmatism, with the
# probe (optim.start.probe_astigmatism): the parallax cannot read C12 at steps coarser than the bright-field images'
# detail, and on the calibration matrix's wide draw of seed 119 runs told the truth but C12 came 0.004-0.44 below the
# runs told it too; refined from zero they came within 0.005 of those on 20 of 22 files (on eight files of the
# standard draw, with no astigmatism, it changed nothing beyond 0.001)
XRAY_FOCUS_START = 1  # the iteration from which init's far-field config refines the probe's focus (optim.start.probe_focus),
# the sample's distance from it: the side's trials (6 iterations each) find the distance up to 20 % off on simulated
# files, and the probe's own steps keep most of that; refined from iteration 1, init's final deviance came to 1.01 times
# told's on average over 28 fresh files (from 1.2-1.45), where from iteration 0 told's own rose up to 8 %
NEAR_FIELD_POSITIONS_START = 2  # the iteration from which init's near-field config refines the positions, and it runs
# optim.iterations: auto (its batch floor keeps the loss from climbing): on the PETRA III file the deviance 22.2 at 20
# iterations -> 7.8; on 16 simulated files told the truth, at or above 30 fixed iterations on all 16 (mean NCC 0.62 ->
# 0.69), the positions within 0.01 of the same run without them

CALIBRATION = {  # key: (what it is, needed by electrons, needed by X-rays)
    "energy_eV": ("beam energy in eV (80 keV = 80000)", True, False),
    "semiangle_mrad": ("probe-forming aperture semi-angle in mrad", True, False),
    "defocus_A": ("defocus in Å, positive = underfocus", False, False),
    "dk_invA": ("detector pixel in 1/Å (or dx_A, or dk_from_bright_field: true)", True, False),
    "scan_step_A": ("raster scan step in Å", False, False),
    "detector_distance_m": ("sample-to-detector distance in m", False, True),
    "detector_pixel_m": ("detector pixel size in m", False, True),
}


def init_config(data_path: Path, config_path: Path, key: str | None = None) -> str:
    """The text of a config for ``data_path``, to be written at ``config_path`` (data.path is
    relative to it); ``key``: the dataset of the patterns, where the file has several."""
    info = inspect_patterns(data_path, key)
    xray = info.format == "cxi" or info.attrs.get("radiation") == "xray"
    relative = os.path.relpath(data_path.resolve(), config_path.resolve().parent)
    relative = data_path.resolve() if relative.startswith("..") else relative
    n, (ky, kx) = info.n_patterns, info.shape[-2:]
    lines = [f"# ptyacc config for {data_path.name}, written by `ptyacc init`; every key: docs/reference/config.md",
             f"# {info.format} file: {n} patterns of {ky} x {kx} px"
             + (f", scan {info.scan_shape[0]} x {info.scan_shape[1]}" if info.scan_shape else ""),
             "# Run: ptyacc run THIS.yaml   (check first: ptyacc info THIS.yaml)", "data:", f"  path: {relative}"]
    if info.key and info.format == "hdf5":
        lines.append(f"  key: {info.key.lstrip('/')}")
    if len(info.shape) == 3 and info.scan_shape is None and "scan_shape" not in info.attrs and info.positions_A is None:
        lines.append("  scan_shape: null   # NEEDED: [slow, fast] of the raster scan")
    crop = square_crop_lines(data_path, info) if ky != kx else []
    if min(ky, kx) > 256:
        lines.append(f"  # transform: {{bin: 2}}   # {min(ky, kx)} px patterns: binning halves the window and quarters "
                     "the time")
    fit = None if xray or info.positions_A is None else raster_fit(np.asarray(info.positions_A), info.scan_shape)
    raster = info.positions_A is None or (fit is not None and fit.exact)
    if fit is not None and fit.exact and info.scan_shape is None and "scan_step_A" in info.attrs:
        lines.append(f"  scan_shape: {list(fit.scan_shape)}   # the raster the file's positions_A form")
    side = min(fit.scan_shape) if fit is not None else min(info.scan_shape or (0, 0))
    turned = not xray and (side >= MIN_RASTER or not raster and n >= MIN_RASTER * MIN_RASTER)
    parallax = not xray and side >= MIN_SIDE
    measured = not raster and "scan_step_A" in info.attrs
    near = _near_field_motion(data_path, info) if xray else None
    if not xray:
        lines += _found_in_data_lines(turned, crop)
    elif "detector_basis_vectors_m" in info.attrs or n >= MIN_RASTER * MIN_RASTER or near:
        lines += ["  transform:", *crop, "    orientation: auto   # the detector's transpose/flips against the scan: "
                  + ("from the file's basis vectors" if "detector_basis_vectors_m" in info.attrs else
                     "from the holograms' motion" if near else "from the patterns' centre of mass (far field)")]
    elif crop:
        lines += ["  transform:", *crop]
    lines += ["experiment:", f"  radiation: {'xray' if xray else 'electron'}"]
    if near:
        lines += [f"  geometry: near_field   # the patterns travel with the scan as holograms do: {near}",
                  "  focus_to_sample_m: auto   # from how far the holograms move as the sample moves (the magnification)",
                  "  scan_rotation_deg: auto   # from the direction the holograms move in as the sample moves (0 = the "
                  "stage's axes along the detector's)"]
    elif xray and probe_key(data_path) is None:
        lines.append("  sample_side: auto   # far field: the side of the probe's focus the sample lies on, tried both ways "
                     "(focus_to_sample_m, where known, sets it)")
    if xray and not near and n >= MIN_RASTER * MIN_RASTER:
        lines.append("  scan_rotation_deg: auto   # the stage's turn against the detector: the patterns' centre of mass, "
                     "refined by short reconstructions (0 = the stage's axes along the detector's)")
    lines += _calibration_lines(info, xray, parallax, near_field=bool(near))
    if turned:
        lines.append("  scan_rotation_deg: auto   # from the patterns (centre of mass, parallax; run.log says which; "
                     "0 = scan along the detector)"
                     + ("" if raster else "; turns the file's positions about their centre"))
    if not xray and (info.positions_A is not None or info.scan_shape is not None):  # else the scan is NEEDED first
        lines += _dropped_lines(info, fit, raster, turned, parallax)
    if measured:
        lines.append("  positions: {key: positions_A}   # the file's measured positions, not a raster")
    carried, model = probe_key(data_path), []
    if carried is not None:
        model.append(f"  probe_init: {{path: {relative}, key: {carried}}}   # the file's own probe, its power "
                     "scaled to the data")
        modes = len(read_probe(data_path, carried).modes)
        model += [f"  probe_modes: {modes}   # as many as the file's probe holds"] if modes > 1 else []
    elif not xray:
        model.append(f"  probe_modes: {ELECTRON_PROBE_MODES}   # the beam's partial coherence (source size, energy "
                     "spread); 1 for a coherent probe, about twice as fast")
    if turned:
        model.append("  scan_affine: rotation   # optim.start.scan_affine refines the measured scan rotation alone")
    lines += (["model:"] + model if model else [])
    lines += ["optim:", "  iterations: auto   # until the loss stops falling (optim.stop), at most 300" if near else
              "  iterations: 20", "  batch_size: auto   # from the data: one step per iteration where the "
              f"descan shifted the patterns, else about {STEPS} ({steps_batch(n)} of {n} positions)"]
    if near:
        lines.append(f"  start: {{positions: {NEAR_FIELD_POSITIONS_START}}}   # the positions refined from iteration "
                     f"{NEAR_FIELD_POSITIONS_START}: a stage's errors blur a hologram's fine fringes")
    elif xray and carried is None:
        lines.append(f"  start: {{probe_focus: {XRAY_FOCUS_START}}}   # the sample's distance from the probe's focus "
                     f"refined from iteration {XRAY_FOCUS_START} (experiment.sample_side's trials find it up to 20 % off; "
                     "optim.lr.probe_focus: auto steps by a share of the beam's depth of focus; run.log ends with "
                     "where it went)")
    if not xray:
        start = (["detector_blur: 0"] + [f"scan_affine: {ROTATION_START}"] * turned + [f"probe_focus: {FOCUS_START}"] *
                 parallax + [f"probe_astigmatism: {ASTIGMATISM_START}"])
        lines.append(f"  start: {{{', '.join(start)}}}   # the detector's blur (model.detector_blur_px) refined from none"
                     + (f"; the scan rotation measured, refined from iteration {ROTATION_START}, once the object has "
                        "taken shape (it is seldom within a degree where the counts are few)" if turned else "")
                     + (f"; the measured defocus refined from iteration {FOCUS_START} (the probe's own steps keep most "
                        "of its error; run.log ends with where it went)" if parallax else "")
                     + f"; the beam's two-fold astigmatism (C12) refined from iteration {ASTIGMATISM_START}")
    lines += ["output:", f"  dir: results/{data_path.stem}"]
    return "\n".join(lines) + "\n"


def square_crop_lines(data_path: Path, info: PatternsInfo) -> list[str]:
    """``data.transform`` lines for patterns that are not square: the largest square block, placed
    along the longer side so that the beam's bright region (the centre of the pixels above half way
    from the dark level to the brightest, in the mean of an evenly spread sample of patterns, hot
    and dead pixels repaired) sits at its centre pixel, where zero frequency belongs."""
    shape = info.shape[-2:]
    side, long_axis = min(shape), int(np.argmax(shape))
    sample = read_patterns(data_path, info.key, rows=sample_rows(info.n_patterns)).patterns
    _, _, bright = half_way_bright(repaired(sample.mean(axis=0, dtype=np.float64)))
    centre = [float(c.mean()) for c in np.nonzero(bright)] if bright.any() else [(k - 1) / 2 for k in shape]
    offset = [0, 0]
    offset[long_axis] = int(np.clip(round(centre[long_axis]) - side // 2, 0, shape[long_axis] - side))
    return [f"    crop: {side}   # the stored {shape[0]} x {shape[1]} px patterns are not square: the largest square",
            f"    crop_offset: {offset}   # its first pixel [row, col]: the beam's bright region, centred at pixel "
            f"[{centre[0]:.1f}, {centre[1]:.1f}] of the stored patterns, at the block's centre pixel"]


def _dropped_lines(info: PatternsInfo, fit: RasterFit | None, raster: bool, turned: bool, parallax: bool) -> list[str]:
    """Comments saying how the file's positions are read and which scan autos are left out, and why."""
    lines = []
    if info.positions_A is not None:
        how = ("read as that raster, which the autos need" if raster else
               "kept as measured; the autos are measured at them")
        lines.append(f"  # positions: the file's positions_A are {fit.describe() if fit else 'no raster'}: {how}")
    if not turned:
        lines.append("  # scan_rotation_deg and data.transform.orientation not auto: the centre of mass needs a scan "
                     f"of at least {MIN_RASTER} x {MIN_RASTER} positions")
    if not parallax:
        lines.append("  # defocus_A not auto: the bright-field parallax needs positions on a raster's grid of at least "
                     f"{MIN_SIDE} x {MIN_SIDE}")
    return lines


def terminal_notes(text: str) -> list[str]:
    """The comments of a written config (with info's report) that the terminal must show too: how the
    file's positions are read, a scan auto left out and why, the warnings of the report, and a sample that scatters
    strongly (a thick crystal wants model.slices, which init cannot know: run on one slice, its answer is wrong)."""
    notes = []
    for line in text.splitlines():
        comment = line.strip().removeprefix("# ")
        if (comment.startswith(("positions: the file's", "warning:", "auto not applied:")) or " not auto: " in comment
                or comment.startswith("scattering:") and ": strong;" in comment):
            notes.append(comment)
    return notes


def _found_in_data_lines(turned: bool, crop: list[str]) -> list[str]:
    """What an electron dataset's own patterns say better than its attributes: bad pixels, descan and
    (a raster scan) the patterns' transpose/flip against the scan (README: "Real data"); ``crop``: the
    transform's crop lines for patterns that are not square, first."""
    lines = ["  bad_pixels: auto   # dead and hot pixels, dead rows and columns found in the data"]
    if crop:
        return lines + ["  transform:", *crop] + (["    orientation: auto   # transpose/flip from the centre of mass"]
                                                  if turned else []) + [
            "    descan: auto   # the disk's wandering centre taken out"]
    orientation = "orientation: auto, " if turned else ""
    return lines + [f"  transform: {{{orientation}descan: auto}}   # "
                    + ("transpose/flip from the centre of mass; " if turned else "") + "the disk's wandering centre taken out"]


def from_ptyrad(params_path: Path, config_path: Path, adam_steps: bool = False) -> str:
    """The text of a config made from a PtyRAD params file (``interop.ptyrad_params``), to be
    written at ``config_path``."""
    from ptyacc.interop.ptyrad_params import convert
    from ptyacc.interop.ptyrad_schema import config_text, load_ptyrad_params

    try:
        conversion = convert(load_ptyrad_params(params_path), config_path.resolve().parent, adam_steps)
    except ConfigError as exc:
        raise ConfigError(f"{params_path}: {exc}") from None
    return config_text(conversion, params_path)


def _near_field_motion(data_path: Path, info: PatternsInfo) -> str | None:
    """What the holograms' motion says of an X-ray file whose patterns travel with its positions (near field), for
    init's comment; None where they do not, or the file has no positions to tell."""
    if info.positions_A is None or info.n_patterns < MIN_MOTION_POSITIONS or len(info.shape) != 3:
        return None
    with open_patterns(data_path, info.key) as source:
        motion, _ = measure_motion(source, np.asarray(info.positions_A, dtype=np.float64), info.mask)
    if not motion.moves:
        return None
    distance, pixel = info.attrs.get("detector_distance_m"), info.attrs.get("detector_pixel_m")
    focus = None if distance is None or pixel is None else motion.focus_to_sample_m(float(distance), float(pixel))
    return (f"{motion.step_px:.1f} px between neighbours"
            + ("" if focus is None else f", the sample about {focus * 1e3:.3g} mm downstream of the focus"))


def _calibration_lines(info: PatternsInfo, xray: bool, parallax: bool = False, near_field: bool = False) -> list[str]:
    """One line per calibration key: the file's value in a comment, or the key to fill in;
    ``parallax``: the defocus measured from the data (a raster scan of electrons)."""
    lines = []
    found_wavelength = "wavelength_A" in info.attrs
    for key, (what, electron_needs, xray_needs) in CALIBRATION.items():
        if key == "defocus_A" and parallax:
            nominal = (f"the file's {_number(info.attrs[key])} Å is the nominal value" if key in info.attrs else
                       "no nominal value in the file: add aberrations: {C10: -value} to give one")
            lines.append(f"  defocus_A: auto   # from the bright-field parallax; {nominal}, used where the data "
                         "cannot tell")
        elif key in info.attrs:
            lines.append(f"  # {key}: {_number(info.attrs[key])}   # from the file; uncomment to override")
        elif key == "dk_invA" and "dx_A" in info.attrs:
            lines.append(f"  # dx_A: {_number(info.attrs['dx_A'])}   # from the file; uncomment to override")
        elif key == "energy_eV" and found_wavelength:
            lines.append(f"  # energy_eV: from the file's wavelength ({_number(info.attrs['wavelength_A'])} Å)")
        elif (xray_needs if xray else electron_needs) and not (key == "scan_step_A" and info.positions_A is not None):
            lines.append(f"  {key}: null   # NEEDED: {what}")
        elif key == "scan_step_A" and info.positions_A is None:
            lines.append(f"  {key}: null   # NEEDED for a raster scan: {what}")
        elif not xray or key.startswith("detector"):
            lines.append(f"  # {key}:   # {what}")
    if xray and not near_field:
        lines.append("  # geometry: near_field   # with focus_to_sample_m, for Fresnel-scaled near-field images")
    return lines


def _number(value: object) -> str:
    array = np.asarray(value)
    return f"{float(array.ravel()[0]):g}" if array.size == 1 and array.dtype.kind in "iuf" else str(value)


def report(config_path: Path) -> list[str]:
    """What ``ptyacc info`` derives from the written config, or what it still lacks, as comments."""
    from ptyacc.commands.info import data_report
    from ptyacc.config import load_config

    try:
        return [f"# {line}" for line in data_report(load_config(config_path))]
    except PtyaccError as exc:
        return [f"# not ready: {exc}"]
