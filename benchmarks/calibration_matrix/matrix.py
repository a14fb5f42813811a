"""The calibration matrix: ``ptyacc init`` + ``ptyacc run`` on many files as a microscope writes them,
each scored against ptyacc told the truth on the same file.

Every case is one file simulated outside ptyacc: a sample (a MoS2, WSe2 or graphene monolayer, or
an amorphous carbon film with silicon, whose projected potential abTEM builds; or random Gaussian
atoms from the project's NumPy simulator, ``benchmarks/grid/simulate.py``, which needs no abTEM), a
STEM probe through it (``simulate.patterns_at``: the probe shifted to each true position, the exit
wave's far field), and a detector and microscope that the file does not describe: the scan turned
by any angle against the detector, the patterns transposed and flipped (all eight orientations),
the defocus read 30 % off either way or right (both signs of defocus), partial coherence (source
size and focal spread), descan, blur, Poisson counts from 1e3 to 1e6 per pattern, a few dead and
hot pixels. The file holds the nominal raster as ``positions_A`` (as converters write it) or no
positions at all.

Each case runs twice with the same iterations:

* ``auto``: the config that ``ptyacc init FILE`` writes, unchanged;
* ``truth``: the true positions, orientation and defocus given (the detector's own effects, bad
  pixels, descan and blur, found as ``init`` finds them, so that the difference is the calibration).

Some cases also run deliberately wrong configs (the truth config with one thing wrong: the scan
rotation 25 degrees off, the transpose reversed, the defocus's sign flipped, the defocus 30 % off,
the nominal raster taken as the positions); each run records how many run.log lines contain
``warning:``, so that the catch rate of ptyacc's checks can be counted.

Scoring: the reconstructed phase (summed over slices) against the true projected phase, over the
scanned region, zero shift, the reconstruction placed at its exact sub-pixel ``origin_A`` after the
translation between its positions' frame and the truth's (the means of the positions) is taken out
(``ptyacc.results.quality.placed_ncc``); the best sub-pixel shift's NCC is recorded beside it.

    python benchmarks/calibration_matrix/matrix.py --jobs 2                  # every case
    python benchmarks/calibration_matrix/matrix.py --quick                   # one case of each kind
    python benchmarks/calibration_matrix/matrix.py --cases c07 c12 --rerun   # these cases again
    python benchmarks/calibration_matrix/matrix.py --table                   # the table from the cache
    python benchmarks/calibration_matrix/matrix.py --measure --cases c06     # the autos' calibration, no run
    python benchmarks/calibration_matrix/matrix.py --checks --jobs 2         # the checks on right and wrong configs
    python benchmarks/calibration_matrix/matrix.py --pool /tmp/m70 /tmp/m71  # several draws' verdicts by sample and counts

``--checks`` runs no reconstruction: it loads each case with the config a user who knows the truth writes
(``given``: the nominal raster, the true rotation, transpose/flips and defocus) and with that config wrong
in one way (``CHECKED``), and counts the ones whose loading says ``warning:`` (the checks run there): right
configs accused, wrong ones caught. Records go to ``results/<case>__check_<kind>.json``.

Files go to ``--cache`` (default /tmp/ptyacc-matrix): ``data/<case>.h5`` (simulated once),
``runs/<case>__<variant>/`` (config, results.h5, run.log) and ``results/<case>__<variant>.json``
(one per run; a run whose JSON exists is not run again unless ``--rerun``); ``summary.md`` is the
table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "grid"))
import simulate  # noqa: E402  (the project's NumPy simulator: probe, raster, descan, coherence, blur, read-out)

PASS_MARGIN = 0.02  # auto passes when its NCC is at most this far below the truth's
ABTEM_SAMPLES = ("mos2", "wse2", "graphene", "amorphous")
ORIENTATIONS = [(t, fy, fx) for t in (False, True) for fy in (False, True) for fx in (False, True)]
WRONG = ("rotation_off", "transposed", "defocus_sign", "defocus_30", "raster_as_positions")
CHECKED = ("given", "rotation_10", "transposed", "defocus_30")  # --checks: the right config and three wrong ones


@dataclasses.dataclass(frozen=True)
class Case:
    """One file of the matrix. Lengths in Å, angles in degrees (scan) or mrad (optics), dose in
    electrons per pattern."""

    name: str
    sample: str                      # mos2, wse2, graphene, amorphous (abTEM) or atoms (NumPy)
    scan: int                        # positions per side
    step_A: float
    rotation_deg: float
    transpose: bool
    flip_y: bool
    flip_x: bool
    defocus_A: float                 # true; positive = underfocus
    nominal_factor: float            # the file's defocus_A = nominal_factor * defocus_A
    partial: bool                    # source size and focal spread
    descan: bool
    blur_px: float
    dose: float
    stored: bool                     # the nominal raster stored as positions_A
    detector_px: int = 48
    edge_mrad: float = 60.0
    energy_eV: float = 80e3
    semiangle_mrad: float = 25.0
    iterations: int = 30
    seed: int = 0
    wrong: tuple[str, ...] = ()
    c12_A: tuple[float, float] = (0.0, 0.0)  # the probe's two-fold astigmatism (C12a, C12b), not in the file
    c30_A: float = 0.0                       # its spherical aberration, not in the file
    scan_x: int = 0                          # the raster's columns where they differ from its rows (``oblong``)

    @property
    def columns(self) -> int:
        """The raster's columns: ``scan_x``, or ``scan`` for a square raster."""
        return self.scan_x or self.scan

    def describe(self) -> str:
        orientation = "".join(s for s, on in zip(("T", "Fy", "Fx"), (self.transpose, self.flip_y, self.flip_x)) if on)
        optics = "" if (self.energy_eV, self.semiangle_mrad, self.edge_mrad) == (80e3, 25.0, 60.0) else \
            f" {self.energy_eV / 1e3:g}kV {self.semiangle_mrad:g}/{self.edge_mrad:g}mrad step {self.step_A:g}"
        if self.c12_A != (0.0, 0.0) or self.c30_A:
            optics += f" C12 {math.hypot(*self.c12_A):.0f} C30 {self.c30_A / 1e4:+.1f}um"
        return (f"{self.sample} {self.scan}x{self.columns} {self.detector_px}px rot {self.rotation_deg:+.0f} "
                f"{orientation or 'id'} df {self.defocus_A:+.0f} (file x{self.nominal_factor:g}) "
                f"{'partial' if self.partial else 'coherent'}{' descan' if self.descan else ''}"
                f"{f' blur {self.blur_px:g}' if self.blur_px else ''} {self.dose:.0e} e"
                f"{' stored' if self.stored else ''}{optics}")


MATRIX_SEED = 53  # the seed of the 64 cases c00 ... c63


def _balanced(rng: np.random.Generator, n: int, values) -> list:
    """``n`` values, each of ``values`` equally often, shuffled by ``rng``."""
    return [values[j] for j in rng.permutation(np.arange(n) % len(values))]


def _drawn_alike(rng: np.random.Generator, n: int) -> tuple[list, ...]:
    """The dimensions ``cases`` and ``wide_cases`` draw alike, balanced over ``n`` cases, in this order from ``rng``:
    the sample, the orientation (transpose, flip_y, flip_x), positions stored, the file's defocus factor, partial
    coherence, descan, blur and counts."""
    return (_balanced(rng, n, ("mos2", "wse2", "graphene", "amorphous", "mos2", "wse2", "amorphous", "atoms")),
            _balanced(rng, n, ORIENTATIONS), _balanced(rng, n, (False, False, True)), _balanced(rng, n, (0.7, 1.0, 1.3)),
            _balanced(rng, n, (False, False, True)), _balanced(rng, n, (False, True)),
            _balanced(rng, n, (0.0, 0.5, 0.8)), _balanced(rng, n, (1e3, 1e4, 3e4, 1e5, 1e6)))


