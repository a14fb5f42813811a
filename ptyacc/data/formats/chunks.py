"""The chunked copy of pattern rows from a stored array (h5py dataset, memory map, array) into
one float32 (n, ky, kx) array, each chunk prepared as it arrives; every format's ``read`` uses it."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from functools import partial

import h5py
import numpy as np

from ptyacc.data.formats.common import Prepare

CHUNK_BYTES = 64 * 2**20  # the most read and converted at a time (as float32)
MIN_CHUNK_BYTES = 2**20
CHUNKS_AT_LEAST = 32  # the few chunk-sized copies alive at a time cost about a tenth of the result


def copy_rows(source, pattern_shape: tuple[int, int], rows: np.ndarray | None, prepare: Prepare | None,
              frame: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """(n, ky, kx) float32: the patterns ``rows`` of ``source``, or all of them.

    source: (A, [B,] sy, sx) sliceable along its first axis (h5py dataset, memmap, array);
            pattern i is the i-th frame of its leading axes in C order.
    rows:   strictly increasing indices; only the stretches of ``source`` between wanted
            patterns are read, then converted to float32, a chunk at a time: besides the
            result, memory holds a few chunk-sized copies only, each at most CHUNK_BYTES and
            1 / CHUNKS_AT_LEAST of the result (at least MIN_CHUNK_BYTES).
    frame:  maps a block of stored frames (c, sy, sx) to patterns (c, ky, kx) (crop, transpose).
    prepare: maps each float32 chunk (c, ky, kx) to its final form (c, ky', kx') as it arrives;
            called once on an empty chunk (0, ky, kx) first to learn (ky', kx').
    """
    stored = tuple(source.shape[-2:])
    per_first = int(np.prod(source.shape[1:-2]))  # patterns per index of the first axis
    wanted = _checked_rows(rows, source.shape[0] * per_first)
    release, by_runs = _page_release(source), _reads_runs(source, rows)  # asked once, before the chunks
    empty = np.zeros((0, *pattern_shape), dtype=np.float32)
    out_shape = pattern_shape if prepare is None else prepare(empty).shape[1:]
    patterns = np.empty((len(wanted), *out_shape), dtype=np.float32)
    budget = min(CHUNK_BYTES, max(MIN_CHUNK_BYTES, patterns.nbytes // CHUNKS_AT_LEAST))
    per_chunk = max(1, budget // (max(4, source.dtype.itemsize) * stored[0] * stored[1]))  # patterns
    start = 0
    while start < len(wanted):
        first = int(wanted[start])
        row = first // per_first
        end = min(start + per_chunk, len(wanted))
        if per_chunk >= per_first and by_runs and 2 * (end - start) < int(wanted[end - 1]) - first + 1:
            block = _runs(source, wanted[start:end])
        elif per_chunk >= per_first:  # whole indices of the first axis
            base = row * per_first
            end = int(np.searchsorted(wanted, base + (per_chunk // per_first) * per_first))
            block = source[row:int(wanted[end - 1]) // per_first + 1].reshape(-1, *stored)
        else:  # a stretch of one index of the first axis of a 4D source
            base = first
            end = int(np.searchsorted(wanted, min(first + per_chunk, (row + 1) * per_first)))
            block = source[row, first - row * per_first:int(wanted[end - 1]) - row * per_first + 1]
        if len(block) > end - start:
            block = block[wanted[start:end] - base]
        if frame is not None:
            block = frame(block)
        if prepare is None:
            patterns[start:end] = block
        else:
            patterns[start:end] = prepare(block.astype(np.float32, copy=False))
        if release is not None:
            release()
        start = end
    return patterns


def _page_release(source) -> Callable[[], None] | None:
    """What unmaps the file pages a memory-mapped ``source`` (.npy, EMPAD) has touched, called after
    each chunk, so that they stop counting in this process's resident memory (they stay in the page
    cache): without it a run that streams a file (``data.hold: disk``) would show all of it resident
    after one epoch. None for other sources, and on Windows."""
    mapping = getattr(source, "_mmap", None)  # numpy.memmap and its views keep the mmap here
    if mapping is None or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    return partial(mapping.madvise, mmap.MADV_DONTNEED)


def _reads_runs(source, rows: np.ndarray | None) -> bool:
    """Whether chunks of ``rows`` that fill less than half of the stretch spanning them are read
    run by run (``_runs``) instead: for chosen rows of a 3D HDF5 dataset only (a memory map touches
    only the rows taken from a stretch anyway, and all rows are one stretch)."""
    return rows is not None and isinstance(source, h5py.Dataset) and source.ndim == 3


def _runs(source, rows: np.ndarray) -> np.ndarray:
    """(len(rows), ky, kx) the ``rows`` (strictly increasing) of ``source``, each run of
    consecutive rows read as one slice (h5py reads slices far faster than a selection of points)."""
    starts = np.flatnonzero(np.diff(rows, prepend=-2) != 1)
    ends = np.append(starts[1:], len(rows))
    return np.concatenate([source[int(rows[a]):int(rows[b - 1]) + 1] for a, b in zip(starts, ends, strict=True)])


def _checked_rows(rows: np.ndarray | None, n: int) -> np.ndarray:
    if rows is None:
        return np.arange(n)
    wanted = np.asarray(rows)
    if wanted.ndim != 1 or (wanted.size and wanted.dtype.kind not in "iu"):
        raise ValueError(f"rows: expected 1-D integer pattern indices, got shape {wanted.shape} dtype {wanted.dtype}")
    wanted = wanted.astype(np.int64)
    if wanted.size and (wanted[0] < 0 or wanted[-1] >= n or (np.diff(wanted) <= 0).any()):
        raise ValueError(f"rows: expected strictly increasing indices in [0, {n}), got {wanted.min()}..{wanted.max()}")
    return wanted
