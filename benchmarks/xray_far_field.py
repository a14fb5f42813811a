"""X-ray far-field ptychography from an independent NumPy simulator, through ``ptyacc init`` and ``ptyacc run``.

The simulator shares nothing with ptyacc's model: a zone plate's focus described by its far field (an annulus: the
central stop inside, the zone plate's edge outside), the sample a few millimetres downstream of the focus (Fresnel
propagation, exp(-i pi lambda z k^2)), a gold test pattern (phase -2 pi delta t / lambda, amplitude exp(-2 pi beta t /
lambda)), a Fermat spiral of stage positions, |fft2|^2 on a 128-pixel detector 5 m away, Poisson photon counts, and
the detector read out transposed or flipped against the stage (the eight orientations), and with ``--turned`` the
stage's axes turned against the detector's (``stage_deg``: the stored translations are the positions in the
detector's frame turned by -stage_deg about their mean). Written as CXI, as a beamline
writes it: the sample's translations in metres, the energy in joules, the detector's distance and pixel, with the
true phase beside it (``ground_truth/phase``, pixel [i, j] at (i, j) dx in the frame of ``ground_truth/positions_A``).

    # 1. the files (NumPy only)
    python benchmarks/xray_far_field.py make --work /tmp/xff
    # 2. init + run on each, scored against the truth; --variants: init (the config init writes), told (the
    #    detector's true orientation and the sample's true place against the focus given), truth (the orientation
    #    alone), conjugate (the truth's flags with flip_y and flip_x both reversed)
    python benchmarks/xray_far_field.py run --work /tmp/xff [--cases NAME ...] [--set KEY=VALUE ...]
    # a random draw (every read-out, the sample up- or downstream, 1e5-1e8 photons, gold or a weak absorber),
    # with a verdict per file: pass (init within 0.02 of told), said (the conjugate, and the warning that says so),
    # warned, silent
    OMP_NUM_THREADS=1 python benchmarks/xray_far_field.py run --work /tmp/xff --draw 24 1 --jobs 2
    # the same with the stage turned against the detector: by up to 5 degrees on half the files, any angle on the rest
    OMP_NUM_THREADS=1 python benchmarks/xray_far_field.py run --work /tmp/xft --draw 16 4 --turned --jobs 2
    # read by a detector of modules: gaps and a beamstop flagged in the file's mask, hot and dead pixels not, the
    # beam's centre up to 3 px from the middle pixel
    OMP_NUM_THREADS=1 python benchmarks/xray_far_field.py run --work /tmp/xfm --draw 16 6 --detector --jobs 2
    # with the detector's basis vectors stored (the flags given by the file, the turn still measured)
    OMP_NUM_THREADS=1 python benchmarks/xray_far_field.py run --work /tmp/xfb --draw 16 8 --turned --basis --jobs 2
    # weak absorbers upstream of the focus at few photons (where the centre of mass may not tell the handedness)
    OMP_NUM_THREADS=1 python benchmarks/xray_far_field.py run --work /tmp/xfw --draw 16 12 --turned --detector --weak --jobs 2

Prints one JSON line per run: the phase NCC at the reconstruction's exact place, the final deviance per counted
pixel, the correlation of the object's phase with its log amplitude, the orientation the run measured and every
``warning:`` line of run.log.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ENERGY_EV = 8000.0
WAVELENGTH_M = 12398.419843320026 / ENERGY_EV * 1e-10  # hc / E: 1.5498 Å at 8 keV
DISTANCE_M = 5.0
PIXEL_M = 75e-6
K = 128
PAD = 8  # object pixels beyond each side of a window, for its sub-pixel shift (``window_at``)
DX_M = WAVELENGTH_M * DISTANCE_M / (K * PIXEL_M)  # 80.7 nm
GOLD_DELTA, GOLD_BETA = 4.7e-5, 4.9e-6  # gold at 8 keV
FILM_M = 300e-9  # ``--film``: the film's thickness, the test pattern's features its holes (100-300 nm deep)
PASS_MARGIN = 0.02  # init passes within this of the run told the truth
ORIENTATIONS = [(t, fy, fx) for t in (False, True) for fy in (False, True) for fx in (False, True)]
# name: (photons per pattern, positions, spiral step px, defocus mm, orientation index, seed[, beta scale[, stage's
# turn deg[, read by a detector of modules[, basis vectors stored[, a film with holes]]]]])
CASES = {
    "xff_id_1e7": (1e7, 200, 5.0, 2.8, 0, 1),
    "xff_fx_1e7": (1e7, 200, 5.0, 2.8, 1, 2),
    "xff_t_1e7": (1e7, 200, 5.0, 2.8, 4, 3),
    "xff_tfyfx_1e6": (1e6, 200, 5.0, 2.8, 7, 4),
    "xff_fy_1e8": (1e8, 200, 5.0, 2.8, 2, 5),
    "xff_tfy_1e6": (1e6, 200, 5.0, -2.8, 6, 6),
}


def probe(defocus_m: float, outer_px: float = 24.0, inner_px: float = 10.0) -> np.ndarray:
    """The zone plate's beam at the sample, ``defocus_m`` past its focus: the far field an annulus (its edges
    a pixel soft), propagated by exp(-i pi lambda z k^2); total intensity 1."""
    k = np.fft.fftshift(np.fft.fftfreq(K, DX_M))
    ky, kx = np.meshgrid(k, k, indexing="ij")
    r_px = np.hypot(ky, kx) * K * DX_M
    aperture = np.clip(outer_px + 0.5 - r_px, 0, 1) * np.clip(r_px - inner_px + 0.5, 0, 1)
    field = aperture * np.exp(-1j * np.pi * WAVELENGTH_M * defocus_m * (ky ** 2 + kx ** 2))
    wave = np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(field)))
    return wave / np.sqrt((np.abs(wave) ** 2).sum())


def gold_pattern(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Gold thickness (m) of a lithographic test pattern: discs, bars and a ring, 100-300 nm thick, edges smoothed
    over about a pixel."""
    h, w = shape
    y, x = np.mgrid[:h, :w].astype(float)
    t = np.zeros(shape)
    for _ in range(int(h * w / 900)):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(2, 9)
        t = np.maximum(t, np.clip(r - np.hypot(y - cy, x - cx), 0, 1) * rng.uniform(100e-9, 300e-9))
    for _ in range(int(h * w / 3000)):
        cy, cx, angle = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(0, np.pi)
        along = (y - cy) * np.sin(angle) + (x - cx) * np.cos(angle)
        across = -(y - cy) * np.cos(angle) + (x - cx) * np.sin(angle)
        bar = np.clip(2.0 - np.abs(across), 0, 1) * (np.abs(along) < rng.uniform(10, 30))
        t = np.maximum(t, bar * rng.uniform(100e-9, 300e-9))
    f = np.fft.fft2(t)
    fy, fx = np.meshgrid(np.fft.fftfreq(h), np.fft.fftfreq(w), indexing="ij")
    return np.real(np.fft.ifft2(f * np.exp(-2 * (np.pi * 0.6) ** 2 * (fy ** 2 + fx ** 2))))