def cases(seed: int = MATRIX_SEED) -> list[Case]:
    """The matrix: 64 cases. Each dimension takes each of its values equally often, shuffled apart
    (seeded) so that the combinations mix; the scan rotation and the defocus's size are drawn at
    random. Two scans are 64 x 64 (20 iterations), the rest 16 to 32 a side (30 iterations). Wrong
    configs: four on five cases without stored positions, the raster taken as positions on five with them.

    Another ``seed`` draws 64 fresh cases from the same distribution, named ``h<seed>-00`` ... and
    simulated with their own random numbers (``Case.seed`` = 1000 ``seed`` + i), so that they share
    neither a name nor a sample with c00 ... c63: out-of-sample cases for settings tuned on those."""
    rng = np.random.default_rng(seed)
    n = 64
    fresh = seed != MATRIX_SEED

    sample, orientation, stored, factor, partial, descan, blur, dose = _drawn_alike(rng, n)
    pixels, sign = _balanced(rng, n, (48, 48, 48, 48, 48, 64)), _balanced(rng, n, (1.0, -1.0))
    scan = _balanced(rng, n, (16, 20, 24, 16, 20, 24, 32))
    # the fresh draws place their two 64 x 64 scans with a generator of their own: the matrix's stream stays as it was
    big = np.random.default_rng([seed, 64]).choice(n, 2, replace=False) if fresh else (5, 55)
    for i in big:
        scan[i] = 64
    out, wrong_all, wrong_raster = [], 0, 0
    for i in range(n):
        wrong: tuple[str, ...] = ()
        if not stored[i] and scan[i] <= 24 and wrong_all < 5:
            wrong, wrong_all = WRONG[:4], wrong_all + 1
        elif stored[i] and scan[i] <= 24 and wrong_raster < 5:
            wrong, wrong_raster = ("raster_as_positions",), wrong_raster + 1
        name, simulation_seed = (f"h{seed}-{i:02d}", 1000 * seed + i) if fresh else (f"c{i:02d}", i)
        out.append(Case(name=name, sample=sample[i], scan=scan[i], step_A=0.45 if scan[i] < 64 else 0.4,
                        rotation_deg=round(float(rng.uniform(-180, 180)), 1),
                        transpose=orientation[i][0], flip_y=orientation[i][1], flip_x=orientation[i][2],
                        defocus_A=round(sign[i] * float(rng.uniform(60.0, 180.0)), 1), nominal_factor=factor[i],
                        partial=partial[i], descan=descan[i], blur_px=blur[i], dose=dose[i], stored=stored[i],
                        detector_px=pixels[i], seed=simulation_seed, iterations=20 if scan[i] == 64 else 30, wrong=wrong))
    return out


WIDE_ENERGIES_EV = (60e3, 80e3, 200e3, 300e3)


def wide_cases(seed: int) -> list[Case]:
    """64 cases of a wider distribution, named ``w<seed>-00`` ...: the microscope drawn too. The beam's
    energy (60, 80, 200 or 300 kV), its semi-angle (15-30 mrad) and the detector's edge (1.8-2.6 times it),
    a defocus that makes the probe's disk 25-50 % of the window wide, a step of 10-30 % of that disk (the
    matrix's own cases: 80 kV, 25 / 60 mrad, 0.45 Å, a far denser scan), and residual aberrations the
    file does not name: two-fold astigmatism up to 30 Å at any angle and a spherical aberration within
    5 µm either way. The rest as ``cases`` (no 64 x 64 scan): samples, orientations, positions stored,
    the file's defocus 30 % off or right, coherence, descan, blur and counts, each balanced.

    The told run is told the aberrations too (``truth_config``); ``ptyacc init`` is not."""
    rng = np.random.default_rng([seed, 1])
    n = 64

    sample, orientation, stored, factor, partial, descan, blur, dose = _drawn_alike(rng, n)
    pixels, sign = _balanced(rng, n, (48, 48, 64)), _balanced(rng, n, (1.0, -1.0))
    scan, energy = _balanced(rng, n, (16, 20, 24, 16, 20, 24, 32)), _balanced(rng, n, WIDE_ENERGIES_EV)
    out = []
    for i in range(n):
        semiangle = round(float(rng.uniform(15.0, 30.0)), 1)
        edge = round(semiangle * float(rng.uniform(1.8, 2.6)), 1)
        window_A = float(pixels[i] / 2 * simulate.wavelength_A(energy[i]) / (edge * 1e-3))
        disk_A = float(rng.uniform(0.25, 0.5)) * window_A
        defocus = round(sign[i] * disk_A / (2e-3 * semiangle), 1)
        step = round(float(rng.uniform(0.1, 0.3)) * disk_A, 2)
        astigmatism, angle = float(rng.uniform(0.0, 30.0)), float(rng.uniform(0.0, 2 * np.pi))
        out.append(Case(name=f"w{seed}-{i:02d}", sample=sample[i], scan=scan[i], step_A=step,
                        rotation_deg=round(float(rng.uniform(-180, 180)), 1),
                        transpose=orientation[i][0], flip_y=orientation[i][1], flip_x=orientation[i][2],
                        defocus_A=defocus, nominal_factor=factor[i], partial=partial[i], descan=descan[i],
                        blur_px=blur[i], dose=dose[i], stored=stored[i], detector_px=pixels[i], edge_mrad=edge,
                        energy_eV=energy[i], semiangle_mrad=semiangle, seed=1000 * seed + 500 + i,
                        c12_A=(round(astigmatism * math.cos(angle), 1), round(astigmatism * math.sin(angle), 1)),
                        c30_A=round(float(rng.uniform(-5e4, 5e4)), -2)))
    return out


OBLONG_COLUMNS = (16, 20, 24, 32, 40, 48)


def oblong(drawn_cases: list[Case], seed: int) -> list[Case]:
    """``drawn_cases`` on rasters that are not square: each case's columns drawn from OBLONG_COLUMNS other than its
    rows (a generator of its own, so the cases are otherwise those drawn), named ``o`` + its name (``oh135-00``,
    ``ow124-00``). Instruments scan rectangles as often as squares; the autos were tuned on squares."""
    rng = np.random.default_rng([seed, 2])
    return [dataclasses.replace(case, name=f"o{case.name}",
                                scan_x=int(rng.choice([c for c in OBLONG_COLUMNS if c != case.scan])))
            for case in drawn_cases]


def drawn(seed: int, wide: bool = False, oblong_scans: bool = False) -> list[Case]:
    """The cases a seed draws: ``wide_cases`` where ``wide``, else ``cases``; ``oblong`` where ``oblong_scans``."""
    every = wide_cases(seed) if wide else cases(seed)
    return oblong(every, seed) if oblong_scans else every


def quick_cases(every: list[Case]) -> list[Case]:
    """One case per sample and per positions stored or not (the quick slice)."""
    chosen: dict[tuple, Case] = {}
    for case in every:
        if case.scan <= 24:
            chosen.setdefault((case.sample, case.stored), case)
    return list(chosen.values())


