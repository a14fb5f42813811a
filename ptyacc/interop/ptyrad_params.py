"""A PtyRAD 1.0 params file (``init_params``, ``model_params``, ``loss_params``,
``constraint_params``, ``recon_params``, ``hypertune_params``) made a ptyacc config.

Keys the file leaves out take PtyRAD's defaults (it fills them the same way), so the config does
what PtyRAD would have done. Conventions that differ, and how they are carried over:

- iterations: PtyRAD counts from 1, ptyacc from 0 (``start_iter: 1`` is ``optim.start.*: 0``);
- ``meas_flipT`` [flipud, fliplr, transpose] flips first, then transposes; ptyacc transposes first,
  so with a transpose the two flips swap axes; ``meas_crop`` ranges are given in the flipped frame
  and ptyacc crops before it orients, so the crop is moved back to the stored frame;
- ``pos_scan_affine`` [scale, asymmetry, rotation, shear]: positions (y, x) are multiplied by
  [[c, s], [-s, c]] from the right, a rotation by -rotation in ptyacc's sense (x toward y);
- object tilts: PtyRAD's tilted propagator moves the wave by -dz tan(t) per slice, ptyacc's by
  +dz tan(t) (DESIGN.md, "Tilt"): ``tilt_mrad`` is minus PtyRAD's;
- aberrations: the same chi and exp(-i chi) in both (``aberrations``), defocus = -C10 in both;
- learning rates with the same units carry over (positions in px, tilt in mrad, slice thickness
  relative to it); the object's and the probe's Adam steps act on differently normalised patterns
  and probes, so by default ptyacc keeps its own (preconditioned) steps for them and lists PtyRAD's;
  ``adam_steps=True`` carries them over as Adam steps instead.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from ptyacc.errors import ConfigError
from ptyacc.interop.aberrations import krivanek_cartesian
from ptyacc.interop.ptyrad_schema import DEFAULTS, REASONS, Conversion, Params, merged, reason
from ptyacc.physics import wavelength_A


def convert(params: dict[str, Any], config_dir: Path, adam_steps: bool = False) -> Conversion:
    """The ptyacc config for PtyRAD ``params`` (as ``load_ptyrad_params`` reads them); the data
    path, relative to the working directory as PtyRAD reads it, is written relative to
    ``config_dir`` (absolute if outside it)."""
    p = Params(merged(DEFAULTS, params), params)
    out = Conversion(config={})
    _data(p, out, config_dir)
    _optics(p, out)
    _calibration(p, out)
    _detector(p, out)
    _scan(p, out)
    _model(p, out)
    _updates(p, out, adam_steps)
    _loss_and_constraints(p, out)
    _recon(p, out)
    _object_padding(p, out)
    if not p.get("hypertune_params.if_hypertune"):
        p.take("hypertune_params")  # off: none of it acts
    for path, value in p.unused():
        out.unmapped.append((path, value, reason(path)))
    return out


def _data(p: Params, out: Conversion, config_dir: Path) -> None:
    source = p.take("init_params.meas_source")
    meas = p.take("init_params.meas_params")
    if source == "custom" or not isinstance(meas, dict) or not meas.get("path"):
        raise ConfigError("init_params.meas_params: the patterns are given in memory (meas_source: custom); a "
                          "ptyacc config needs a file: write them with `ptyacc convert` or numpy, then set data.path")
    path = Path(os.path.abspath(meas["path"]))
    relative = os.path.relpath(path, Path(config_dir).resolve())
    out.set("data.path", str(path) if relative.startswith("..") else relative)
    if meas.get("key"):
        out.set("data.key", str(meas["key"]).lstrip("/"))
    for name in ("shape", "offset", "gap", "selection", "zarr_kwargs"):
        if meas.get(name) is not None:
            out.unmapped.append((f"init_params.meas_params.{name}", meas[name], REASONS["meas_params"]))
    out.set("data.scan_shape", [int(p.need("init_params.pos_N_scan_slow")), int(p.need("init_params.pos_N_scan_fast"))])
    p.take("init_params.pos_N_scans")
    p.need("init_params.meas_Npix")
    reshape = p.take("init_params.meas_reshape")
    if reshape is not None and len(reshape) == 3 and reshape[1] != reshape[2]:
        out.unmapped.append(("init_params.meas_reshape", reshape, "ptyacc reads square patterns only"))
    negative = p.take("init_params.meas_remove_neg_values")
    if negative and (negative.get("mode") != "clip_neg" or negative.get("force")):
        out.unmapped.append(("init_params.meas_remove_neg_values", negative, REASONS["meas_remove_neg_values"]))
    seed = p.take("init_params.random_seed")
    if seed is not None:
        out.set("runtime.seed", int(seed))


def _optics(p: Params, out: Conversion) -> None:
    radiation = p.take("init_params.probe_illum_type")
    out.set("experiment.radiation", radiation)
    if radiation == "xray":
        out.set("experiment.energy_eV", float(p.need("init_params.beam_kev")) * 1e3)
        return
    out.set("experiment.energy_eV", float(p.need("init_params.probe_kv")) * 1e3)
    out.set("experiment.semiangle_mrad", float(p.need("init_params.probe_conv_angle")))
    given = p.take("init_params.probe_aberrations") or {}
    try:
        aberrations = krivanek_cartesian(given)
    except ValueError as exc:
        raise ConfigError(f"init_params.probe_aberrations: {exc}") from None
    out.set("experiment.defocus_A", 0.0 - aberrations.pop("C10", 0.0))  # set even when 0: not the data file's
    if aberrations:
        out.set("experiment.aberrations", aberrations)
    if given and set(given) - {"C10"}:
        out.notes.append(f"experiment.aberrations from init_params.probe_aberrations {dict(given)} (Krivanek "
                         "Cartesian; defocus_A = -C10)")


def _calibration(p: Params, out: Conversion) -> None:
    """meas_calibration as dk_invA, dx_A or the bright-field fit (all for the patterns as stored)."""
    calibration = p.take("init_params.meas_calibration") or {"mode": "fitRBF"}
    mode, value = calibration.get("mode", "fitRBF"), calibration.get("value")
    npix = int(p.get("init_params.meas_Npix"))
    if mode == "fitRBF":
        out.set("experiment.dk_from_bright_field", True)
        return
    xray = out.get("experiment.radiation") == "xray"
    if xray and mode not in ("dx", "dk"):
        out.unmapped.append(("init_params.meas_calibration", calibration, "X-ray data: give dx or dk"))
        return
    if xray:  # PtyRAD's X-ray lengths are in m
        out.set("experiment.dx_A" if mode == "dx" else "experiment.dk_invA", value * (1e10 if mode == "dx" else 1e-10))
        return
    lam = wavelength_A(out.get("experiment.energy_eV"))
    conv = out.get("experiment.semiangle_mrad")
    k_max = {"kMax": value, "angleMax": value * 1e-3 / lam, "n_alpha": value * conv * 1e-3 / lam}.get(mode)
    if mode == "dx":
        out.set("experiment.dx_A", float(value))
    elif mode == "dk":
        out.set("experiment.dk_invA", float(value))
    elif mode == "da":
        out.set("experiment.dk_invA", value * 1e-3 / lam)
    elif mode == "RBF":
        out.set("experiment.dk_invA", conv * 1e-3 / lam / value)
    else:
        out.set("experiment.dk_invA", 2 * k_max / npix)
    if mode not in ("dx", "dk"):
        out.notes.append(f"experiment.dk_invA from init_params.meas_calibration {{mode: {mode}, value: {value}}}")


def _detector(p: Params, out: Conversion) -> None:
    """meas_flipT, meas_crop, meas_pad, meas_resample as data.transform."""
    npix = int(p.get("init_params.meas_Npix"))
    up, left, transpose = [bool(v) for v in (p.take("init_params.meas_flipT") or [0, 0, 0])]
    if transpose:
        out.set("data.transform.transpose", True)
    if (left if transpose else up):
        out.set("data.transform.flip_y", True)
    if (up if transpose else left):
        out.set("data.transform.flip_x", True)
    crop = p.take("init_params.meas_crop")
    if crop is not None:
        if crop[0] is not None or crop[1] is not None:
            out.unmapped.append(("init_params.meas_crop", crop[:2], REASONS["scan_crop"]))
        rows, cols = crop[2] or [0, npix], crop[3] or [0, npix]
        if transpose:
            rows, cols = cols, rows
        if up:
            rows = [npix - rows[1], npix - rows[0]]
        if left:
            cols = [npix - cols[1], npix - cols[0]]
        if rows[1] - rows[0] != cols[1] - cols[0]:
            out.unmapped.append(("init_params.meas_crop", crop[2:], "ptyacc crops square patterns only"))
        elif rows[1] - rows[0] != npix:
            out.set("data.transform.crop", rows[1] - rows[0])
            out.set("data.transform.crop_offset", [rows[0], cols[0]])
    binning = _binning(p, out)
    pad = p.take("init_params.meas_pad")
    if pad is not None and pad.get("mode") is not None:
        out.set("data.transform.pad", int(pad.get("target_Npix", 256)) // binning)
        out.notes.append(f"data.transform.pad from init_params.meas_pad (PtyRAD fills the border with a fitted "
                         f"'{pad.get('padding_type', 'power')}' background; ptyacc leaves it out of the loss)")


def _binning(p: Params, out: Conversion) -> int:
    resample = p.take("init_params.meas_resample")
    if resample is None or resample.get("mode") is None:
        return 1
    factor = float(resample.get("scale_factors", [2, 2])[0])
    binning = round(1 / factor) if factor < 1 else 0
    if binning < 2 or abs(binning * factor - 1) > 1e-9:
        out.unmapped.append(("init_params.meas_resample", resample, "ptyacc bins by whole pixels only (scale 1/n)"))
        return 1
    out.set("data.transform.bin", binning)
    out.notes.append(f"data.transform.bin from init_params.meas_resample scale {factor:g} (ptyacc sums pixel blocks)")
    return binning


def _scan(p: Params, out: Conversion) -> None:
    step = float(p.need("init_params.pos_scan_step_size"))
    rotation = 0.0
    affine = p.take("init_params.pos_scan_affine")
    if affine is not None:
        scale, asymmetry, angle, shear = affine
        step, rotation = step * scale, -float(angle)
        if asymmetry or shear:
            out.unmapped.append(("init_params.pos_scan_affine", affine, "ptyacc's raster has a scale and a rotation; "
                                 "asymmetry and shear can be refined (optim.start.scan_affine), not given"))
    flips = [bool(v) for v in (p.take("init_params.pos_scan_flipT") or [0, 0, 0])]
    if flips == [True, True, False]:
        rotation += 180.0
    elif any(flips):
        out.unmapped.append(("init_params.pos_scan_flipT", flips, "ptyacc's raster rotates; a mirrored or "
                             "transposed scan needs its positions in a file (experiment.positions)"))
    out.set("experiment.scan_step_A", step)
    if rotation:
        out.set("experiment.scan_rotation_deg", (rotation + 180.0) % 360.0 - 180.0)
    jitter = p.take("init_params.pos_scan_rand_std")
    if jitter:
        out.unmapped.append(("init_params.pos_scan_rand_std", jitter, REASONS["pos_scan_rand_std"]))
    _sources(p, out)


def _sources(p: Params, out: Conversion) -> None:
    """pos/obj/probe sources: one previous reconstruction for all three is model.init_from."""
    sources = {name: (p.take(f"init_params.{name}_source"), p.take(f"init_params.{name}_params"))
               for name in ("pos", "obj", "probe")}
    files = {name: params for name, (source, params) in sources.items() if source in ("PtyRAD", "PtyShv", "py4DSTEM")}
    if files and len(files) == 3 and len(set(map(str, files.values()))) == 1:
        out.set("model.init_from", str(Path(os.path.abspath(files["obj"]))))
        return
    for name, (source, params) in sources.items():
        default = {"pos": "simu", "obj": "simu", "probe": "simu"}[name]
        if source != default:
            out.unmapped.append((f"init_params.{name}_source", f"{source} {params}", REASONS["sources"]))


def _model(p: Params, out: Conversion) -> None:
    modes = int(p.take("init_params.probe_pmode_max"))
    out.set("model.probe_modes", modes)
    powers = p.take("init_params.probe_pmode_init_pows")
    if modes > 1:
        further = powers if len(powers) == 1 else powers[1:]
        if len(set(further)) == 1 and further[0] * (modes - 1) < 1:
            out.set("model.probe_mode_power", float(further[0]))
        else:
            out.unmapped.append(("init_params.probe_pmode_init_pows", powers, "ptyacc starts every further mode "
                                 "with the same power (model.probe_mode_power)"))
    out.set("model.object_modes", int(p.take("init_params.obj_omode_max")))
    occupancy = p.take("init_params.obj_omode_init_occu")
    if occupancy and occupancy.get("occu_type", "uniform") != "uniform":
        out.unmapped.append(("init_params.obj_omode_init_occu", occupancy, "ptyacc's object modes are equal"))
    out.set("model.slices", int(p.need("init_params.obj_Nlayer")))
    blur = p.take("model_params.detector_blur_std")  # PtyRAD's Gaussian blur of the model's patterns, std in px
    if blur:
        out.set("model.detector_blur_px", float(blur))
    out.set("model.slice_thickness_A", float(p.need("init_params.obj_slice_thickness")))
    tilts = p.take("init_params.tilt_params")
    source = p.take("init_params.tilt_source")
    if source == "simu" and isinstance(tilts, dict):
        init = tilts.get("init_tilts") or [[0.0, 0.0]]
        if tilts.get("tilt_type", "all") == "each" and len(init) > 1:
            out.set("model.tilt", "per_position")
            out.unmapped.append(("init_params.tilt_params.init_tilts", "(one per position)",
                                 "ptyacc starts every position from one tilt (the first one's)"))
        if any(init[0]):
            out.set("experiment.tilt_mrad", [-float(init[0][0]), -float(init[0][1])])
            out.notes.append("experiment.tilt_mrad = -init_params.tilt_params.init_tilts (PtyRAD's tilt moves the "
                             "wave the other way)")
    elif source != "simu":
        out.unmapped.append(("init_params.tilt_source", f"{source} {tilts}", REASONS["sources"]))


# PtyRAD's update_params name: ptyacc's optim.lr / optim.start name, and the factor from PtyRAD's lr
UPDATES = {"probe_pos_shifts": "positions", "obj_tilts": "tilt", "slice_thickness": "slice_thickness"}


def _updates(p: Params, out: Conversion, adam_steps: bool) -> None:
    """update_params: start iterations (0-based) and the learning rates that share units."""
    updates = p.take("model_params.update_params")
    first = {name: (None if not spec.get("lr") or spec.get("start_iter") is None else int(spec["start_iter"]) - 1)
             for name, spec in updates.items()}
    starts = [s for s in (first.get("obja"), first.get("objp")) if s is not None]
    out.set("optim.start.object", min(starts) if starts else None)
    if (first.get("obja") is None) != (first.get("objp") is None):
        frozen = "obja" if first.get("obja") is None else "objp"
        out.unmapped.append((f"model_params.update_params.{frozen}", updates[frozen],
                             "ptyacc updates the object's amplitude and phase together"))
    out.set("optim.start.probe", first.get("probe"))
    for name, key in UPDATES.items():
        out.set(f"optim.start.{key}", first.get(name))
        if first.get(name) is not None:
            lr = float(updates[name]["lr"])
            out.set(f"optim.lr.{key}", lr / float(p.get("init_params.obj_slice_thickness")) if key == "slice_thickness" else lr)
    for name, spec in updates.items():
        if spec.get("end_iter") is not None and first.get(name) is not None:
            out.unmapped.append((f"model_params.update_params.{name}.end_iter", spec["end_iter"],
                                 "ptyacc updates each quantity until the last iteration"))
    for name, key in (("objp", "object"), ("probe", "probe")):
        if first.get(name) is None:
            continue
        if adam_steps:
            out.set(f"optim.{key}_optimizer", "adam")
            out.set(f"optim.lr.{key}", float(updates[name]["lr"]))
        else:
            out.unmapped.append((f"model_params.update_params.{name}.lr", updates[name]["lr"], REASONS["adam_lr"]))
    optimizer = p.take("model_params.optimizer_params")
    if optimizer.get("name", "Adam") != "Adam" or optimizer.get("configs") or optimizer.get("load_state"):
        out.unmapped.append(("model_params.optimizer_params", optimizer, "ptyacc uses Adam (optim.adam_beta2) or "
                             "the preconditioned step (optim.object_optimizer)"))


def _loss_and_constraints(p: Params, out: Conversion) -> None:
    single, poisson = p.take("loss_params.loss_single"), p.take("loss_params.loss_poissn")
    if poisson.get("state") and not single.get("state"):
        out.set("optim.loss", "poisson")
    elif single.get("state"):
        out.set("optim.loss", "amplitude")
        out.notes.append("optim.loss: amplitude, PtyRAD's loss_single; ptyacc's default (auto) takes poisson for "
                         "counted patterns, better at low dose (docs/how-to/coming-from-other-packages.md)")
        if single.get("dp_pow", 0.5) != 0.5:
            out.unmapped.append(("loss_params.loss_single.dp_pow", single["dp_pow"], "ptyacc's amplitude loss is on "
                                 "sqrt(I) (dp_pow 0.5)"))
        if poisson.get("state"):
            out.unmapped.append(("loss_params.loss_poissn", poisson, "ptyacc fits one loss (optim.loss)"))
    for name in ("loss_pacbed", "loss_sparse", "loss_simlar"):
        term = p.take(f"loss_params.{name}")
        if term.get("state"):
            out.unmapped.append((f"loss_params.{name}", term, "no ptyacc counterpart"))
    constraints = p.take("constraint_params")
    active = {name: spec for name, spec in constraints.items() if isinstance(spec, dict) and spec.get("start_iter") is not None}
    out.set("model.orthogonalize_probe", "ortho_pmode" in active)
    slices = out.get("model.slices")
    for name, key in (("obj_rblur", "lateral_blur_px"), ("obj_zblur", "depth_blur_slices")):
        spec = active.pop(name, None)
        if spec is None or not spec.get("std") or (key == "depth_blur_slices" and slices == 1):
            out.set(f"optim.regularize.{key}", 0.0)
            continue
        out.set(f"optim.regularize.{key}", float(spec["std"]))
        extra = {k: v for k, v in spec.items() if (k, v) not in (("start_iter", 1), ("step", 1), ("end_iter", None),
                                                                  ("obj_type", "both"), ("std", spec["std"]))}
        if extra:
            out.unmapped.append((f"constraint_params.{name}", extra, f"optim.regularize.{key} blurs amplitude and "
                                 "phase every iteration from the first, to 4 sigma"))
    _constraints_with_counterparts(active, int(p.get("init_params.meas_Npix")), out)
    for name, spec in active.items():
        out.unmapped.append((f"constraint_params.{name}", spec, REASONS.get(name, "no ptyacc counterpart")))


def _constraints_with_counterparts(active: dict[str, dict], npix: int, out: Conversion) -> None:
    active.pop("ortho_pmode", None)
    thresh = active.get("obja_thresh")
    if thresh is not None and not thresh.get("relax"):
        out.set("model.object_amplitude_bounds", [float(v) for v in thresh.get("thresh", [0.98, 1.02])])
        active.pop("obja_thresh")
    if active.pop("obj_z_recenter", None) is not None:
        out.set("model.recenter.object_z", True)
    mask, grid = active.get("probe_mask_k"), _final_grid(npix, out)
    if mask is not None and grid is not None:
        k_max = grid[0] * grid[1] / 2
        lam = wavelength_A(out.get("experiment.energy_eV"))
        out.set("model.recenter.probe_mask_mrad", float(mask.get("radius", 0.22)) * k_max * lam * 1e3)
        out.notes.append("model.recenter.probe_mask_mrad = constraint_params.probe_mask_k.radius x kMax x lambda")
        active.pop("probe_mask_k")


def _final_grid(npix: int, out: Conversion) -> tuple[int, float] | None:
    """(K, dk in 1/Å) of the patterns after crop, bin and pad, for electrons of known calibration."""
    dk, dx = out.get("experiment.dk_invA"), out.get("experiment.dx_A")
    if out.get("experiment.radiation") != "electron" or not (dk or dx):
        return None
    transform = out.get("data.transform", {})
    binning = transform.get("bin", 1)
    final = transform.get("pad") or (transform.get("crop") or npix) // binning
    return final, (dk or 1 / (npix * dx)) * binning


def _recon(p: Params, out: Conversion) -> None:
    out.set("optim.iterations", int(p.take("recon_params.NITER")))
    batch = p.take("recon_params.BATCH_SIZE")
    out.set("optim.batch_size", int(batch.get("size", 32)) * int(batch.get("grad_accumulation", 1)))
    if batch.get("grad_accumulation", 1) != 1:
        out.notes.append("optim.batch_size = BATCH_SIZE.size x grad_accumulation (one step per accumulated batch)")
    group = p.take("recon_params.GROUP_MODE")
    out.set("optim.grouping", "compact" if group in ("compact", "hilbert") else "random")
    if group in ("sparse", "fps"):
        out.unmapped.append(("recon_params.GROUP_MODE", group, "ptyacc groups random or compact batches"))
    indices = p.take("recon_params.INDICES_MODE")
    if indices.get("mode", "full") != "full":
        out.unmapped.append(("recon_params.INDICES_MODE", indices, REASONS["scan_crop"]))
    out.set("output.dir", str(p.take("recon_params.output_dir")))
    out.set("output.save_every", int(p.take("recon_params.SAVE_ITERS") or 0))
    compiler = p.take("recon_params.compiler_configs") or {}
    if compiler.get("enable"):
        out.set("runtime.compile", True)


def _object_padding(p: Params, out: Conversion) -> None:
    """model.object_padding_px so that ptyacc's object is as large as PtyRAD's canvas (1.2 times
    the scanned field plus a window) for a raster of known pixel size."""
    grid = _final_grid(int(p.get("init_params.meas_Npix")), out)
    if grid is None:
        return
    final, dx = grid[0], 1 / (grid[0] * grid[1])
    spans = [(n - 1) * out.get("experiment.scan_step_A") / dx for n in out.get("data.scan_shape")]
    canvas = [int(1.2 * math.ceil(span + final)) for span in spans]
    ptyacc = [math.ceil(span) + final + 2 for span in spans]
    padding = max(0, max(math.ceil((c - a) / 2) for c, a in zip(canvas, ptyacc)))
    if padding:
        out.set("model.object_padding_px", padding)
        out.notes.append("model.object_padding_px: PtyRAD's canvas is 1.2 x (scanned field + window)")