def spiral(n: int, step_px: float) -> np.ndarray:
    """A Fermat spiral of ``n`` points ``step_px`` apart on average (y, x) px about 0."""
    i = np.arange(n) + 0.5
    r, angle = step_px * np.sqrt(i), i * math.radians(137.50776405)
    return np.stack([r * np.sin(angle), r * np.cos(angle)], axis=1)


def draw(count: int, seed: int, turned: bool = False, detector: bool = False, basis: bool = False,
         weak: bool = False, photons: tuple[float, float] = (5.0, 6.3), film: bool = False) -> list[str]:
    """``count`` cases drawn into CASES (``xd<seed>-<i>``): each of the eight read-outs in turn, the sample 1.5-4 mm
    downstream or upstream of the focus, 1e5-1e8 photons per pattern, 150-300 positions 4-6 px apart, gold or a
    weak absorber (beta / delta 0.005, as carbon or a polymer at such energies). ``turned`` (names
    ``xdt<seed>-<i>``): the same cases with the stage turned against the detector, within 5 degrees on the even ones
    and by any angle on the odd (a generator of its own, so the rest of the draw is unchanged). ``detector`` (names
    ``xd[t]m<seed>-<i>``): the same cases read by a pixel detector as a beamline's is (``read_out``). ``basis``
    (names ``xd[t][m]b<seed>-<i>``): the same cases with the detector's true basis vectors stored (``basis_vectors``),
    so that the file gives the read-out's transpose and flips. ``weak`` (names ``xd[t][m][b]w<seed>-<i>``): every
    file a weak absorber upstream of the focus at 10^photons[0]-10^photons[1] photons per pattern (1e5-2e6 unless
    told), the kind whose centre of mass may not tell the handedness (a generator of its own for the photons).
    ``film`` (names ``xd...f<seed>-<i>``): the sample a film FILM_M thick whose holes are the test pattern's features,
    the one kind of sample whose phase departs from its background forward."""
    rng = np.random.default_rng(seed)
    few = np.random.default_rng([seed, 17])
    turns = np.random.default_rng([seed, 7])
    names = []
    for i in range(count):
        letters = "".join(letter for letter, asked in zip("tmbwf", (turned, detector, basis, weak, film)) if asked)
        name = f"xd{letters}{seed}-{i:02d}"
        sign = rng.choice((-1.0, 1.0))
        CASES[name] = (float(10 ** rng.uniform(5, 8)), int(rng.integers(150, 301)), float(rng.uniform(4, 6)),
                       float(sign * rng.uniform(1.5, 4.0)), i % 8, seed * 1000 + i, float(rng.choice((1.0, 0.05))))
        if weak:
            _, n, step, defocus_mm, orientation, case_seed, _ = CASES[name]
            CASES[name] = (float(10 ** few.uniform(*photons)), n, step, -abs(defocus_mm), orientation, case_seed, 0.05)
        stage_deg = float(turns.uniform(-5, 5) if i % 2 == 0 else turns.uniform(-180, 180)) if turned else 0.0
        CASES[name] += (stage_deg, detector, basis, film)
        names.append(name)
    return names


