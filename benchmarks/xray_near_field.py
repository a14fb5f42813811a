"""X-ray near-field ptychography from an independent NumPy simulator, through ``ptyacc init`` and ``ptyacc run``.

The simulator shares nothing with ptyacc's model. A cone beam from a focus lights the sample z1 downstream of the
focus; the detector stands z2 behind the sample. By the Fresnel scaling theorem the hologram is the plane-wave
propagation of the exit wave over z_eff = z2 / M at the sample pixel dx = p / M (M = (z1 + z2) / z1, p the
detector pixel). Here that propagation is the exact angular spectrum, exp(i 2 pi z (sqrt(1/lambda^2 - f^2) -
1/lambda)), on a grid twice as fine as the detector's (dx / 2) and 48 px wider on each side than the detector
(so light from beyond the window reaches it as it does in an experiment); the intensity is then integrated over
each detector pixel's 2 x 2 sub-pixels, and counted (Poisson). The beam is a diffuser's: a soft-edged disc 0.8-1.3
windows across times a smooth random phase screen, advanced a short distance so that it carries amplitude
structure. The object: gold Siemens stars, discs and bars (phase -2 pi delta t / lambda, amplitude exp(-2 pi beta t
/ lambda), delta = 4.7e-5 (8 keV / E)^2, beta = delta / 10), a weak absorber (beta x 0.05) or a pure phase object,
0.3-2 rad deep. The object window at each true position is taken at its sub-pixel place by a Fourier shift of the
object; the file may store nominal positions (true = stored + error). The detector is read out in one of the eight
orientations against the stage, and with ``--turned`` the stage's axes are turned against the detector's as well
(``stage_deg``: the stored translations are the positions in the detector's frame turned by -stage_deg about their
mean, so that ptyacc's ``experiment.scan_rotation_deg: stage_deg`` turns them back).

Written as CXI, as a beamline writes it: the patterns, the detector's distance z2 and pixel, the energy (J) and
wavelength (m), the sample's translations (m), on some files the detector's true basis vectors and a mask. The
focus-to-sample distance z1 is not in the CXI groups (CXI has no place for it); it is in ``ground_truth`` with the
true phase (pixel [i, j] at (i, j) dx in the frame of ``ground_truth/positions_A``, the stored positions), the
read-out and the rest of the truth.

    # 1. the files (NumPy only)
    python benchmarks/xray_near_field.py make --work /tmp/xnf
    # 2. init + run on each, scored against the truth; --variants: init (the config init writes), told (that config
    #    with the truth given: geometry near_field, the true focus_to_sample_m, the detector's true orientation)
    OMP_NUM_THREADS=1 python benchmarks/xray_near_field.py run --work /tmp/xnf [--cases NAME ...] [--set KEY=VALUE]
    # a random draw (every read-out, pixels 0.65-75 um, z2 0.3-5 m, z1 1-20 mm, 6-20 keV, pixel Fresnel number
    # 0.03-0.5, 1e2-1e4 counts per pixel), with a verdict per file: pass (init within 0.02 of told), warned (below,
    # with a warning in run.log), silent (below, without one), refused (init stopped with an error that says why)
    OMP_NUM_THREADS=1 python benchmarks/xray_near_field.py run --work /tmp/xnf --draw 8 1 --jobs 1
    # the same with the stage turned against the detector: by up to 5 degrees on half the files, any angle on the rest
    OMP_NUM_THREADS=1 python benchmarks/xray_near_field.py run --work /tmp/xnt --draw 8 4 --turned --jobs 1

Prints one JSON line per run: the phase NCC at the reconstruction's exact place (the translation between the run's
and the truth's positions removed), the final deviance per counted pixel, the geometry, focus_to_sample_m and
orientation the init config wrote and the run used, and every ``warning:`` line of run.log. A run whose object
pixel differs from the truth's (init reads near-field data as far field) is scored on the truth's pixels, its
phase interpolated (bilinear) at their places.
"""

from __future__ import annotations

import json
import math
import re
import resource
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from xray_far_field import (  # noqa: E402  (the far-field benchmark's)
    ORIENTATIONS,
    PASS_MARGIN,
    arguments,
    basis_vectors,
    initialised,
    iterations_set,
    ran,
    stage_turned,
    verdict,
    window_at,
)

