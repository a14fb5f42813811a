"""A dark offset (pedestal) in electron counts: the demo's abTEM patterns with a Poisson offset added to every pixel,
reconstructed with configs/demo.yaml's settings four ways, each phase scored against abTEM's projected potential.

    python benchmarks/dark_offset.py [--offsets 0 0.3 1 3 20] [--iterations 20] [--out /tmp/ptyacc-dark-offset]

The four ways: the defaults (``model.background: auto``: fitted from the dark field's floor where it is flat);
``model.background: false`` (the offset left in); ``model.background: true`` with ``background_start_counts: 0`` (a
background fitted from zero); the offset subtracted from the counts and clipped at zero, with the defaults. Prints a
Markdown table: the floor measured (``detector_floor``), the NCC of each way (best sub-pixel shift) and the final
Poisson deviance per counted pixel where the run gives one. One process, one thread each run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import h5py
import numpy as np
import torch

import ptyacc
from ptyacc.optim.autos import detector_floor
from ptyacc.physics import wavelength_A
from ptyacc.results.quality import best_shift_ncc

ROOT = Path(__file__).parents[1]
DEMO = ROOT / "ptyacc" / "demo" / "demo_mos2.h5"
WAYS = {
    "auto": [],
    "background false": ["model.background=false"],
    "fitted from zero": ["model.background=true", "model.background_start_counts=0"],
    "subtracted": [],
}


def offset_file(folder: Path, offset: float, subtracted: bool = False) -> Path:
    """The demo with a Poisson offset of ``offset`` counts per pixel (seed 0); ``subtracted``: then the offset taken off
    again and the counts clipped at zero."""
    path = folder / f"offset{offset:g}{'-subtracted' if subtracted else ''}.h5"
    with h5py.File(DEMO) as demo, h5py.File(path, "w") as f:
        f.attrs.update(demo.attrs)
        patterns = demo["patterns"][()].astype(np.int64)
        patterns = patterns + np.random.default_rng(0).poisson(offset, patterns.shape) if offset else patterns
        if subtracted:
            patterns = np.clip(patterns - offset, 0, None)
        f["patterns"] = np.rint(patterns).astype(np.uint16)
        f["positions_A"] = demo["positions_A"][()]
    return path


def measured_floor(path: Path):
    with h5py.File(path) as f:
        patterns, attrs = f["patterns"][()].astype(np.float64), dict(f.attrs)
    mean = torch.from_numpy(np.fft.ifftshift(patterns.reshape(-1, *patterns.shape[-2:]).mean(0)))
    return detector_floor(mean, wavelength_A(attrs["energy_eV"]), attrs["semiangle_mrad"], attrs["dk_invA"])


def scored(path: Path, out: Path, iterations: int, sets: list[str]) -> tuple[float, float | None]:
    config = ptyacc.load_config(ROOT / "configs" / "demo.yaml", [
        f"data.path={path}", f"output.dir={out}", f"optim.iterations={iterations}", "runtime.progress=false",
        "runtime.threads=1", "output.figures=false", *sets])
    rec = ptyacc.reconstruct(config)
    with h5py.File(DEMO) as f:
        truth = f["ground_truth/phase"][()].astype(float)
    ncc, _ = best_shift_ncc(rec.results.phase, rec.results.origin_A, rec.results.dx_A, rec.data.positions_A, truth,
                            levels=((0.5, 2), (0.1, 4)))
    return ncc, rec.poisson_deviance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offsets", type=float, nargs="+", default=[0.0, 0.3, 1.0, 3.0, 20.0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("/tmp/ptyacc-dark-offset"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print("| offset (counts per pixel) | floor: outer, inner, power, flat | " + " | ".join(WAYS) + " |")
    print("|---" * (2 + len(WAYS)) + "|")
    for offset in args.offsets:
        path = offset_file(args.out, offset)
        floor = measured_floor(path)
        cells = []
        for way, sets in WAYS.items():
            if way == "subtracted" and not offset:
                cells.append("-")
                continue
            source = offset_file(args.out, offset, subtracted=True) if way == "subtracted" else path
            ncc, deviance = scored(source, args.out / f"{offset:g}-{way.replace(' ', '-')}", args.iterations, sets)
            cells.append(f"{ncc:.3f}" + ("" if deviance is None else f" ({deviance:.2f})"))
        print(f"| {offset:g} | {floor.outer:.3g}, {floor.inner:.3g}, {floor.slope:.2f}, {floor.flat} | "
              + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
