"""EMPAD .raw: headerless float32 frames, each (ky + 2, kx): the pixels, then two metadata rows."""

from __future__ import annotations

import re
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np

from ptyacc.data.formats.chunks import copy_rows
from ptyacc.data.formats.common import PatternsInfo, Prepare, RawPatterns, ReadOptions, check_file, no_datasets, no_key
from ptyacc.errors import DataError

KIND = "an EMPAD .raw file"
EXTENSIONS = (".raw",)
MAGIC = None  # known by its extension only
NAME_SCAN = re.compile(r"_x(\d+)_y(\d+)")


def open_file(path: Path, options: ReadOptions) -> AbstractContextManager[np.ndarray]:
    """The file's bytes, memory-mapped (an empty array for an empty file, which cannot be mapped)."""
    check_file(path, KIND)
    size = path.stat().st_size
    return nullcontext(np.memmap(path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8))


def inspect(raw: np.ndarray, path: Path, key: str | None, options: ReadOptions) -> PatternsInfo:
    """(N, ky, kx) with N = slow * fast, from ``options.scan_shape`` or a name like
    ``scan_x256_y128.raw`` (x fast, y slow); the file size must be N frames exactly. The
    attribute ``scan_shape`` is the name's when it has one."""
    no_key(path, key, KIND)
    k_y, k_x = options.detector_shape
    frame_rows = options.frame_rows or k_y + 2
    named = _name_scan_shape(path)
    scan_shape = options.scan_shape or named
    if scan_shape is None:
        raise DataError(f"{path}: an EMPAD .raw file does not store its scan shape and its name has no _x<fast>_y<slow>; "
                        "set data.scan_shape (convert: --scan-shape SLOW FAST)")
    frame_bytes = frame_rows * k_x * 4
    n = scan_shape[0] * scan_shape[1]
    found = raw.size
    if found != n * frame_bytes:
        holds = f" (the size of {found / frame_bytes:g} frames)" if found else ""
        raise DataError(f"{path}: expected {n * frame_bytes} bytes = {n} frames (scan_shape {list(scan_shape)}) of "
                        f"{frame_rows} x {k_x} float32 (detector_shape {list(options.detector_shape)}, frame_rows "
                        f"{frame_rows}), found {found} bytes{holds}")
    no_datasets(path, options, KIND)
    # the name's scan shape is the file's own, which a different options.scan_shape overrides
    return PatternsInfo("", (n, k_y, k_x), tuple(scan_shape), {"scan_shape": named or tuple(scan_shape)}, "empad")


def read(raw: np.ndarray, path: Path, info: PatternsInfo, options: ReadOptions, prepare: Prepare | None,
         rows: np.ndarray | None) -> RawPatterns:
    """Patterns, the metadata rows below each frame cut off."""
    k_y, k_x = info.shape[-2:]
    frame_rows = options.frame_rows or k_y + 2
    frames = raw.view("<f4").reshape(info.n_patterns, frame_rows, k_x)
    patterns = copy_rows(frames, (k_y, k_x), rows, prepare, lambda block: block[:, :k_y])
    return RawPatterns(patterns, info.scan_shape, info.attrs, str(path), format="empad")


def _name_scan_shape(path: Path) -> tuple[int, int] | None:
    match = NAME_SCAN.search(path.stem)
    if match is None or min(int(match[1]), int(match[2])) < 1:
        return None
    return int(match[2]), int(match[1])
