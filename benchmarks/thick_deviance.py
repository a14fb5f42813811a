"""The final deviance's warning on thick crystals: right and wrong configs of abTEM's SrTiO3 [001]
(``tests/data/abtem/make_cases.py``'s crystal, no thermal vibrations) of several thicknesses, energies and
defoci, 12 x 12 positions 0.5 Å apart, Poisson counts at 1e5 and 1e6 electrons per pattern; each run from the
config ``ptyacc init`` writes, the frame given (orientation manual, rotation 0), one slice per unit cell.
Prints one JSON line per run: phase NCC with the truth (in the file's frame), the NCC of the vacancies' depth map
(``file_frame_ncc``'s ``depth``), the iterations after which the depth blur eased, the final deviance per counted
pixel, the misfit it stands for, whether the deviance's warning fired and named ``model.slices``.

    # 1. abTEM (its own venv): one crystal per line, cells kV defocus_A (--phonons 8: thermal vibrations)
    OMP_NUM_THREADS=1 /tmp/abtem-venv/bin/python benchmarks/thick_deviance.py make --work /tmp/thick 10 200 60
    # 2. ptyacc: every file under WORK, every variant (or those named by --variants)
    OMP_NUM_THREADS=1 python benchmarks/thick_deviance.py run --work /tmp/thick [--variants auto auto_one_stage]

Variants: ``auto`` the truth, ``optim.iterations: auto``; ``i20`` the truth, 20 iterations (init's); ``one20``
one slice (what init leaves), 20 iterations; ``rot10`` the scan rotation given 10 degrees off; ``df30`` the
defocus given 30 % long (the run's focus refinement is on, as init writes it); ``auto_one_stage`` and
``i20_one_stage`` as ``auto`` and ``i20`` with the depth blur in one stage (``depth_blur_start_slices: 1``, auto's
depth blur there); ``poisson`` and ``amplitude`` as ``auto`` with that loss given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from thick_vs_ptyrad import counted_copies, file_frame_ncc, init_config  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {"auto": ["optim.iterations=auto"], "i20": ["optim.iterations=20"],
            "one20": ["optim.iterations=20", "model.slices=1"],
            # one stage of the depth blur (depth_blur_start_slices as depth_blur_slices: auto's 1 there)
            "auto_one_stage": ["optim.iterations=auto", "optim.regularize.depth_blur_start_slices=1"],
            "i20_one_stage": ["optim.iterations=20", "optim.regularize.depth_blur_start_slices=1"],
            "rot10": ["optim.iterations=auto", "experiment.scan_rotation_deg=10"],
            "df30": ["optim.iterations=auto"],
            # the loss forced either way
            "poisson": ["optim.iterations=auto", "optim.loss=poisson"],
            "amplitude": ["optim.iterations=auto", "optim.loss=amplitude"]}


def make(work: Path, cells: int, kv: float, defocus_A: float, seed: int = 5, phonons: int = 0,
         doses: tuple[float, ...] = (1e5, 1e6)) -> None:
    """abTEM's expected patterns of the crystal (the mean of ``phonons`` frozen-phonon configurations where given),
    then Poisson counts at each of ``doses`` per pattern."""
    sys.path.insert(0, str(REPO / "tests" / "data" / "abtem"))
    import make_cases

    work.mkdir(parents=True, exist_ok=True)
    name = f"c{cells}_{int(kv)}kv_df{int(defocus_A)}" + (f"_fp{phonons}" if phonons else "")
    make_cases.ENERGY_EV = kv * 1e3
    make_cases.CASES[name] = dict(cells_deep=cells, tilt=(0.0, 0.0), defocus=defocus_A, scan=(12, 12), step=0.5,
                                  rotation=0.0, dose=0.0, phonons=phonons)
    expected = work / f"{name}_expected.h5"
    if not expected.is_file():
        make_cases.simulate(name, expected)
    counted_copies(expected, {dose: work / f"{name}_{dose:.0e}.h5" for dose in doses}, seed)


def run(path: Path, variant: str) -> dict:
    """One variant on one file (module docstring)."""
    import h5py
    import yaml

    import ptyacc
    from ptyacc.data.trouble import relative_misfit

    config = init_config(path, path.with_suffix(".yaml"), cells=int(path.name.split("_")[0][1:]))
    with h5py.File(path) as f:
        defocus_A = float(f.attrs["defocus_A"])
    sets = ["data.transform.orientation=manual", "experiment.scan_rotation_deg=0", *VARIANTS[variant]]
    sets += [f"experiment.defocus_A={1.3 * defocus_A:g}"] if variant == "df30" else []
    rec = ptyacc.reconstruct(ptyacc.load_config(config, sets), write=False)
    said = [text for text in yaml.safe_load(rec.results.attrs["warnings"]) if "final Poisson deviance" in text]
    counts = float(rec.results.attrs.get("counts_per_counted_pixel", 0.0))
    deviance = rec.poisson_deviance
    return {"file": path.name, "variant": variant, "loss": rec.config.optim.loss, "iterations": len(rec.loss),
            "ncc": round(file_frame_ncc(rec, path), 4), "depth_ncc": round(file_frame_ncc(rec, path, depth=True), 4),
            "eased_after": rec.results.attrs.get("depth_blur_eased_after_iterations"),
            "deviance": None if deviance is None else round(deviance, 2),
            "misfit": None if deviance is None or not counts else round(relative_misfit(deviance, counts), 3),
            "warned": bool(said), "slices_named": bool(said) and "model.slices" in said[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["make", "run"])
    parser.add_argument("crystal", nargs="*", type=float, help="make: cells kV defocus_A")
    parser.add_argument("--work", type=Path, default=Path("/tmp/thick"))
    parser.add_argument("--phonons", type=int, default=0, help="make: frozen-phonon configurations (0: none)")
    parser.add_argument("--doses", nargs="+", type=float, default=[1e5, 1e6], help="make: electrons per pattern")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_intermixed_args()  # make --work DIR 10 200 60: the crystal after the option
    if args.step == "make":
        cells, kv, defocus_A = args.crystal
        return make(args.work, int(cells), kv, defocus_A, phonons=args.phonons, doses=tuple(args.doses))
    for path in sorted(args.work.glob("c*_1e+0?.h5")):
        for variant in args.variants:
            print(json.dumps(run(path, variant)), flush=True)


if __name__ == "__main__":
    main()