def window_at(obj: np.ndarray, corner: np.ndarray, size: int = K, pad: int = PAD) -> np.ndarray:
    """The ``size`` x ``size`` window of ``obj`` whose pixel [0, 0] lies at the sub-pixel place ``corner`` (y, x) of
    ``obj``'s pixels: window[i, j] = obj(corner + (i, j)), the fraction moved in Fourier space over a window ``pad``
    pixels wider on each side (so that the shift's wrap-around stays outside it). Both simulators' windows."""
    start = np.floor(corner).astype(int)
    fraction = np.asarray(corner, dtype=float) - start
    y0, x0 = start - pad
    wide = obj[y0:y0 + size + 2 * pad, x0:x0 + size + 2 * pad]
    f = np.fft.fftfreq(size + 2 * pad)
    # multiplying by exp(+2 pi i f s) moves the content by -s: w[m] = obj(start + m + s)
    ramp = np.exp(2j * np.pi * (f[:, None] * fraction[0] + f[None, :] * fraction[1]))
    return np.fft.ifft2(np.fft.fft2(wide) * ramp)[pad:pad + size, pad:pad + size]


def stage_turned(positions_m: np.ndarray, stage_deg: float) -> np.ndarray:
    """Positions (y, x) in the detector's frame as a stage turned by ``stage_deg`` against it reads them: turned by
    -stage_deg about their mean, so that ptyacc's ``experiment.scan_rotation_deg: stage_deg`` turns them back."""
    c, s = math.cos(math.radians(stage_deg)), math.sin(math.radians(stage_deg))
    centre = positions_m.mean(0)
    y, x = (positions_m - centre).T
    return centre + np.stack([y * c - x * s, x * c + y * s], axis=1)


def basis_vectors(pixel_m: float, orientation: int) -> np.ndarray:
    """The stored detector axes (3, 2) (column i: array axis i as lab (x, y, z), m) of the read-out ``orientation``:
    the model's rows run along lab +y (-y when flip_y), its columns along +x (-x when flip_x), and the stored
    axes are those transposed when transpose (the convention of the PETRA III file: -y, -x for both flips)."""
    t, flip_y, flip_x = ORIENTATIONS[orientation]
    rows = np.array([0.0, -pixel_m if flip_y else pixel_m, 0.0])
    cols = np.array([-pixel_m if flip_x else pixel_m, 0.0, 0.0])
    return np.stack([cols, rows] if t else [rows, cols], axis=1)


def beam_offset_px(seed: int) -> np.ndarray:
    """(y, x) px of the beam's centre from the detector's middle pixel [K/2, K/2] on a detector of modules
    (``--detector``): anywhere within 3 px either way, as a detector placed by hand leaves it (a beam tilted against
    the detector's axis: its probe carries the phase ramp that moves its far field so far)."""
    return np.random.default_rng([seed, 13]).uniform(-3.0, 3.0, 2)


