"""``ptyacc export``: a run's object and probe as HyperSpy (.hspy) and NCEM/Berkeley EMD (.emd)
files through RosettaSciIO (the optional extra ``ptyacc[formats]``), with each axis' name, unit,
scale and offset, so that they open calibrated in HyperSpy, py4DSTEM or Fiji (through its
HDF5 readers). Lengths in nm for electrons, µm for X-rays.

- ``object.{hspy,emd}``        complex (slices, Ny, Nx) transmission of object mode 0; the slice axis
  is the depth (scale: the slice thickness), y and x start at the object's origin (origin_A)
- ``object_phase.{hspy,emd}``  float32 (Ny, Nx) phase summed over slices (rad)
- ``probe.{hspy,emd}``         complex (modes, K, K), x and y centred on the window's centre pixel
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np

from ptyacc.errors import OutputError
from ptyacc.results.h5file import Results
from ptyacc.results.outdir import atomic_write
from ptyacc.version import __version__

FORMATS = ("hspy", "emd")


def export_hyperspy(results: Results, folder: Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """The files of the module docstring in ``folder``, one per item and format; their paths."""
    writers = {}
    for name in formats:
        try:
            writers[name] = importlib.import_module(f"rsciio.{name}").file_writer
        except ImportError:
            raise OutputError(f"ptyacc export writes .{name} through RosettaSciIO: pip install 'ptyacc[formats]'") from None
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, signal in signals(results).items():
        for name, writer in writers.items():
            path = folder / f"{stem}.{name}"
            with atomic_write(path, signal["data"].nbytes, "free space or choose another folder (-o)") as tmp:
                writer(str(tmp), signal)
            written.append(path)
    return written


def signals(results: Results) -> dict[str, dict]:
    """RosettaSciIO signal dictionaries of the object, its summed phase and the probe."""
    unit, per_A = ("µm", 1e-4) if results.is_xray else ("nm", 0.1)
    dx = results.dx_A * per_A
    (y0, x0), slices = (v * per_A for v in results.origin_A), results.object[0]
    thickness_A = results.attrs.get("slice_thickness_A", (results.config.get("model") or {}).get("slice_thickness_A", 0.0))

    def lateral(size_y: int, size_x: int, start_y: float, start_x: float) -> list[dict]:
        return [_axis("y", size_y, dx, start_y, unit), _axis("x", size_x, dx, start_x, unit)]

    k = results.probe.shape[-1]
    return {
        "object": _signal(slices, [_axis("z", len(slices), thickness_A * per_A, 0.0, unit, navigate=True),
                                   *lateral(*slices.shape[-2:], y0, x0)], "object transmission"),
        "object_phase": _signal(np.angle(slices).sum(axis=0).astype(np.float32), lateral(*slices.shape[-2:], y0, x0),
                                "object phase (rad), summed over slices"),
        "probe": _signal(results.probe, [_axis("mode", len(results.probe), 1.0, 0.0, "", navigate=True),
                                         *lateral(k, k, -(k // 2) * dx, -(k // 2) * dx)], "probe"),
    }


def _axis(name: str, size: int, scale: float, offset: float, units: str, navigate: bool = False) -> dict:
    return {"name": name, "size": int(size), "scale": float(scale), "offset": float(offset), "units": units,
            "navigate": navigate}


def _signal(data: np.ndarray, axes: list[dict], title: str) -> dict:
    """The dictionary RosettaSciIO's writers take (HyperSpy's signal dictionary)."""
    return {"data": data, "axes": axes, "metadata": {"General": {"title": title}, "Signal": {"signal_type": ""}},
            "original_metadata": {}, "tmp_parameters": {}, "attributes": {"_lazy": False}, "learning_results": {},
            "models": {}, "package_info": {"name": "ptyacc", "version": __version__}}