# ----------------------------------------------------------------------------------------- samples

def sample_atoms(case: Case, size_A: float, rng: np.random.Generator):
    """The sample as ase Atoms in a periodic box size_A x size_A (x, y), the beam along z: a monolayer
    turned by a random angle and shifted at random, or an amorphous film (carbon, 5 % silicon, 10 Å)."""
    import ase
    from ase.build import graphene, mx2

    if case.sample == "amorphous":
        thickness_A, wanted = 10.0, int(0.09 * size_A * size_A * 10.0)
        sites = np.empty((0, 3))
        while len(sites) < wanted:
            trial = rng.uniform([0, 0, 1.0], [size_A, size_A, 1.0 + thickness_A], size=(wanted, 3))
            for site in trial:
                gap = np.abs(sites[:, :2] - site[:2])
                gap = np.minimum(gap, size_A - gap)  # periodic in x, y
                if not len(sites) or np.min(np.hypot(np.hypot(*gap.T), sites[:, 2] - site[2])) >= 1.3:
                    sites = np.vstack([sites, site])
                if len(sites) == wanted:
                    break
        symbols = np.where(rng.uniform(size=len(sites)) < 0.05, "Si", "C")
        return ase.Atoms(list(symbols), positions=sites, cell=[size_A, size_A, thickness_A + 2.0], pbc=True)
    unit = {"mos2": lambda: mx2("MoS2", kind="2H", a=3.18, thickness=3.19, vacuum=2.0),
            "wse2": lambda: mx2("WSe2", kind="2H", a=3.28, thickness=3.34, vacuum=2.0),
            "graphene": lambda: graphene("C2", a=2.46, vacuum=2.0)}[case.sample]()
    a_A = unit.cell.lengths()[0]
    n = int(math.ceil(1.8 * size_A / a_A)) + 2
    layer = unit.repeat((n, n, 1))
    xyz = layer.get_positions()
    centre = (layer.cell[0] + layer.cell[1]) / 2  # the repeated rhombus's centre
    xy = xyz[:, :2] - centre[:2]
    turn = rng.uniform(0, 2 * np.pi)
    xy = xy @ np.array([[np.cos(turn), np.sin(turn)], [-np.sin(turn), np.cos(turn)]]) + size_A / 2 + rng.uniform(0, a_A, 2)
    inside = np.all((xy >= 0) & (xy < size_A), axis=1)
    positions = np.column_stack([xy[inside], xyz[inside, 2] - xyz[:, 2].min() + 1.0])
    return ase.Atoms(np.asarray(layer.get_chemical_symbols())[inside].tolist(), positions=positions,
                     cell=[size_A, size_A, float(np.ptp(xyz[:, 2])) + 2.0], pbc=True)


def abtem_phase(case: Case, size_px: int, dx_A: float, rng: np.random.Generator) -> np.ndarray:
    """(size_px, size_px) projected phase sigma V of the sample (one slice), pixel [i, j] at (i dx, j dx):
    abTEM's potential (Lobato, infinite projection) on a grid twice as fine, its lowest frequencies
    kept."""
    import abtem
    import dask
    from abtem.core.energy import energy2sigma

    abtem.config.set({"device": "cpu", "fft": "numpy", "precision": "float64", "diagnostics.progress_bar": False})
    dask.config.set(scheduler="synchronous")
    atoms = sample_atoms(case, size_px * dx_A, rng)
    fine = 2 * size_px
    potential = abtem.Potential(atoms, gpts=(fine, fine), slice_thickness=float(atoms.cell[2, 2]),
                                projection="infinite", parametrization="lobato")
    projected = potential.build().compute().array.sum(0)  # (x, y) eV Å
    phase = energy2sigma(case.energy_eV) * np.swapaxes(projected, 0, 1)
    spectrum = np.fft.fftshift(np.fft.fft2(phase))
    c, h = fine // 2, size_px // 2
    kept = np.fft.ifftshift(spectrum[c - h:c - h + size_px, c - h:c - h + size_px])
    return np.real(np.fft.ifft2(kept)) / 4.0


