"""A small writer of Gatan DigitalMicrograph .dm3/.dm4 files for the tests (rsciio only reads them).

The file is a header and a tree of tags. Its structure (tag kinds, name lengths, counts, type codes)
is big-endian; the values are in the byte order the header names (little-endian here, as on a PC).
Version 4 differs from 3 in two ways: the counts and type codes are 8 bytes (not 4), and every tag
carries its size in bytes after its name. A tag group is written from a dict (named tags) or a
list (unnamed tags, as DM lists an image's dimensions); a leaf from a float (double), a bool, an int
(32-bit), a str (UTF-16 array, as DM stores text) or a NumPy array (the image data).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

GROUP, DATA = 20, 21  # tag kinds
ARRAY = 20  # type code of an array
SIMPLE_CODES = {np.dtype("int16"): 2, np.dtype("int32"): 3, np.dtype("uint16"): 4, np.dtype("uint32"): 5,
                np.dtype("float32"): 6, np.dtype("float64"): 7, np.dtype("bool"): 8}
IMAGE_DATA_TYPES = {np.dtype("int16"): 1, np.dtype("float32"): 2, np.dtype("int32"): 7, np.dtype("uint16"): 10,
                    np.dtype("uint32"): 11, np.dtype("float64"): 12}  # DM's ImageData.DataType


def write_dm(path: Path, data: np.ndarray, scales: list[float], units: list[str], image_tags: dict,
             version: int = 4) -> Path:
    """A DM file holding one image ``data`` (C order, e.g. (scan_y, scan_x, ky, kx)) with the
    per-axis ``scales`` and ``units`` in the same (C) order, and ``image_tags`` as its ImageTags.

    DM lists dimensions x first, so the dimensions and their calibrations are written reversed."""
    dimensions = [{"Origin": np.float32(0.0), "Scale": np.float32(s), "Units": u} for s, u in zip(scales, units)]
    image = {"ImageData": {"Calibrations": {"Brightness": {"Origin": np.float32(0.0), "Scale": np.float32(1.0),
                                                            "Units": "Counts"},
                                             "Dimension": dimensions[::-1]},
                           "Data": np.ascontiguousarray(data),
                           "DataType": IMAGE_DATA_TYPES[data.dtype],
                           "Dimensions": [int(n) for n in data.shape[::-1]],
                           "PixelDepth": data.dtype.itemsize},
             "ImageTags": image_tags,
             "Name": "ptyacc test"}
    root = _group_body({"ImageList": [image]}, version)
    header = struct.pack(">l", version) + _count(len(root) + 4, version) + struct.pack(">l", 1)  # 1: little-endian
    Path(path).write_bytes(header + root + b"\0" * 8)
    return Path(path)


def _count(n: int, version: int) -> bytes:
    """A count or type code: 4 bytes in DM3, 8 in DM4, big-endian."""
    return struct.pack(">q" if version == 4 else ">l", n)


def _group_body(tags: dict | list, version: int) -> bytes:
    """is_sorted, is_open, the number of tags, then the tags."""
    items = tags.items() if isinstance(tags, dict) else (("", value) for value in tags)
    entries = b"".join(_tag(name, value, version) for name, value in items)
    return b"\1\0" + _count(len(tags), version) + entries


def _tag(name: str, value, version: int) -> bytes:
    if isinstance(value, (dict, list)):
        kind, body = GROUP, _group_body(value, version)
    else:
        kind, body = DATA, b"%%%%" + _data_body(value, version)
    encoded = name.encode("latin-1")
    header = struct.pack(">bh", kind, len(encoded)) + encoded
    return header + (struct.pack(">q", len(body)) if version == 4 else b"") + body


def _data_body(value, version: int) -> bytes:
    """The type description (its length, then the codes) and the value, little-endian."""
    if isinstance(value, str):
        value = np.frombuffer(value.encode("utf-16-le"), "<u2")
    if isinstance(value, np.ndarray) and value.ndim > 0:
        codes = [ARRAY, SIMPLE_CODES[value.dtype], value.size]
        payload = value.astype(value.dtype.newbyteorder("<")).tobytes()
    else:
        dtype = np.dtype(type(value)) if isinstance(value, np.generic) else \
            np.dtype({bool: "bool", int: "int32", float: "float64"}[type(value)])
        codes, payload = [SIMPLE_CODES[dtype]], np.asarray(value, dtype.newbyteorder("<")).tobytes()
    return _count(len(codes), version) + b"".join(_count(c, version) for c in codes) + payload