def read_out(patterns: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """``patterns`` (n, K, K; the beam's centre at [K/2, K/2] + ``beam_offset_px``) as a pixel detector of modules
    reads them: a row and a column of module gaps (2-6 px wide, anywhere but the middle 16 px) and, on half the files,
    a beamstop over the direct beam (radius 2-5 px), all reading 0 and flagged in the detector's mask; and, not
    flagged, 4 hot pixels (stuck at half the brightest mean pixel) and 6 dead ones (0) where the mask says good. The
    patterns, the mask (K, K; True = bad) and what was drawn (ground_truth's attributes)."""
    rng = np.random.default_rng([seed, 11])
    bad = np.zeros((K, K), bool)
    drawn = {}
    for axis in (0, 1):
        width = int(rng.integers(2, 7))
        start = int(rng.choice(np.r_[8:K // 2 - 8 - width, K // 2 + 8:K - 8 - width]))
        if axis == 0:
            bad[start:start + width] = True
        else:
            bad[:, start:start + width] = True
        drawn["gap_rows" if axis == 0 else "gap_columns"] = (start, width)
    if rng.random() < 0.5:
        radius = float(rng.uniform(2, 5))
        yy, xx = np.mgrid[:K, :K] - K // 2 - beam_offset_px(seed)[:, None, None]
        bad |= np.hypot(yy, xx) <= radius
        drawn["beamstop_px"] = radius
    read = patterns.copy()
    read[:, bad] = 0
    rows, cols = np.unravel_index(rng.choice(np.flatnonzero(~bad), 10, replace=False), (K, K))
    read[:, rows[:4], cols[:4]] = 0.5 * patterns.mean(0).max()  # hot
    read[:, rows[4:], cols[4:]] = 0  # dead
    drawn.update(hot=np.stack([rows[:4], cols[:4]], 1), dead=np.stack([rows[4:], cols[4:]], 1))
    return read, bad, drawn


def make(work: Path, name: str) -> Path:
    photons, n, step_px, defocus_mm, orientation, seed, *rest = CASES[name]
    beta_scale = rest[0] if rest else 1.0
    stage = math.radians(rest[1] if len(rest) > 1 else 0.0)
    detector, basis, film = len(rest) > 2 and rest[2], len(rest) > 3 and rest[3], len(rest) > 4 and rest[4]
    path = work / f"{name}.cxi"
    if path.is_file():
        return path
    rng = np.random.default_rng(seed)
    centres = spiral(n, step_px)
    margin = K // 2 + PAD + 4
    offset = -centres.min(0) + margin
    shape = tuple(int(v) for v in np.ceil(centres.max(0) + offset + margin))
    thickness = gold_pattern(shape, rng)
    if film:  # the pattern's features are holes in a film: the phase departs from its background forward
        thickness = np.clip(FILM_M - thickness, 0.0, None)
    phase = -2 * np.pi * GOLD_DELTA * thickness / WAVELENGTH_M
    obj = np.exp(1j * phase - 2 * np.pi * beta_scale * GOLD_BETA * thickness / WAVELENGTH_M)
    beam = probe(defocus_mm * 1e-3)
    if detector:  # the beam's centre off the detector's middle pixel: the probe's phase ramp moves the far field
        axis = beam_offset_px(seed)
        y, x = np.mgrid[:K, :K]
        beam = beam * np.exp(2j * np.pi * (axis[0] * y + axis[1] * x) / K)
    patterns = np.empty((n, K, K), np.float32)
    for j, centre in enumerate(centres + offset):
        far = np.fft.fftshift(np.fft.fft2(beam * window_at(obj, centre - K // 2)))
        patterns[j] = rng.poisson(photons * np.abs(far) ** 2 / (K * K))
    bad, drawn = None, {}
    if detector:
        patterns, bad, drawn = read_out(patterns, seed)
        drawn["beam_offset_px"] = beam_offset_px(seed)
    # the detector's read-out: what data.transform's transpose, then flip_y, then flip_x undo
    t, flip_y, flip_x = ORIENTATIONS[orientation]
    stored = patterns[:, :, ::-1] if flip_x else patterns
    stored = stored[:, ::-1] if flip_y else stored
    stored = stored.transpose(0, 2, 1) if t else stored
    if bad is not None:
        bad = bad[:, ::-1] if flip_x else bad
        bad = bad[::-1] if flip_y else bad
        bad = bad.T if t else bad
    # window [0, 0] of position j sits at (cy, cx) - K/2 in the object's pixels, so pixel [i, j] is at
    # (i, j) dx in the frame whose positions are (centres + offset) dx
    positions_m = (centres + offset) * DX_M
    stored_m = stage_turned(positions_m, math.degrees(stage))
    work.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f["entry_1/instrument_1/detector_1/data"] = np.ascontiguousarray(stored).astype(np.uint32)
        f["entry_1/instrument_1/detector_1/distance"] = DISTANCE_M
        f["entry_1/instrument_1/detector_1/x_pixel_size"] = PIXEL_M
        f["entry_1/instrument_1/detector_1/y_pixel_size"] = PIXEL_M
        if basis:
            f["entry_1/instrument_1/detector_1/basis_vectors"] = basis_vectors(PIXEL_M, orientation)
        if bad is not None:  # CXI's pixel flags: 0 good, any bit set bad
            f["entry_1/instrument_1/detector_1/mask"] = np.ascontiguousarray(bad).astype(np.uint32)
        f["entry_1/instrument_1/source_1/energy"] = ENERGY_EV * 1.602176634e-19
        translation = np.zeros((n, 3))
        translation[:, 0], translation[:, 1] = -stored_m[:, 1], -stored_m[:, 0]  # the sample moves
        f["entry_1/sample_1/geometry_1/translation"] = translation
        f["ground_truth/phase"] = phase
        f["ground_truth/positions_A"] = positions_m * 1e10
        f["ground_truth"].attrs.update(orientation=list(ORIENTATIONS[orientation]), photons=photons,
                                       defocus_m=defocus_mm * 1e-3, beta_scale=beta_scale,
                                       stage_deg=math.degrees(stage), **drawn)
    return path


def initialised(work: Path, name: str, variant: str) -> tuple[Path, Path, Path, Path]:
    """``ptyacc init`` on ``name``'s file into its run folder: (the file, the folder, the config, the ptyacc
    executable)."""
    path = work / f"{name}.cxi"
    out = work / "runs" / f"{name}__{variant}"
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.yaml"
    exe = Path(sys.executable).parent / "ptyacc"
    subprocess.run([str(exe), "init", str(path), "-o", str(config), "--force"], check=True, capture_output=True, text=True)
    return path, out, config, exe


def run(work: Path, name: str, variant: str, overrides: list[str], iterations: str) -> dict:
    """``ptyacc init`` on the file, then ``ptyacc run`` with ``overrides`` (``truth``: the detector's true
    orientation given), scored at the reconstruction's exact place."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "calibration_matrix"))
    from matrix import score_run

    path, out, config, exe = initialised(work, name, variant)
    sets = iterations_set(iterations) + [f"output.dir={out}"] + list(overrides)
    if variant in ("truth", "conjugate", "told"):
        with h5py.File(path) as f:
            t, fy, fx = (bool(v) for v in f["ground_truth"].attrs["orientation"])
            defocus_m = float(f["ground_truth"].attrs["defocus_m"])
            stage_deg = float(f["ground_truth"].attrs.get("stage_deg", 0.0))
        flip = variant == "conjugate"
        sets += ["data.transform.orientation=manual", f"data.transform.transpose={t}",
                 f"data.transform.flip_y={fy != flip}", f"data.transform.flip_x={fx != flip}",
                 f"experiment.scan_rotation_deg={stage_deg}"]
        sets += [f"experiment.focus_to_sample_m={defocus_m}"] if variant == "told" else []
    command = [str(exe), "run", str(config), "--overwrite"] + [a for s in sets for a in ("--set", s)]
    done = subprocess.run(command, capture_output=True, text=True)
    log = (out / "run.log").read_text() if (out / "run.log").is_file() else done.stdout + done.stderr
    found = {"case": name, "variant": variant, "rc": done.returncode,
             "warnings": [line.strip() for line in log.splitlines() if "warning:" in line]}
    if done.returncode == 0:
        scored = score_run(out / "results.h5", path)
        with h5py.File(out / "results.h5") as f:
            attrs = dict(f.attrs)
        flags = {k: v for k, v in scored["auto_values"].items() if k.startswith("data.transform.")}
        found.update(ncc=round(scored["ncc"], 4), deviance=round(float(attrs.get("poisson_deviance", "nan")), 3),
                     phase_absorption=round(float(attrs.get("phase_absorption_correlation", "nan")), 3), flags=flags)
    else:
        found["tail"] = (done.stdout + done.stderr)[-2000:]
    return found


def verdict(init: dict, told: dict) -> str:
    """pass: init within PASS_MARGIN of told; said: the conjugate (its phase reversed within the margin) with the
    warning that says so; warned: below, with a warning; silent: below without one."""
    if init.get("ncc") is None or told.get("ncc") is None:
        return "error"
    if init["ncc"] >= told["ncc"] - PASS_MARGIN:
        return "pass"
    said = any("conjugate of the object" in w for w in init["warnings"])
    if said and -init["ncc"] >= told["ncc"] - PASS_MARGIN:
        return "said"
    return "warned" if init["warnings"] else "silent"


def iterations_set(iterations: str) -> list[str]:
    """The ``--set`` of ``--iterations``: none for ``written`` (init's own value stands)."""
    return [] if iterations == "written" else [f"optim.iterations={int(iterations)}"]


def arguments(description: str, argv: list[str] | None) -> argparse.Namespace:
    """The command line of this benchmark and of ``xray_near_field.py``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("step", choices=("make", "run"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--cases", nargs="*", default=None)
    parser.add_argument("--draw", nargs=2, type=int, metavar=("COUNT", "SEED"), help="cases drawn at random")
    parser.add_argument("--variants", nargs="*", default=["init", "told"])
    parser.add_argument("--iterations", default="30", help="a number for every run, or `written`: what init wrote")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--turned", action="store_true", help="a draw with the stage turned against the detector")
    parser.add_argument("--detector", action="store_true",
                        help="xray_far_field.py's draw read by a detector of modules: gaps, a beamstop, bad pixels")
    parser.add_argument("--basis", action="store_true",
                        help="xray_far_field.py's draw with the detector's true basis vectors stored")
    parser.add_argument("--weak", action="store_true",
                        help="xray_far_field.py's draw of weak absorbers upstream of the focus at few photons")
    parser.add_argument("--film", action="store_true",
                        help="xray_far_field.py's draw with the sample a film whose holes are the test pattern")
    parser.add_argument("--photons", nargs=2, type=float, default=(5.0, 6.3), metavar=("LOW", "HIGH"),
                        help="with --weak: photons per pattern drawn from 10^LOW to 10^HIGH (default 5 6.3)")
    return parser.parse_args(argv)


def ran(args: argparse.Namespace, names: list[str], make, run) -> dict[tuple[str, str], dict] | None:
    """``make`` each file of ``names``; for the run step, ``run`` each variant on ``args.jobs`` processes, one JSON
    line each as it ends: {(name, variant): result} (None for the make step, whose files are printed)."""
    if args.step == "make":
        for name in names:
            print(make(args.work, name))
        return None
    for name in names:
        make(args.work, name)
    jobs = [(args.work, name, variant, args.overrides, args.iterations) for name in names for variant in args.variants]
    found: dict[tuple[str, str], dict] = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for job, result in zip(jobs, pool.map(run, *zip(*jobs)), strict=True):
            print(json.dumps(result), flush=True)
            found[job[1], job[2]] = result
    return found


def main(argv: list[str] | None = None) -> None:
    args = arguments(__doc__.splitlines()[0], argv)
    names = (draw(*args.draw, turned=args.turned, detector=args.detector, basis=args.basis, weak=args.weak,
                  photons=tuple(args.photons), film=args.film) if args.draw
             else args.cases or list(CASES))
    names = [name for name in names if args.cases is None or name in args.cases]  # some of a draw
    found = ran(args, names, make, run)
    if found is not None and {"init", "told"} <= set(args.variants):
        verdicts = {name: verdict(found[name, "init"], found[name, "told"]) for name in names}
        for name in names:
            photons, n, _, defocus_mm, orientation, _, *beta = CASES[name]
            print(f"{name} {photons:.0e} photons, {n} positions, defocus {defocus_mm:+.2f} mm, "
                  f"read-out {ORIENTATIONS[orientation]}, beta x{beta[0] if beta else 1.0:g}: init "
                  f"{found[name, 'init'].get('ncc')} told {found[name, 'told'].get('ncc')} {verdicts[name]}")
        counts = {kind: list(verdicts.values()).count(kind) for kind in ("pass", "said", "warned", "silent", "error")}
        print(" ".join(f"{kind} {count}" for kind, count in counts.items()))


if __name__ == "__main__":
    main()
