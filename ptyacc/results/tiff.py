"""``ptyacc export``: a run's object phase and probe as 32-bit float TIFF files (``tifffile``, the
optional extra ``ptyacc[formats]``), for ImageJ/Fiji, DigitalMicrograph and the like.

Written from results.h5 (object mode 0, probe modes as they are), each a stack with its pixel
size in ImageJ's metadata (nm for electrons, µm for X-rays):

- ``object_phase.tif``         (Ny, Nx) phase summed over slices (rad)
- ``object_phase_slices.tif``  (slices, Ny, Nx) phase of each slice (rad)
- ``probe_amplitude.tif``, ``probe_phase.tif``  (modes, K, K) amplitude and phase (rad)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ptyacc.errors import OutputError
from ptyacc.results.h5file import Results
from ptyacc.results.outdir import atomic_write


def export_tiff(results: Results, folder: Path) -> list[Path]:
    """The TIFF files of the module docstring in ``folder``; their paths."""
    try:
        import tifffile
    except ImportError:
        raise OutputError("ptyacc export writes TIFF with tifffile: pip install 'ptyacc[formats]'") from None
    unit, per_A = ("micron", 1e-4) if results.is_xray else ("nm", 0.1)
    pixels_per_unit = 1.0 / (results.dx_A * per_A)
    slices = np.angle(results.object[0]).astype(np.float32)  # (slices, Ny, Nx)
    images = {"object_phase.tif": slices.sum(axis=0), "object_phase_slices.tif": slices,
              "probe_amplitude.tif": np.abs(results.probe).astype(np.float32),
              "probe_phase.tif": np.angle(results.probe).astype(np.float32)}
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, image in images.items():
        with atomic_write(folder / name, image.nbytes, "free space or choose another folder (-o)") as tmp:
            tifffile.imwrite(tmp, image.astype(np.float32), imagej=True, resolution=(pixels_per_unit, pixels_per_unit),
                             metadata={"unit": unit, "axes": "YX" if image.ndim == 2 else "ZYX"})
        written.append(folder / name)
    return written