def write_case(case: Case, path: Path) -> None:
    """Simulate ``case`` into ``path``: the layout of benchmarks/grid/simulate.py (the nominal raster as
    ``positions_A`` only when ``case.stored``; the truth in ``/ground_truth``)."""
    rng = np.random.default_rng(case.seed)
    setting = simulate.Setting(
        defocus_A=case.defocus_A, edge_mrad=case.edge_mrad, dose=case.dose, energy_eV=case.energy_eV,
        semiangle_mrad=case.semiangle_mrad, detector_px=case.detector_px, scan_shape=(case.scan, case.columns),
        scan_step_A=case.step_A, seed=case.seed, scan_rotation_deg=case.rotation_deg, transpose=case.transpose,
        flip_y=case.flip_y, flip_x=case.flip_x, blur_px=case.blur_px,
        descan_offset_px=(0.4, -0.3) if case.descan else (0.0, 0.0),
        descan_px_per_A=((0.03, 0.015), (-0.02, 0.04)) if case.descan else ((0.0, 0.0), (0.0, 0.0)),
        source_size_A=0.35 if case.partial else 0.0, focal_spread_A=30.0 if case.partial else 0.0,
        dead_pixels=3, hot_pixels=2, nominal_defocus_A=round(case.nominal_factor * case.defocus_A, 1),
        write_positions=case.stored)
    lam = simulate.wavelength_A(case.energy_eV)
    n = case.detector_px
    dk = case.edge_mrad * 1e-3 / lam / (n // 2)
    dx = 1.0 / (n * dk)
    span_A = math.hypot(case.scan - 1, case.columns - 1) * case.step_A  # a turned raster's diagonal
    size = int(math.ceil(span_A / dx)) + n + 16
    size += size % 2
    phase = (abtem_phase(case, size, dx, rng) if case.sample in ABTEM_SAMPLES
             else simulate.random_atoms((size, size), dx, setting, rng))[None]
    probe = simulate.probe_wave(n, dk, lam, case.semiangle_mrad, case.defocus_A, case.c12_A, case.c30_A)
    nominal = simulate.scan_positions_A(setting, size * dx)
    positions = simulate.rotated(nominal, case.rotation_deg)
    kernel = simulate.fresnel_kernel(n, dx, lam, setting.slice_thickness_A)
    descan = simulate.descan_px(setting, positions)
    clean = np.zeros((len(positions), n, n))
    for shift, focus, weight in simulate.coherence_quadrature(setting):
        variant = probe if focus == 0 else simulate.probe_wave(n, dk, lam, case.semiangle_mrad, case.defocus_A + focus,
                                                               case.c12_A, case.c30_A)
        clean += weight * simulate.patterns_at(variant, np.exp(1j * phase), (positions + shift) / dx, kernel, descan)
    counts = rng.poisson(simulate.blurred(clean, case.blur_px) * case.dose).astype(np.float64)
    stored = simulate.read_out(counts, setting)
    picked = rng.choice(n * n, setting.dead_pixels + setting.hot_pixels, replace=False)
    rows, cols = np.unravel_index(picked, (n, n))
    stored[:, rows[:setting.dead_pixels], cols[:setting.dead_pixels]] = 0
    hot = rng.poisson(setting.hot_fraction * case.dose, size=(len(stored), setting.hot_pixels))
    stored[:, rows[setting.dead_pixels:], cols[setting.dead_pixels:]] = hot
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    with h5py.File(partial, "w") as f:
        f.create_dataset("patterns", data=stored.reshape(case.scan, case.columns, n, n).astype(np.float32))
        if case.stored:
            f["positions_A"] = nominal
        truth = f.create_group("ground_truth")
        truth["positions_A"] = positions
        truth.create_dataset("phase", data=phase[0].astype(np.float32)).attrs["dx_A"] = dx
        truth.attrs.update(defocus_A=case.defocus_A, c12_A=np.asarray(case.c12_A), c30_A=case.c30_A,
                           scan_rotation_deg=case.rotation_deg, transpose=case.transpose,
                           flip_y=case.flip_y, flip_x=case.flip_x, blur_px=case.blur_px, sample=case.sample)
        f.attrs.update(energy_eV=case.energy_eV, semiangle_mrad=case.semiangle_mrad,
                       defocus_A=setting.nominal_defocus_A, dk_invA=dk, scan_step_A=case.step_A,
                       scan_shape=np.array([case.scan, case.columns]), dose_per_pattern=case.dose,
                       simulator=("abTEM potential, " if case.sample in ABTEM_SAMPLES else "")
                       + "benchmarks/calibration_matrix/matrix.py")
    partial.rename(path)


# ------------------------------------------------------------------------------------------- runs

def init_config(data: Path, config: Path) -> dict:
    """The config ``ptyacc init`` writes for ``data``, read back."""
    done = subprocess.run([*ptyacc_command(), "init", str(data), "-o", str(config), "--force"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ptyacc init {data} failed:\n{done.stdout}{done.stderr}")
    return yaml.safe_load(config.read_text())


def truth_config(data: Path, case: Case) -> dict:
    """ptyacc told the truth: the true positions, orientation, defocus and other aberrations; bad pixels, descan,
    the probe modes and the blur's refinement as ``init`` writes them; the same batch and iterations as the auto
    run."""
    from ptyacc.commands.init_config import ELECTRON_PROBE_MODES

    aberrations = {name: value for name, value in zip(("C12a", "C12b", "C30"), (*case.c12_A, case.c30_A)) if value}
    config = {"data": {"path": str(data), "bad_pixels": "auto",
                     "transform": {"descan": "auto", "transpose": case.transpose, "flip_y": case.flip_y,
                                   "flip_x": case.flip_x}},
            "experiment": {"defocus_A": case.defocus_A, "positions": {"key": "ground_truth/positions_A"}},
            "model": {"probe_modes": ELECTRON_PROBE_MODES},
            "optim": {"batch_size": "auto", "start": {"detector_blur": 0}}}
    if aberrations:
        config["experiment"]["aberrations"] = aberrations
    return config


def told_config(data: Path, case: Case, auto: dict) -> dict | None:
    """The truth told in the frame the ``auto`` run (its JSON record) chose: its transpose/flips (and which
    flips turn about the zero frequency), the scan rotation that with them gives the true map from the
    stored patterns to the scan, R(theta)^T F (the same physics, the object turned by quarter turns), the
    true defocus and other aberrations (the two-fold C12 in the frame used: negated where it is turned by an odd number
    of quarter turns), the raster positions; the rest as ``truth_config``. None where the auto run found the
    mirror (no rotation makes its flags the truth's). Its object lies on the auto run's grid (the same
    positions up to the rotation's error), so that the two differ by the calibration alone: on the
    truth's own grid (``truth``) a run's NCC moves by up to a few hundredths with the grid's sub-pixel
    place against the scan (the calibration matrix's record)."""
    from ptyacc.data.orientation import frame_difference

    values = auto.get("auto_values") or {}
    if "data.transform.transpose" not in values:
        return None
    flags = tuple(bool(values[f"data.transform.{key}"]) for key in ("transpose", "flip_y", "flip_x"))
    # F against the truth's R(theta_t)^T F_t is R(-theta): R(theta)^T F is the truth's map
    mirrored, off_deg = frame_difference(flags, 0.0, (case.transpose, case.flip_y, case.flip_x), case.rotation_deg)
    if mirrored:
        return None
    config = truth_config(data, case)
    # the frame differs from the truth's by quarter turns (the positions' angle): an odd number negates the two-fold C12
    quarter_turns = round(((-off_deg - case.rotation_deg) % 360.0) / 90.0) % 4
    if quarter_turns % 2 and "aberrations" in config["experiment"]:
        config["experiment"]["aberrations"] = {name: -value if name.startswith("C12") else value
                                               for name, value in config["experiment"]["aberrations"].items()}
    config["data"]["transform"].update(transpose=flags[0], flip_y=flags[1], flip_x=flags[2],
                                       flip_about_zero=[bool(v) for v in values.get("data.transform.flip_about_zero",
                                                                                    [False, False])])
    del config["experiment"]["positions"]
    config["experiment"]["scan_rotation_deg"] = round(-off_deg, 6)
    return config


def wrong_config(data: Path, case: Case, wrong: str) -> dict:
    """The truth config with one thing wrong (``WRONG``)."""
    # rotation_off: the nominal raster turned 25 degrees away from the truth
    config = given_config(data, case) if wrong == "rotation_off" else truth_config(data, case)
    transform, experiment = config["data"]["transform"], config["experiment"]
    if wrong == "rotation_off":
        experiment["scan_rotation_deg"] = case.rotation_deg + 25.0
    elif wrong == "transposed":
        transform["transpose"] = not case.transpose
    elif wrong == "defocus_sign":
        experiment["defocus_A"] = -case.defocus_A
    elif wrong == "defocus_30":
        experiment["defocus_A"] = round(1.3 * case.defocus_A, 1)
    elif wrong == "raster_as_positions":  # the file's nominal raster used as measured positions
        experiment["positions"] = {"key": "positions_A"}
    else:
        raise ValueError(f"unknown wrong config {wrong!r}: one of {WRONG}")
    return config


def given_config(data: Path, case: Case) -> dict:
    """The truth as a user who knows it writes it: the file's nominal raster (stored as positions or not) at the
    true scan rotation, the true transpose/flips and defocus; the rest as ``truth_config``."""
    config = truth_config(data, case)
    del config["experiment"]["positions"]
    config["experiment"]["scan_rotation_deg"] = case.rotation_deg
    return config


def checked_config(data: Path, case: Case, kind: str) -> dict:
    """``given_config``, or it wrong in one way (``CHECKED``): the rotation 10 degrees off, the transpose reversed,
    the defocus 30 % too large."""
    config = given_config(data, case)
    if kind == "rotation_10":
        config["experiment"]["scan_rotation_deg"] = case.rotation_deg + 10.0
    elif kind == "transposed":
        config["data"]["transform"]["transpose"] = not case.transpose
    elif kind == "defocus_30":
        config["experiment"]["defocus_A"] = round(1.3 * case.defocus_A, 1)
    elif kind != "given":
        raise ValueError(f"unknown checked config {kind!r}: one of {CHECKED}")
    return config


def check_case(case: Case, cache: Path, rerun: bool = False) -> list[dict]:
    """Load ``case`` (simulated once) with each config of CHECKED, no reconstruction; the records, with the
    ``warning:`` lines that loading said."""
    from ptyacc.config import load_config
    from ptyacc.data.load import load_data

    data = cache / "data" / f"{case.name}.h5"
    if not data.is_file():
        write_case(case, data)
    out = []
    for kind in CHECKED:
        target = cache / "results" / f"{case.name}__check_{kind}.json"
        if target.is_file() and not rerun:
            out.append(json.loads(target.read_text()))
            continue
        config_path = cache / "runs" / f"{case.name}__check_{kind}.yaml"
        config_path.parent.mkdir(parents=True, exist_ok=True)
        config_path.write_text(yaml.safe_dump(checked_config(data, case, kind), sort_keys=False))
        started = time.time()
        record = {"case": case.name, "kind": kind, "parameters": case.describe()}
        try:
            record["warnings"] = [line for line in load_data(load_config(config_path)).checks if "warning:" in line]
        except Exception as exc:  # a config refused outright is caught too: the user is told
            record.update(warnings=[], error=repr(exc)[:500])
        record["seconds"] = round(time.time() - started, 1)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, indent=1))
        print(f"{case.name} check {kind}: {len(record['warnings'])} warnings{' (refused)' if 'error' in record else ''}",
              flush=True)
        out.append(record)
    return out


def checks_summary(cache: Path, chosen: list[Case]) -> str:
    """The Markdown table of the recorded checks of ``chosen``: per config kind, how many said a warning (or
    refused the config), then the right configs accused with their first warning and the wrong ones not caught."""
    said: dict[str, list[int]] = {kind: [0, 0] for kind in CHECKED}
    accused, missed = [], []
    for case in chosen:
        for kind in CHECKED:
            path = cache / "results" / f"{case.name}__check_{kind}.json"
            if not path.is_file():
                continue
            record = json.loads(path.read_text())
            warned = bool(record["warnings"]) or "error" in record
            said[kind][0] += warned
            said[kind][1] += 1
            if kind == "given" and warned:
                first = record["warnings"][0] if record["warnings"] else record["error"]
                accused.append(f"| {case.name} | {case.describe()} | {first[:110].replace('|', '/')} |")
            elif kind != "given" and not warned:
                missed.append(f"| {case.name} | {kind} | {case.describe()} |")
    rows = ["| config | warned or refused | of |", "|---|---|---|"]
    rows += [f"| {kind} | {n} | {total} |" for kind, (n, total) in said.items()]
    if accused:
        rows += ["", "| right config accused | parameters | first warning |", "|---|---|---|", *accused]
    if missed:
        rows += ["", "| wrong config not caught | wrong | parameters |", "|---|---|---|", *missed]
    return "\n".join(rows) + "\n"


def ptyacc_command() -> list[str]:
    return [sys.executable, "-c", "import sys; from ptyacc.commands.cli import main; sys.exit(main())"]


def run_variant(case: Case, variant: str, cache: Path) -> dict:
    """Run one (case, variant) with the ptyacc CLI and score it; the JSON record."""
    data = cache / "data" / f"{case.name}.h5"
    folder = cache / "runs" / f"{case.name}__{variant}"
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "config.yaml"
    if variant == "auto":
        init_config(data, config_path)
    elif variant == "told":
        auto = json.loads((cache / "results" / f"{case.name}__auto.json").read_text())
        config = told_config(data, case, auto)
        if config is None:
            return {"case": case.name, "variant": variant, "returncode": 0, "warnings": [],
                    "skipped": "the auto run found the mirror: no frame of its flags holds the truth"}
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    else:
        config = truth_config(data, case) if variant == "truth" else wrong_config(data, case, variant)
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return _ran(case, variant, config_path, data)


def varied(case: Case, cache: Path, base: str, tag: str, sets: list[str]) -> dict:
    """The cached ``base`` run's config (auto's or told's, as written) run again with ``sets`` (KEY=VALUE, as
    ``ptyacc run --set`` takes them, after the matrix's own: a set ``optim.iterations`` replaces the case's) in
    runs/CASE__BASE+TAG, scored; the JSON record, also written to results/CASE__BASE+TAG.json, which the tables leave
    out. How one value of a config moves a case: the told config at the auto run's rotation, an auto config without
    one refinement."""
    source = cache / "runs" / f"{case.name}__{base}" / "config.yaml"
    if not source.is_file():
        raise SystemExit(f"{case.name}: no {base} run in {cache}: run it first (--runs {base})")
    variant = f"{base}+{tag}"
    folder = cache / "runs" / f"{case.name}__{variant}"
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "config.yaml"
    config_path.write_text(source.read_text())
    record = _ran(case, variant, config_path, cache / "data" / f"{case.name}.h5", sets)
    (cache / "results" / f"{case.name}__{variant}.json").write_text(json.dumps(record, indent=1))
    return record


def _ran(case: Case, variant: str, config_path: Path, data: Path, sets: tuple[str, ...] | list[str] = ()) -> dict:
    """``ptyacc run`` on ``config_path`` (the case's iterations, one thread, no figures, then ``sets``) in the
    config's folder's ``out``, scored; the JSON record."""
    folder = config_path.parent
    started = time.time()
    done = subprocess.run([*ptyacc_command(), "run", str(config_path), "--overwrite",
                           "--set", f"optim.iterations={case.iterations}", "--set", f"output.dir={folder / 'out'}",
                           "--set", "runtime.progress=false", "--set", "runtime.threads=1",
                           "--set", "output.figures=false", *(arg for one in sets for arg in ("--set", one))],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    record = {"case": case.name, "variant": variant, "returncode": done.returncode, "seconds": round(time.time() - started, 1),
              "loadavg": [round(v, 2) for v in os.getloadavg()], "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    log = folder / "out" / "run.log"
    lines = log.read_text().splitlines() if log.is_file() else []
    record["warnings"] = [line for line in lines if "warning:" in line]
    if done.returncode != 0:
        record["error"] = (done.stderr or done.stdout)[-2000:]
        return record
    record.update(score_run(folder / "out" / "results.h5", data))
    return record


def vary_line(case: Case, base: str, record: dict, before: dict | None) -> str:
    """One line for a ``--vary`` run: its NCC and frame beside the base run's, or its error."""
    if "ncc" not in record:
        return f"{case.name} {record['variant']}: failed: {record.get('error', '')[-300:]}"
    was = f"{before['ncc']:.3f}" if before and "ncc" in before else "-"
    return (f"{case.name} {record['variant']}: NCC {record['ncc']:.3f} ({base} {was}), frame "
            f"{record['frame_angle_deg']:+.2f} -> {record['final_frame_angle_deg']:+.2f} deg, final loss "
            f"{record['final_loss']:.6g}, {record['seconds']:.0f} s")


def score_run(results_path: Path, data: Path) -> dict:
    """Zero-shift and best-shift NCC of a results.h5 against the case's truth, with its auto values."""
    from ptyacc.results.h5file import load_results
    from ptyacc.results.quality import best_shift_ncc

    results = load_results(results_path)
    with h5py.File(data) as f:
        truth, true_positions = f["ground_truth/phase"][()].astype(float), f["ground_truth/positions_A"][()]
    found = scores(results.phase, results.origin_A, results.dx_A, results.initial_positions_A, true_positions, truth,
                   best_shift_ncc, results.positions_A)
    autos = yaml.safe_load(results.attrs.get("auto_values", "{}")) or {}
    return {**found, "final_loss": float(results.loss[-1]),
            "auto_values": {k: v for k, v in autos.items() if not k.startswith(("runtime.", "data.hold"))}}


def frame_angle_deg(run_positions_A: np.ndarray, true_positions_A: np.ndarray) -> tuple[np.ndarray, float]:
    """The quarter turn (2, 2) that maps ``run_positions_A`` (N, 2) about their centre nearest onto
    ``true_positions_A`` (the identity where none does), and the angle (degrees) left between them after it."""
    u = np.asarray(run_positions_A) - np.asarray(run_positions_A).mean(0)
    v = np.asarray(true_positions_A) - np.asarray(true_positions_A).mean(0)
    fitted = np.linalg.lstsq(u, v, rcond=None)[0].T  # v ~ fitted @ u
    turn = np.round(fitted)
    quarter = np.abs(fitted - turn).max() < 0.1 and round(abs(np.linalg.det(turn))) == 1 and np.linalg.det(turn) > 0
    turn = turn if quarter else np.eye(2)
    left = turn.T @ fitted  # what is left of the fitted map once the quarter turns are undone
    return turn, round(math.degrees(math.atan2(left[1, 0] - left[0, 1], left[0, 0] + left[1, 1])), 3)


def scores(phase: np.ndarray, origin_A, dx_A: float, run_positions_A: np.ndarray, true_positions_A: np.ndarray,
           truth: np.ndarray, best_shift_ncc=None, final_positions_A: np.ndarray | None = None) -> dict:
    """Zero-shift NCC (``ncc``), best-shift NCC and shift (y, x) px of ``phase`` (Ny, Nx), whose pixel
    [0, 0] sits at ``origin_A`` in the frame of ``run_positions_A`` (N, 2), against ``truth`` (H, W),
    pixel [i, j] at (i, j) dx_A in the frame of ``true_positions_A`` (N, 2), over the region the true
    positions scanned.

    The two frames differ by the translation between the positions' means, and by a quarter turn
    (``turn``, the number of them) where the run's positions are the true ones turned by a multiple of
    90 degrees about their centre: patterns turned by a quarter turn with the scan turned as much
    explain the data exactly as well, the object turned with them, so no calibration can tell them
    apart (only the mirror, the transpose's parity, and the angle between scan and detector can be
    measured). Any other angle between the frames is left as it is: an error the NCC shows.

    ``frame_angle_deg`` is that angle between the run's starting positions and the truth's;
    ``final_frame_angle_deg`` the angle left between its ``final_positions_A`` (N, 2) (the positions the
    reconstruction ends with, its scan rotation refined) and the truth's, where given."""
    from ptyacc.results.quality import placed_ncc

    run_centre, true_centre = np.asarray(run_positions_A).mean(0), np.asarray(true_positions_A).mean(0)
    turn, angle_deg = frame_angle_deg(run_positions_A, true_positions_A)
    # pixel [a, b] lies at c_t + turn (origin - c_r + (a, b) dx) in the truth's frame: [a', b'] = turn (a, b) + offset
    corners = np.array([[0, 0], [0, 1], [1, 0], [1, 1]]) * (np.array(np.shape(phase)) - 1)
    offset = -(corners @ turn.T).min(0)
    shape = tuple(int(v) for v in (np.abs(turn) @ np.array(np.shape(phase))))
    ai, bi = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    back = np.stack([ai - offset[0], bi - offset[1]], -1) @ turn  # turn^T ([a', b'] - offset)
    placed = np.asarray(phase)[back[..., 0].astype(int), back[..., 1].astype(int)]
    origin = true_centre + turn @ (np.asarray(origin_A, dtype=float) - run_centre) - offset * dx_A
    out = {"ncc": placed_ncc(placed, origin, dx_A, true_positions_A, truth),
           "quarter_turns": int(round(math.degrees(math.atan2(turn[1, 0], turn[0, 0])) / 90.0)) % 4,
           "frame_angle_deg": angle_deg}
    if final_positions_A is not None:
        out["final_frame_angle_deg"] = frame_angle_deg(final_positions_A, true_positions_A)[1]
    if best_shift_ncc is not None:
        best, shift = best_shift_ncc(placed, origin, dx_A, true_positions_A, truth, levels=((0.5, 2), (0.1, 4)))
        out.update(ncc_best_shift=float(best), best_shift_px=[round(float(v), 2) for v in shift])
    return out


def variants(case: Case) -> list[str]:
    return ["auto", "truth", "told", *case.wrong]


def do_case(case: Case, cache: Path, rerun: bool, kinds: tuple[str, ...] = ("auto", "truth", "wrong")) -> list[dict]:
    """Simulate (once) and run the variants of ``case`` of ``kinds`` (auto, truth, wrong: its wrong
    configs) not yet recorded; their records."""
    data = cache / "data" / f"{case.name}.h5"
    started = time.time()
    if not data.is_file():
        write_case(case, data)
    simulated_s = round(time.time() - started, 1)
    out = []
    for variant in variants(case):
        if (variant if variant in ("auto", "truth", "told") else "wrong") not in kinds:
            continue
        target = cache / "results" / f"{case.name}__{variant}.json"
        if target.is_file() and not rerun:
            out.append(json.loads(target.read_text()))
            continue
        try:
            record = run_variant(case, variant, cache)
        except Exception as exc:  # one failing case must not stop the matrix
            record = {"case": case.name, "variant": variant, "returncode": -1, "error": repr(exc), "warnings": []}
        record.update(parameters=case.describe(), simulate_s=simulated_s)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, indent=1))
        out.append(record)
        print(f"{case.name} {variant}: ncc {record.get('ncc')} warnings {len(record['warnings'])} "
              f"{record.get('seconds')} s", flush=True)
    return out


# ------------------------------------------------------------------------------------------ table

def rescore(cache: Path, chosen: list[Case]) -> None:
    """Score the cached runs of ``chosen`` again from their results.h5, those scored before the scorer
    measured the frame's angle at the run's end."""
    for case in chosen:
        for variant in variants(case):
            target = cache / "results" / f"{case.name}__{variant}.json"
            results = cache / "runs" / f"{case.name}__{variant}" / "out" / "results.h5"
            if target.is_file() and results.is_file():
                record = json.loads(target.read_text())
                if "final_frame_angle_deg" in record:
                    continue
                record.update(score_run(results, cache / "data" / f"{case.name}.h5"))
                target.write_text(json.dumps(record, indent=1))


def within(auto: dict, other: dict | None) -> bool | None:
    """Whether ``auto``'s NCC is at most PASS_MARGIN below ``other``'s; None where ``other`` has none."""
    if other is None or other.get("ncc") is None:
        return None
    return auto.get("ncc") is not None and auto["ncc"] >= other["ncc"] - PASS_MARGIN


def told_verdict(auto: dict, truth: dict | None, told: dict | None) -> bool | None:
    """The verdict against the truth told in auto's frame; where auto found the mirror (its told run skipped) the
    truth's own run is the reference, and without one (``--runs auto told``) the mirrored image fails. None: no
    reference was run."""
    if told is not None and told.get("skipped"):
        return within(auto, truth) if truth is not None else False
    return within(auto, told)


COUNTS = (1e3, 1e4, 3e4, 1e5, 1e6)


def run_record(cache: Path, name: str, variant: str) -> dict | None:
    """The results JSON of the run ``variant`` of the case ``name`` in ``cache``; None where it has not run."""
    path = cache / "results" / f"{name}__{variant}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def drawn_seed(name: str) -> int:
    """The seed that drew the case ``name`` (``cases``: h<seed>-NN for a fresh draw, cNN for the matrix's own;
    ``wide_cases``: w<seed>-NN; ``oblong``: o before either)."""
    name = name.removeprefix("o")
    return int(name[1:].split("-")[0]) if name.startswith(("h", "w")) else MATRIX_SEED


def pooled(caches: list[Path]) -> str:
    """The told verdicts of every case run in ``caches`` (each one draw's ``--cache``), pooled into tables by
    sample and counts per pattern and by the beam's coherence and counts, each cell passed / run."""
    known: dict[tuple[int, bool, bool], dict[str, Case]] = {}
    tally: dict[tuple[str, float], list[int]] = {}
    for cache in caches:
        for path in sorted((cache / "results").glob("*__auto.json")):
            name = path.name.split("__")[0]
            key = (drawn_seed(name), name.removeprefix("o").startswith("w"), name.startswith("o"))
            if key not in known:
                known[key] = {case.name: case for case in drawn(*key)}
            case = known[key][name]
            ok = told_verdict(*(run_record(cache, name, variant) for variant in ("auto", "truth", "told")))
            if ok is None:
                continue
            for row in (case.sample, "partly coherent" if case.partial else "coherent", "all"):
                cell = tally.setdefault((row, case.dose), [0, 0])
                cell[0], cell[1] = cell[0] + ok, cell[1] + 1

    def line(row: str) -> str:
        cells = [tally.get((row, dose), [0, 0]) for dose in COUNTS]
        passed, total = sum(c[0] for c in cells), sum(c[1] for c in cells)
        share = f" ({100 * passed / total:.1f} %)" if total else ""
        return f"| {row} | " + " | ".join(f"{c[0]}/{c[1]}" if c[1] else "-" for c in cells) + f" | {passed}/{total}{share} |"

    head = "| | " + " | ".join(f"{dose:.0e}" for dose in COUNTS) + " | all |"
    rule = "|---" * (len(COUNTS) + 2) + "|"
    samples = [s for s in (*ABTEM_SAMPLES, "atoms") if any(key[0] == s for key in tally)]
    return "\n".join(["Passed / run against the truth told in auto's frame, by sample and counts per pattern:", "",
                      head, rule, *map(line, samples), line("all"), "", "By the beam's coherence:", "", head, rule,
                      line("coherent"), line("partly coherent")]) + "\n"


def summary(cache: Path, chosen: list[Case]) -> str:
    """The Markdown table of the recorded runs of ``chosen``: per case auto and truth with their
    difference and the verdict, then the wrong configs with their warnings."""
    def ncc(record: dict | None) -> str:
        return "-" if record is None or record.get("ncc") is None else f"{record['ncc']:.3f}"

    def verdict(ok: bool | None) -> str:
        return "-" if ok is None else "pass" if ok else "**fail**"

    def less(auto: dict, other: dict | None) -> str:
        ok = other is not None and other.get("ncc") is not None and auto.get("ncc") is not None
        return f"{auto['ncc'] - other['ncc']:+.3f}" if ok else "-"

    rows = ["| case | parameters | NCC auto | NCC truth | auto - truth | pass | NCC told | auto - told | pass (told) "
            "| warnings (auto) | what auto found |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    passed = total = told_passed = told_total = 0
    seconds = 0.0
    for case in chosen:
        auto, truth, told = (run_record(cache, case.name, variant) for variant in ("auto", "truth", "told"))
        for record in (auto, truth, told):
            seconds += (record or {}).get("seconds") or 0.0
        if auto is None or (truth is None and told is None):
            continue
        mirrored = told is not None and bool(told.get("skipped"))
        ok, told_ok = within(auto, truth), told_verdict(auto, truth, told)
        if mirrored:  # no frame of auto's flags holds the truth: the truth's own run is the reference
            told = {**truth, "variant": "truth"} if truth is not None else None
        if truth is not None:
            total += 1
            passed += bool(ok)
        if told is not None or mirrored:
            told_total += 1
            told_passed += bool(told_ok)
        found = _found(case, auto, truth)
        told_cell = (f"{ncc(told)} (mirrored: truth)" if told is not None else "- (mirrored)") if mirrored else ncc(told)
        rows.append(f"| {case.name} | {case.describe()} | {ncc(auto)} | {ncc(truth)} | {less(auto, truth)} | "
                    f"{verdict(ok)} | {told_cell} | {less(auto, told)} | "
                    f"{verdict(told_ok)} | {len(auto['warnings'])} | {found or auto.get('error', '')[:60]} |")
    head = [f"{passed} of {total} cases pass ({100 * passed / max(total, 1):.0f} %): auto within {PASS_MARGIN} of truth."
            if total else "No run of the truth (--runs without truth): the told runs are the reference.",
            f"{told_passed} of {told_total} pass ({100 * told_passed / max(told_total, 1):.0f} %) against the truth "
            "told in the frame auto chose (told; where auto found the mirror no frame of its flags holds the truth, and "
            "the truth's own run is the reference).", ""]
    wrong_rows = ["", "| case | wrong config | NCC | NCC truth | warnings | first warning |", "|---|---|---|---|---|---|"]
    caught = wrong_total = 0
    for case in chosen:
        truth = run_record(cache, case.name, "truth")
        for variant in case.wrong:
            record = run_record(cache, case.name, variant)
            if record is None:
                continue
            seconds += record.get("seconds") or 0.0
            wrong_total += 1
            caught += bool(record["warnings"])
            first = ("warning:" + record["warnings"][0].split("warning:", 1)[1])[:90].replace("|", "/") \
                if record["warnings"] else ""  # without run.log's time
            wrong_rows.append(f"| {case.name} | {variant} | {ncc(record)} | {ncc(truth)} | {len(record['warnings'])} | {first} |")
    tail = ["", f"Wrong configs with at least one `warning:` line in run.log: {caught} of {wrong_total}.",
            f"CPU time of the runs (one thread each): {seconds / 60:.0f} min."]
    return "\n".join(head + rows + wrong_rows + tail) + "\n"


def _found(case: Case, auto: dict, truth: dict | None) -> str:
    """The calibration the auto run used against the truth: the angle its frame is turned by (after
    the quarter turns) at the start and, where the run refined its scan rotation, at the end, the defocus
    (measured, or the file's where nothing measured it), and any other auto (the loss, say) that came out
    unlike the truth run's."""
    if auto.get("ncc") is None:
        return auto.get("error", "")[-80:].replace("|", "/").replace("\n", " ")
    values = auto.get("auto_values") or {}
    defocus = values.get("experiment.defocus_A")
    said = f"frame {auto['frame_angle_deg']:+.2f}" if auto.get("frame_angle_deg") is not None else ""
    if said and auto.get("final_frame_angle_deg") is not None and abs(auto["frame_angle_deg"]) < 45:
        said += f" -> {auto['final_frame_angle_deg']:+.2f}"  # the run's scan rotation refined
    said += " deg" if said else ""
    said += (f", defocus {defocus:.0f} A" if isinstance(defocus, (int, float)) else
             f", defocus the file's {case.nominal_factor * case.defocus_A:.0f} A")
    said += f" (true {case.defocus_A:.0f})"
    theirs = (truth or {}).get("auto_values") or {}
    for key in ("optim.loss", "optim.preconditioned_step"):
        if key in values and key in theirs and values[key] != theirs[key]:
            said += f", {key.split('.')[-1]} {_short(values[key])} (truth run {_short(theirs[key])})"
    return said


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def measured(case: Case, cache: Path) -> str:
    """The calibration the autos find on ``case``'s file without a reconstruction (``load_data`` with every
    calibration auto, as ``init`` writes them) against the truth, one line: the angle between the found and
    the true R(theta)^T F (the map from the stored patterns' frame to the nominal raster's, all the data fix;
    "mirrored" where they differ by a mirror), the defocus and the run's warnings."""
    from ptyacc.config import load_config
    from ptyacc.data.load import load_data
    from ptyacc.data.orientation import frame_difference

    data = cache / "data" / f"{case.name}.h5"
    if not data.is_file():
        write_case(case, data)
    config = {"data": {"path": str(data), "bad_pixels": "auto", "transform": {"orientation": "auto", "descan": "auto"}},
              "experiment": {"defocus_A": "auto", "scan_rotation_deg": "auto"}}
    loaded = load_data(load_config(config))
    found = loaded.autocalibration
    mirrored, angle = frame_difference(tuple(bool(flag) for flag in found.flags), float(found.scan_rotation_deg),
                                       (case.transpose, case.flip_y, case.flip_x), case.rotation_deg)
    defocus = found.defocus_A
    warnings = sum(line.startswith("warning:") for line in loaded.checks)
    return (f"{case.name} frame {angle:+7.2f} deg{' mirrored' if mirrored else ''} defocus "
            f"{defocus:7.1f} A (true {case.defocus_A:.1f}, {(defocus - case.defocus_A) / abs(case.defocus_A):+.0%}) "
            f"warnings {warnings}{measures_said(loaded.checks, case)}  [{case.describe()}]")


COM_READ = re.compile(r"scan rotation from the centre of mass: ([-\d.]+) deg \(halves of the scan [-\d.]+ and [-\d.]+, "
                      r"\+-([\d.]+)\), transpose (\w+), flip_y (\w+), flip_x (\w+)")
PARALLAX_READ = re.compile(r"the bright-field parallax gives transpose (\w+), flip_y (\w+), flip_x (\w+) and a scan "
                           r"rotation of ([-\d.]+)(?: \+- ([\d.]+))? deg")


def measures_said(checks, case: Case) -> str:
    """Each measure's own frame against the truth, as the calibration's lines (``checks``) give it: the centre of
    mass's angle (with its halves' spread) and the bright-field parallax's (with its standard error), each turned
    into the truth's frame by ``frame_difference``; "mirrored" where its handedness is the other one."""
    from ptyacc.data.orientation import frame_difference

    text, said = "\n".join(checks), []
    truth = ((case.transpose, case.flip_y, case.flip_x), case.rotation_deg)
    for name, pattern, flags_at, angle_at, error_at in (("centre of mass", COM_READ, (3, 4, 5), 1, 2),
                                                         ("parallax", PARALLAX_READ, (1, 2, 3), 4, 5)):
        read = pattern.search(text)
        if read is None:
            continue
        mirrored, off = frame_difference(tuple(read.group(i) == "True" for i in flags_at), float(read.group(angle_at)),
                                         *truth)
        error = f" +-{float(read.group(error_at)):.2f}" if read.group(error_at) else ""
        said.append(f"{name} {'mirrored' if mirrored else f'{off:+.2f} deg'}{error}")
    return "; " + ", ".join(said) if said else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/ptyacc-matrix"), help="data, runs and results go here")
    parser.add_argument("--cases", nargs="+", help="only these cases (c00 ... c63; h<seed>-00 ... with --seed)")
    parser.add_argument("--seed", type=int, default=MATRIX_SEED,
                        help=f"draw the cases with this seed: {MATRIX_SEED} (the default) gives c00 ... c63, any other "
                             "64 fresh cases h<seed>-00 ... h<seed>-63 of the same distribution")
    parser.add_argument("--wide", action="store_true",
                        help="draw from the wider distribution (wide_cases: the energy, semi-angle, detector edge, step "
                             "and residual aberrations drawn too), cases w<seed>-00 ...")
    parser.add_argument("--oblong", action="store_true",
                        help="the same draw on rasters that are not square (their columns drawn apart; names o...)")
    parser.add_argument("--count", type=int, help="only the first COUNT cases drawn (a random subset of the 64)")
    parser.add_argument("--quick", action="store_true", help="one small case per sample and positions stored or not")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once (processes, one thread each)")
    parser.add_argument("--runs", nargs="+", default=["auto", "truth", "told", "wrong"],
                        choices=["auto", "truth", "told", "wrong"],
                        help="which runs of each case (told: the truth in the frame auto chose, after auto; wrong: "
                             "its deliberately wrong configs)")
    parser.add_argument("--rerun", action="store_true", help="run again what the cache holds (the data is kept)")
    parser.add_argument("--table", action="store_true", help="write the table from the cache and stop")
    parser.add_argument("--rescore", action="store_true", help="with --table: score the cached results.h5 again first")
    parser.add_argument("--list", action="store_true", help="print the cases and stop")
    parser.add_argument("--pool", type=Path, nargs="+", metavar="CACHE",
                        help="pool the told verdicts of these caches (one draw each) by sample, counts and coherence, "
                             "and stop")
    parser.add_argument("--measure", action="store_true",
                        help="the calibration the autos find on each case against the truth, no reconstruction")
    parser.add_argument("--vary", nargs=2, metavar=("BASE", "TAG"),
                        help="run each chosen case's cached BASE config (auto or told) again with --set's changes, as "
                             "variant BASE+TAG, and print its score beside BASE's")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                        help="with --vary: a config change, as ptyacc run --set takes it (repeatable)")
    parser.add_argument("--checks", action="store_true",
                        help="load each case with the right config and wrong ones (CHECKED), no reconstruction, and "
                             "count the warnings")
    args = parser.parse_args(argv)
    if args.sets and not args.vary:
        parser.error("--set changes the config of a --vary run: give --vary BASE TAG with it")
    if args.pool:
        print(pooled(args.pool))
        return 0
    every = drawn(args.seed, args.wide, args.oblong)[:args.count]
    chosen = quick_cases(every) if args.quick else every
    if args.cases:
        chosen = [case for case in chosen if case.name in args.cases]
    if args.list:
        for case in chosen:
            print(case.name, case.describe(), "wrong: " + " ".join(case.wrong) if case.wrong else "")
        return 0
    if args.vary:
        base, tag = args.vary
        for case in chosen:
            print(vary_line(case, base, varied(case, args.cache, base, tag, args.sets),
                            run_record(args.cache, case.name, base)), flush=True)
        return 0
    if args.measure:
        for case in chosen:
            print(measured(case, args.cache), flush=True)
        return 0
    if args.checks:
        if not args.table:
            os.environ["OMP_NUM_THREADS"] = "1"
            with ProcessPoolExecutor(max_workers=args.jobs) as pool:
                list(pool.map(check_case, chosen, [args.cache] * len(chosen), [args.rerun] * len(chosen)))
        text = checks_summary(args.cache, chosen)
        (args.cache / "checks.md").write_text(text)
        print(text)
        return 0
    if not args.table:
        os.environ["OMP_NUM_THREADS"] = "1"
        # cheapest first: a matrix cut short holds the most cases
        cheap_first = sorted(chosen, key=lambda case: case.scan * case.columns * case.iterations * len(variants(case)))
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(do_case, cheap_first, [args.cache] * len(chosen), [args.rerun] * len(chosen),
                          [tuple(args.runs)] * len(chosen)))
    if args.table and args.rescore:
        rescore(args.cache, chosen)
    text = summary(args.cache, chosen)
    (args.cache / "summary.md").parent.mkdir(parents=True, exist_ok=True)
    (args.cache / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
