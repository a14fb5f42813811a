"""What the bright-field parallax reads on the calibration matrix's stored files, against the truth: for each
file ``ptyacc init`` is run as the matrix runs it, and the parallax's last measurement (the one that gives the
defocus) is caught: its real-space shifts' defocus, the Fourier regions' scale of it (``overlap_focus``), the
defocus it gives and whether it was used (the line ``init`` writes into the config). Whichever ptyacc is on
PYTHONPATH is measured.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/calibration_matrix/parallax_reading.py /tmp/holdout-mx/data/h54-0*.h5
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from pathlib import Path

import h5py
from click.testing import CliRunner

from ptyacc.commands.cli import cli
from ptyacc.data import parallax
from ptyacc.physics import wavelength_A


def reading(path: Path) -> str:
    """One row: the file, its true defocus, and what the parallax read."""
    caught = {}
    original = parallax.refined_scale

    def spy(*args):
        found = original(*args)
        caught.update(m=args[3], scale=found)
        return found

    parallax.refined_scale = spy
    try:
        with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stderr(io.StringIO()):
            CliRunner().invoke(cli, ["init", str(path), "-o", str(Path(folder) / "c.yaml"), "--force"])
            written = (Path(folder) / "c.yaml").read_text() if (Path(folder) / "c.yaml").exists() else ""
    finally:
        parallax.refined_scale = original
    with h5py.File(path) as f:
        truth = float(f["ground_truth"].attrs["defocus_A"])
        wavelength = wavelength_A(float(f.attrs["energy_eV"]))
    used = next((line for line in written.splitlines() if "defocus from the bright-field parallax" in line), "")
    said = "used" if "the measured defocus" in used else "not used"
    if "m" not in caught:
        return f"| {path.stem} | {truth:.1f} | - | - | - | {said} |"
    real = abs(parallax.defocus_of(caught["m"], wavelength))
    scale = caught["scale"]
    return (f"| {path.stem} | {truth:.1f} | {real / abs(truth):.3f} | {scale.scale:.3f} | "
            f"{real * scale.scale / abs(truth):.3f} | {said} |")


def main() -> None:
    print("| file | true defocus (A) | real-space shifts / true | Fourier regions' scale | parallax / true | by init |")
    print("|---|---|---|---|---|---|")
    for name in sys.argv[1:]:
        print(reading(Path(name)), flush=True)


if __name__ == "__main__":
    main()