ROOT = Path(__file__).resolve().parent.parent
HC_EV_M = 12398.419843320026e-10  # hc (eV m)
ELECTRON_VOLT_J = 1.602176634e-19
K = 128  # stored detector pixels
EDGE = 48  # detector pixels simulated beyond each side of the detector
FINE = 2  # sub-pixels per detector pixel along each axis
PAD = 16  # fine pixels of object beyond the window taken for its sub-pixel shift
FRESNEL_RANGE = (0.03, 0.5)  # the pixel Fresnel number dx^2 / (lambda z_eff) of the drawn geometries
EDGE_SIGMA_PX = 0.75  # the object's edges: a Gaussian of this sigma (detector pixels)
MEMORY_LIMIT_B = 10 * 2 ** 30  # address space of each ptyacc process: a far-field reading of these files can ask for more
SCAN_KINDS = ("raster", "spiral", "random")
OBJECT_KINDS = {"gold": 1.0, "weak": 0.05, "phase": 0.0}  # beta scale against gold's delta / 10
CASE_KEYS = ("energy_eV", "pixel_m", "z2_m", "z1_m", "counts", "positions", "step", "scan", "orientation", "basis",
             "mask", "error_px", "object", "phase_rad", "beam", "seed")
CASES: dict[str, dict] = {  # energy, pixel, z2, z1, mean counts per pixel, positions, step (share of the window),
    # scan, read-out (index into ORIENTATIONS), basis vectors stored, mask stored, position error rms (px),
    # object kind, deepest phase (rad), beam width (windows), seed
    "xnf_id_basis": dict(zip(CASE_KEYS, (10000.0, 75e-6, 2.0, 10e-3, 1e3, 150, 0.12, "spiral", 0, True, False, 0.0,
                                         "gold", 1.0, 0.9, 1))),
    "xnf_fx_nobasis": dict(zip(CASE_KEYS, (8000.0, 13e-6, 0.5, 15e-3, 1e3, 150, 0.15, "raster", 1, False, True, 0.2,
                                           "gold", 1.0, 1.0, 2))),
    "xnf_t": dict(zip(CASE_KEYS, (15000.0, 6.5e-6, 0.3, 20e-3, 1e3, 150, 0.12, "random", 4, False, False, 0.0,
                                  "weak", 1.0, 1.0, 3))),
    "xnf_low_counts": dict(zip(CASE_KEYS, (10000.0, 75e-6, 2.0, 10e-3, 1e2, 150, 0.12, "spiral", 2, True, True, 0.0,
                                           "gold", 1.0, 0.9, 4))),
    "xnf_petra": dict(zip(CASE_KEYS, (10000.0, 55e-6, 1.12, 3.65e-3, 1e3, 200, 0.15, "raster", 3, True, True, 0.3,
                                      "gold", 1.5, 1.0, 5))),
    # xnf_fx_nobasis's geometry with basis vectors and the stage's axes turned 62 degrees against the detector's
    "xnf_turned": {**dict(zip(CASE_KEYS, (8000.0, 13e-6, 0.5, 15e-3, 1e3, 150, 0.15, "raster", 1, True, True, 0.2,
                                          "gold", 1.0, 1.0, 6))), "stage_deg": 62.0},
}


def wavelength_m(energy_eV: float) -> float:
    return HC_EV_M / energy_eV


def geometry(case: dict) -> dict:
    """Magnification, object pixel, effective distance and pixel Fresnel number of ``case``."""
    z1, z2 = case["z1_m"], case["z2_m"]
    magnification = (z1 + z2) / z1
    dx, z_eff = case["pixel_m"] / magnification, z2 / magnification
    return {"magnification": magnification, "dx_m": dx, "z_eff_m": z_eff,
            "fresnel": dx ** 2 / (wavelength_m(case["energy_eV"]) * z_eff)}


def angular_spectrum(n: int, pixel_m: float, wavelength: float, distance_m: float) -> np.ndarray:
    """The exact transfer function (n, n), unshifted, of free space over ``distance_m``, without its constant
    phase 2 pi z / lambda: exp(i 2 pi z (sqrt(1/lambda^2 - f^2) - 1/lambda)), written so that it does not cancel."""
    f = np.fft.fftfreq(n, pixel_m)
    f2 = f[:, None] ** 2 + f[None, :] ** 2
    inverse = 1.0 / wavelength
    return np.exp(-2j * np.pi * distance_m * f2 / (np.sqrt(inverse ** 2 - f2) + inverse))


