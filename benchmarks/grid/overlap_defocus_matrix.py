"""The Fourier regions' coherence search (``overlap_orientation.overlap_orientation``: flags, rotation and
defocus from the stored patterns and the file's nominal defocus, as ``init`` runs it) on calibration-matrix
files, with the pixels' images transformed as ``overlap_defocus_bias.py``'s variants say: the defocus found
against the file's ``/ground_truth`` one.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/grid/overlap_defocus_matrix.py --cache /tmp/mx c27 c38
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import overlap_defocus_bias as bias  # noqa: E402

from ptyacc.data import overlap_orientation as oo  # noqa: E402
from ptyacc.physics.wavelength import wavelength_A  # noqa: E402


def searched(variant: str):
    """``oo._Frequencies`` for ``variant``: ptyacc's own for ``ptyacc``."""
    if variant == "ptyacc":
        return oo._Frequencies

    class Variant(bias.Frequencies):
        def __init__(self, centred, shape, steps_A, dk_invA, good, pixels, frequencies):
            super().__init__(centred, shape, steps_A, dk_invA, variant, pixels, frequencies)
    return Variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--cache", required=True, help="the matrix's cache folder (data/<case>.h5)")
    parser.add_argument("--variants", nargs="+", default=["ptyacc", "periodic"], choices=("ptyacc",) + bias.VARIANTS)
    args = parser.parse_args()
    original = oo._Frequencies
    for case in args.cases:
        with h5py.File(Path(args.cache) / "data" / f"{case}.h5", "r") as f:
            attrs, true_A = dict(f.attrs), float(f["ground_truth"].attrs["defocus_A"])
            stored = f["patterns"][...]
        ny, nx = stored.shape[:2]
        stored = stored.reshape(ny * nx, *stored.shape[2:]).astype(np.float64)
        steps = np.diag([attrs["scan_step_A"]] * 2)
        cells = []
        try:
            for variant in args.variants:
                oo._Frequencies = searched(variant)
                found = oo.overlap_orientation(stored, (ny, nx), steps, wavelength_A(attrs["energy_eV"]),
                                               attrs["dk_invA"], attrs["defocus_A"])
                cells.append(f"{variant} {found.defocus_A:.1f} A ({found.defocus_A / true_A:.3f}, rotation "
                             f"{found.rotation_deg:.1f} deg, contrast {found.contrast:.1f})")
        finally:
            oo._Frequencies = original
        print(f"{case} true {true_A:.1f} A, nominal {attrs['defocus_A']:.1f} A: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
