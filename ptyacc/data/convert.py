"""Rewriting any pattern file that ``read_patterns`` reads in ptyacc's HDF5 layout, which
``data.path`` then reads with no other keys:

- ``patterns``    float32 (N, ky, kx), zero frequency at the centre, orientation as the source
- ``positions_A`` float64 (N, 2) probe centres (y, x) in Å, when the source has them
- ``mask``        uint8 (ky, kx), 1 = good pixel, 0 = bad, when the source has one
- ``background``  float32 (ky, kx) dark/background counts (not subtracted from the patterns),
  when the source has one
- root attributes: the source's calibration in ptyacc's names (``energy_eV``, ``wavelength_A``,
  ``detector_distance_m``, ``detector_pixel_m``, ...; all of an HDF5 source's root attributes),
  ``scan_shape`` [slow, fast] when known, ``source_file`` and ``source_format``
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import h5py
import numpy as np

from ptyacc.data.readers import PatternFile, PatternsInfo, ReadOptions, open_patterns
from ptyacc.errors import DataError

BATCH_BYTES = 256 * 2**20
CHUNK_BYTES = 2**20


def convert_patterns(source: Path, target: Path, key: str | None = None, streaming: bool = False,
                     **options) -> tuple[PatternsInfo, list[str]]:
    """Write the patterns of ``source`` (dataset or variable ``key``; ``options`` as for
    ``read_patterns``) to ``target`` in ptyacc's layout, a batch at a time so that no more than
    BATCH_BYTES of patterns are in memory. ``source`` is opened once; ``target`` appears only
    once complete. ``streaming``: chunks of one pattern, uncompressed, so that ``data.hold:
    disk`` reads just the patterns of each step (default: compressed chunks of CHUNK_BYTES).
    Returns the source's PatternsInfo and the names of the datasets written."""
    source, target = Path(source), Path(target)
    if target.exists() and target.resolve() == source.resolve():
        raise DataError(f"{target}: is the input file; write the converted file elsewhere")
    with open_patterns(source, key, **options) as opened:
        info = opened.info
        scan_shape = ReadOptions(**options).scan_shape or info.scan_shape
        if scan_shape is not None and math.prod(scan_shape) != info.n_patterns:
            raise DataError(f"{source}: scan_shape {list(scan_shape)} gives {math.prod(scan_shape)} positions but "
                            f"the file holds {info.n_patterns} patterns")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        try:
            with h5py.File(partial, "w") as f:
                _write(opened, f, scan_shape, streaming)
                written = list(f.keys())
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return info, written


def _write(source: PatternFile, f: h5py.File, scan_shape: tuple[int, int] | None, streaming: bool = False) -> None:
    """Patterns batch by batch, then the mask, background, positions and attributes."""
    info = source.info
    n, (k_y, k_x) = info.n_patterns, info.shape[-2:]
    if streaming:
        packing = {"chunks": (1, k_y, k_x)}
    else:
        packing = {"chunks": (min(n, max(1, CHUNK_BYTES // (4 * k_y * k_x))), k_y, k_x), "compression": "gzip",
                   "shuffle": True}
    patterns = f.create_dataset("patterns", (n, k_y, k_x), np.float32, **packing)
    per_batch = max(1, BATCH_BYTES // (4 * k_y * k_x))
    for start in range(0, n, per_batch):
        rows = np.arange(start, min(n, start + per_batch))
        patterns[start:start + len(rows)] = source.read(rows).patterns
    if info.positions_A is not None:
        f["positions_A"] = info.positions_A
    if info.mask is not None:
        f["mask"] = info.mask.astype(np.uint8)
        f["mask"].attrs["meaning"] = "1 = good pixel, 0 = bad"
    if info.background is not None:
        f["background"] = info.background.astype(np.float32)
    f.attrs.update(info.attrs)
    if scan_shape is not None:
        f.attrs["scan_shape"] = np.asarray(scan_shape)
    f.attrs.update(source_file=str(source.path), source_format=info.format)