def propagate(field: np.ndarray, transfer: np.ndarray) -> np.ndarray:
    return np.fft.ifft2(np.fft.fft2(field) * transfer)


def smooth(image: np.ndarray, sigma_px: float) -> np.ndarray:
    """``image`` convolved (circularly) with a Gaussian of ``sigma_px``."""
    fy, fx = np.fft.fftfreq(image.shape[0]), np.fft.fftfreq(image.shape[1])
    gauss = np.exp(-2 * (np.pi * sigma_px) ** 2 * (fy[:, None] ** 2 + fx[None, :] ** 2))
    return np.real(np.fft.ifft2(np.fft.fft2(image) * gauss))


def beam(case: dict, rng: np.random.Generator) -> np.ndarray:
    """The diffuser's beam (N, N) at the sample on the fine simulation grid (N = FINE (K + 2 EDGE)), its
    sub-pixel m at (m / FINE - (K + 2 EDGE) / 2 - 1/4) detector pixels from the beam's centre (so that each
    detector pixel's sub-pixels average to its centre): a soft-edged disc ``case['beam']`` windows across, a smooth
    random phase screen (correlation 2-3.5 px, 2-3.5 rad rms: its steepest slopes stay under the detector's Nyquist
    frequency), advanced 0.3-1 z_eff."""
    g = geometry(case)
    n = FINE * (K + 2 * EDGE)
    r = np.arange(n) / FINE - (K + 2 * EDGE) / 2 - 0.25
    radius = np.hypot(r[:, None], r[None, :])
    envelope = 1.0 / (1.0 + np.exp((radius - case["beam"] * K / 2) / 3.0))
    screen = smooth(rng.standard_normal((n, n)), FINE * rng.uniform(2.0, 3.5))
    screen *= rng.uniform(2.0, 3.5) / screen.std()
    field = envelope * np.exp(1j * screen)
    distance = rng.uniform(0.3, 1.0) * g["z_eff_m"]
    return propagate(field, angular_spectrum(n, g["dx_m"] / FINE, wavelength_m(case["energy_eV"]), distance))


def thickness(shape: tuple[int, int], centres_px: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Relative thickness (0..1) on the fine grid (sub-pixel a at a / FINE detector pixels) of a lithographic test
    pattern: Siemens stars (16-36 spokes) about the scan, discs and bars, edges smoothed by EDGE_SIGMA_PX."""
    h, w = shape
    y, x = np.mgrid[:h, :w].astype(float) / FINE
    t = np.zeros(shape)
    low, high = centres_px.min(0), centres_px.max(0)
    for _ in range(rng.integers(1, 4)):
        cy, cx = rng.uniform(low, high + 1e-9)
        radius = rng.uniform(40, 110)
        spokes = int(rng.integers(8, 19)) * 2
        angle = np.arctan2(y - cy, x - cx)
        dist = np.hypot(y - cy, x - cx)
        star = (np.sin(spokes * angle) > 0) & (dist < radius) & (dist > 4)
        t = np.maximum(t, star * rng.uniform(0.6, 1.0))
    for _ in range(int(h * w / FINE ** 2 / 2500)):
        cy, cx, r = rng.uniform(0, h / FINE), rng.uniform(0, w / FINE), rng.uniform(3, 12)
        t = np.maximum(t, np.clip((r - np.hypot(y - cy, x - cx)) * FINE, 0, 1) * rng.uniform(0.3, 1.0))
    for _ in range(int(h * w / FINE ** 2 / 6000)):
        cy, cx, angle = rng.uniform(0, h / FINE), rng.uniform(0, w / FINE), rng.uniform(0, np.pi)
        along = (y - cy) * np.sin(angle) + (x - cx) * np.cos(angle)
        across = -(y - cy) * np.cos(angle) + (x - cx) * np.sin(angle)
        bar = (np.abs(across) < rng.uniform(1.5, 4)) * (np.abs(along) < rng.uniform(10, 40))
        t = np.maximum(t, bar * rng.uniform(0.3, 1.0))
    return np.clip(smooth(t, EDGE_SIGMA_PX * FINE), 0, None)


def scan(kind: str, n: int, step_px: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` positions (y, x) px about 0 whose median nearest-neighbour distance is ``step_px``."""
    if kind == "raster":
        side = math.ceil(math.sqrt(n))
        iy, ix = np.divmod(np.arange(n), side)
        points = np.stack([iy, ix], 1).astype(float) + rng.normal(0, 0.1, (n, 2))
    elif kind == "spiral":
        i = np.arange(n) + 0.5
        angle = i * math.radians(137.50776405)
        points = np.stack([np.sqrt(i) * np.sin(angle), np.sqrt(i) * np.cos(angle)], 1)
    else:  # random, no two closer than 0.6 of the spacing a square of that many points would have
        side = math.sqrt(n)
        points = np.zeros((0, 2))
        while len(points) < n:
            p = rng.uniform(0, side, 2)
            if len(points) == 0 or np.hypot(*(points - p).T).min() > 0.6:
                points = np.vstack([points, p])
    distance = np.hypot(*(points[:, None] - points[None]).transpose(2, 0, 1))
    np.fill_diagonal(distance, np.inf)
    points = points * step_px / np.median(distance.min(1))
    return points - points.mean(0)


def draw(count: int, seed: int, turned: bool = False) -> list[str]:
    """``count`` cases drawn into CASES (``xnd<seed>-<i>``): each of the eight read-outs in turn, basis vectors on
    about half, a mask on about half; pixel 0.65-75 um, z2 0.3-5 m, z1 1-20 mm (log-uniform), 6-20 keV, drawn
    until the pixel Fresnel number lies in FRESNEL_RANGE; 1e2-1e4 counts per pixel; 100-250 positions 5-25 % of
    the window apart; position errors 0-0.5 px rms on a third; gold, a weak absorber or a phase object. ``turned``
    (names ``xnt<seed>-<i>``): the same cases with the stage turned against the detector, within 5 degrees on the
    even ones and by any angle on the odd (a generator of its own, so the rest of the draw is unchanged)."""
    rng = np.random.default_rng(seed)
    turns = np.random.default_rng([seed, 7])
    names = []
    for i in range(count):
        while True:
            case = {"energy_eV": float(rng.uniform(6000, 20000)), "pixel_m": float(10 ** rng.uniform(np.log10(0.65e-6),
                                                                                                     np.log10(75e-6))),
                    "z2_m": float(10 ** rng.uniform(np.log10(0.3), np.log10(5.0))),
                    "z1_m": float(10 ** rng.uniform(-3, np.log10(20e-3)))}
            if FRESNEL_RANGE[0] <= geometry(case)["fresnel"] <= FRESNEL_RANGE[1]:
                break
        case.update(counts=float(10 ** rng.uniform(2, 4)), positions=int(rng.integers(100, 251)),
                    step=float(rng.uniform(0.05, 0.25)), scan=str(rng.choice(SCAN_KINDS)), orientation=i % 8,
                    basis=bool(rng.random() < 0.5), mask=bool(rng.random() < 0.5),
                    error_px=float(rng.uniform(0, 0.5)) if rng.random() < 1 / 3 else 0.0,
                    object=str(rng.choice(list(OBJECT_KINDS))), phase_rad=float(rng.uniform(0.3, 2.0)),
                    beam=float(rng.uniform(0.8, 1.3)), seed=seed * 1000 + i)
        if turned:
            case["stage_deg"] = float(turns.uniform(-5, 5) if i % 2 == 0 else turns.uniform(-180, 180))
        name = f"xn{'t' if turned else 'd'}{seed}-{i:02d}"
        CASES[name] = case
        names.append(name)
    return names


def make(work: Path, name: str) -> Path:
    case = CASES[name]
    path = work / f"{name}.cxi"
    if path.is_file():
        return path
    rng = np.random.default_rng(case["seed"])
    g = geometry(case)
    wavelength = wavelength_m(case["energy_eV"])
    nominal = scan(case["scan"], case["positions"], case["step"] * K, rng)
    true = nominal + rng.normal(0, case["error_px"], nominal.shape) if case["error_px"] else nominal
    span = K + 2 * EDGE  # detector pixels simulated about each position
    margin = span / 2 + PAD / FINE + 4
    offset = -np.minimum(true.min(0), nominal.min(0)) + margin
    shape_px = np.ceil(np.maximum(true.max(0), nominal.max(0)) + offset + margin).astype(int)
    t = thickness(tuple(int(v) * FINE for v in shape_px), true + offset, rng)
    delta = 4.7e-5 * (8000.0 / case["energy_eV"]) ** 2
    beta = delta / 10 * OBJECT_KINDS[case["object"]]
    t *= case["phase_rad"] * wavelength / (2 * np.pi * delta)  # metres: the deepest phase phase_rad
    phase_fine = -2 * np.pi * delta * t / wavelength
    obj = np.exp(1j * phase_fine - 2 * np.pi * beta * t / wavelength)
    probe = beam(case, rng)
    n = FINE * span
    transfer = angular_spectrum(n, g["dx_m"] / FINE, wavelength, g["z_eff_m"])
    intensities = np.empty((len(true), K, K))
    for j, centre in enumerate(true + offset):
        # sub-pixel m of the beam lies at centre - span/2 - 1/4 + m/FINE detector pixels, fine index FINE times that
        window = window_at(obj, FINE * (centre - span / 2 - 0.25), n, PAD)  # window[m] = obj(start + m)
        hologram = np.abs(propagate(probe * window, transfer)) ** 2
        binned = hologram.reshape(span, FINE, span, FINE).sum((1, 3))  # each detector pixel's sub-pixels
        intensities[j] = binned[EDGE:EDGE + K, EDGE:EDGE + K]
    patterns = rng.poisson(intensities * (case["counts"] / intensities.mean())).astype(np.uint32)
    good = np.ones((K, K), bool)
    if case["mask"]:
        good[rng.integers(0, K, 8), rng.integers(0, K, 8)] = False  # dead pixels
        gap = int(rng.integers(K // 4, 3 * K // 4))
        good[:, gap:gap + 2] = False  # a gap between modules
        patterns[:, ~good] = 0
    # the detector's read-out: what data.transform's transpose, then flip_y, then flip_x undo
    flags = ORIENTATIONS[case["orientation"]]
    stored, stored_good = patterns, good
    for axis, flip in ((-1, flags[2]), (-2, flags[1])):
        if flip:
            stored, stored_good = np.flip(stored, axis), np.flip(stored_good, axis)
    if flags[0]:
        stored, stored_good = stored.transpose(0, 2, 1), stored_good.T
    positions_m = (nominal + offset) * g["dx_m"]  # truth pixel [i, j] at (i, j) dx in this frame
    stored_m = stage_turned(positions_m, case.get("stage_deg", 0.0))
    work.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as h:
        detector = h.create_group("entry_1/instrument_1/detector_1")
        detector["data"] = np.ascontiguousarray(stored)
        detector["distance"] = case["z2_m"]
        detector["x_pixel_size"] = case["pixel_m"]
        detector["y_pixel_size"] = case["pixel_m"]
        if case["basis"]:
            detector["basis_vectors"] = basis_vectors(case["pixel_m"], case["orientation"])
        if case["mask"]:
            detector["mask"] = (~np.ascontiguousarray(stored_good)).astype(np.uint32)  # CXI: 0 = good
        h["entry_1/instrument_1/source_1/energy"] = case["energy_eV"] * ELECTRON_VOLT_J
        h["entry_1/instrument_1/source_1/wavelength"] = wavelength
        translation = np.zeros((len(nominal), 3))
        translation[:, 0], translation[:, 1] = -stored_m[:, 1], -stored_m[:, 0]  # the sample moves
        h["entry_1/sample_1/geometry_1/translation"] = translation
        h["ground_truth/phase"] = phase_fine[::FINE, ::FINE]
        h["ground_truth/positions_A"] = positions_m * 1e10
        h["ground_truth/true_positions_A"] = (true + offset) * g["dx_m"] * 1e10
        h["ground_truth/probe"] = probe[FINE * EDGE + 1:FINE * (EDGE + K):FINE, FINE * EDGE + 1:FINE * (EDGE + K):FINE]
        h["ground_truth"].attrs.update(orientation=list(flags), focus_to_sample_m=case["z1_m"], dx_m=g["dx_m"],
                                       stage_deg=case.get("stage_deg", 0.0),
                                       z_eff_m=g["z_eff_m"], magnification=g["magnification"],
                                       fresnel_number=g["fresnel"], description=describe(name),
                                       case=json.dumps(case))
    return path


def describe(name: str) -> str:
    case, g = CASES[name], geometry(CASES[name])
    return (f"{name}: {case['energy_eV'] / 1e3:.2f} keV, pixel {case['pixel_m'] * 1e6:.3g} um, z2 {case['z2_m']:.3g} m, "
            f"z1 {case['z1_m'] * 1e3:.3g} mm (M {g['magnification']:.0f}, dx {g['dx_m'] * 1e9:.3g} nm, Fresnel "
            f"{g['fresnel']:.3f}), {case['counts']:.0f} counts/px, {case['positions']} positions ({case['scan']}, "
            f"step {case['step'] * 100:.0f} %, error {case['error_px']:.2f} px), read-out "
            f"{ORIENTATIONS[case['orientation']]}, basis {'yes' if case['basis'] else 'no'}, mask "
            f"{'yes' if case['mask'] else 'no'}, {case['object']} {case['phase_rad']:.2f} rad, beam {case['beam']:.2f}"
            + (f", stage turned {case['stage_deg']:+.1f} deg" if case.get("stage_deg") else ""))


def bilinear(image: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``image`` at the fractional pixel places ``rows`` x ``cols`` (clamped to the image)."""
    r = np.clip(rows, 0, image.shape[0] - 1.000001)
    c = np.clip(cols, 0, image.shape[1] - 1.000001)
    r0, c0 = np.floor(r).astype(int), np.floor(c).astype(int)
    wr, wc = (r - r0)[:, None], (c - c0)[None, :]
    a, b = image[np.ix_(r0, c0)], image[np.ix_(r0, c0 + 1)]
    d, e = image[np.ix_(r0 + 1, c0)], image[np.ix_(r0 + 1, c0 + 1)]
    return (1 - wr) * ((1 - wc) * a + wc * b) + wr * ((1 - wc) * d + wc * e)


def score(results_path: Path, data: Path) -> dict:
    """The phase NCC of a results.h5 against the file's truth at the reconstruction's exact place (zero shift),
    the best-shift NCC beside it, through the calibration matrix's ``scores``; a reconstruction on another pixel
    than the truth's is first interpolated onto the truth's pixel (its origin kept)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "calibration_matrix"))
    from matrix import scores

    from ptyacc.results.h5file import load_results
    from ptyacc.results.quality import best_shift_ncc

    results = load_results(results_path)
    with h5py.File(data) as f:
        truth, true_positions = f["ground_truth/phase"][()].astype(float), f["ground_truth/positions_A"][()]
        dx_true_A = float(f["ground_truth"].attrs["dx_m"]) * 1e10
    phase, dx_A = np.asarray(results.phase, dtype=float), float(results.dx_A)
    if abs(dx_A / dx_true_A - 1) > 1e-6:
        rows = np.arange(int((phase.shape[0] - 1) * dx_A / dx_true_A) + 1) * dx_true_A / dx_A
        cols = np.arange(int((phase.shape[1] - 1) * dx_A / dx_true_A) + 1) * dx_true_A / dx_A
        phase = bilinear(phase, rows, cols)
    try:
        found = scores(phase, results.origin_A, dx_true_A, results.initial_positions_A, true_positions, truth,
                       best_shift_ncc)
    except ValueError as error:  # the scanned region outside the reconstruction
        found = {"ncc": float("nan"), "error": str(error)}
    found["run_dx_A"] = dx_A
    return found


def run(work: Path, name: str, variant: str, overrides: list[str], iterations: str) -> dict:
    """``ptyacc init`` on the file, then ``ptyacc run`` (``told``: with the truth given), scored."""
    path, out, config, exe = initialised(work, name, variant)
    written = yaml.safe_load(config.read_text())
    wrote = {"geometry": written.get("experiment", {}).get("geometry", "far_field (default)"),
             "focus_to_sample_m": written.get("experiment", {}).get("focus_to_sample_m"),
             "orientation": written.get("data", {}).get("transform", {}).get("orientation")}
    sets = iterations_set(iterations) + [f"output.dir={out}"]
    if variant == "told":
        with h5py.File(path) as f:
            t, fy, fx = (bool(v) for v in f["ground_truth"].attrs["orientation"])
            z1 = float(f["ground_truth"].attrs["focus_to_sample_m"])
            stage_deg = float(f["ground_truth"].attrs.get("stage_deg", 0.0))
        # far field only: the loader accepts it beside near_field and the run ignores it there; dropped all the same
        written.setdefault("experiment", {}).pop("sample_side", None)
        config.write_text(yaml.safe_dump(written, sort_keys=False))
        sets += ["experiment.geometry=near_field", f"experiment.focus_to_sample_m={z1}",
                 "data.transform.orientation=manual", f"data.transform.transpose={t}", f"data.transform.flip_y={fy}",
                 f"data.transform.flip_x={fx}", f"experiment.scan_rotation_deg={stage_deg}"]
    sets += list(overrides)
    command = [str(exe), "run", str(config), "--overwrite"] + [a for s in sets for a in ("--set", s)]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_B, MEMORY_LIMIT_B))

    done = subprocess.run(command, capture_output=True, text=True, preexec_fn=limit)
    log = (out / "run.log").read_text() if (out / "run.log").is_file() else done.stdout + done.stderr
    found = {"case": name, "variant": variant, "rc": done.returncode, "init_wrote": wrote,
             "warnings": [line.strip() for line in log.splitlines() if "warning:" in line]}
    if done.returncode == 0:
        scored = score(out / "results.h5", path)
        with h5py.File(out / "results.h5") as f:
            attrs = dict(f.attrs)
        from ptyacc.results.h5file import load_results
        autos = yaml.safe_load(load_results(out / "results.h5").attrs.get("auto_values", "{}")) or {}
        found.update(ncc=round(scored["ncc"], 4), best_ncc=round(float(scored.get("ncc_best_shift", float("nan"))), 4),
                     best_shift_px=[round(float(v), 2) for v in scored.get("best_shift_px", [])],
                     deviance=round(float(attrs.get("poisson_deviance", "nan")), 3), run_dx_A=round(scored["run_dx_A"], 3),
                     iterations=int(re.findall(r"done: (\d+) iterations", log)[-1]),
                     used={k: v for k, v in autos.items() if k.startswith(("data.transform.", "experiment."))})
    else:
        stopped = [line.strip() for line in (done.stdout + done.stderr).splitlines() if "error:" in line]
        found["error"] = stopped[-1] if stopped else (done.stdout + done.stderr)[-2000:]
    return found


def near_verdict(init: dict, told: dict) -> str:
    """The far-field benchmark's verdict (pass, warned, silent; said where run.log calls the result the conjugate
    and it is), and refused: init stopped with an ``error:`` that says why (no reconstruction to score)."""
    if init.get("rc") not in (0, None) and "error:" in init.get("error", "") and told.get("ncc") is not None:
        return "refused"
    return verdict(init, told)


def main(argv: list[str] | None = None) -> None:
    args = arguments(__doc__.splitlines()[0], argv)
    if args.detector or args.basis:
        raise SystemExit("--detector and --basis: the far-field simulator's (xray_far_field.py); this draw stores basis "
                         "vectors on about half its files")
    names = draw(*args.draw, turned=args.turned) if args.draw else args.cases or list(CASES)
    names = [name for name in names if args.cases is None or name in args.cases]  # some of a draw
    found = ran(args, names, lambda work, name: f"{make(work, name)} {describe(name)}", run)
    if found is not None and {"init", "told"} <= set(args.variants):
        verdicts = {name: near_verdict(found[name, "init"], found[name, "told"]) for name in names}
        for name in names:
            print(f"{describe(name)}: init {found[name, 'init'].get('ncc')} told {found[name, 'told'].get('ncc')} "
                  f"(deviance {found[name, 'init'].get('deviance')} / {found[name, 'told'].get('deviance')}) "
                  f"{verdicts[name]}")
        counts = {kind: list(verdicts.values()).count(kind) for kind in ("pass", "said", "warned", "silent", "refused", "error")}
        print(f"margin {PASS_MARGIN}: " + " ".join(f"{kind} {count}" for kind, count in counts.items()))


if __name__ == "__main__":
    main()
