"""A small writer of Thermo Fisher Velox .emd files for the tests (rsciio only reads them): an HDF5
file whose ``Version`` names the format, and a stack of camera frames in ``Data/Image/<uuid>``.

Velox stores a stack as ``Data`` (y, x, frame), one chunk per frame, and its metadata as JSON text
(all values strings, SI units) in ``Metadata``, a uint8 array with one column per frame.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

UUID = "4f8e3b2a9c1d4e5f8a7b6c5d4e3f2a1b"


def write_velox(path: Path, frames: np.ndarray, pixel_size: float, pixel_unit: str, voltage_V: float,
                camera_length_m: float) -> Path:
    """Velox's file of the camera ``frames`` (n, ky, kx), each pixel ``pixel_size`` in ``pixel_unit``
    (``1/m`` for diffraction), taken at ``voltage_V`` with ``camera_length_m``."""
    metadata = {"BinaryResult": {"PixelSize": {"width": str(pixel_size), "height": str(pixel_size)},
                                 "PixelUnitX": pixel_unit, "PixelUnitY": pixel_unit,
                                 "Offset": {"x": "0", "y": "0"}, "DetectorIndex": "0"},
                "Detectors": {"Detector-0": {"DetectorName": "BM-Ceta", "ExposureTime": "0.001"}},
                "Optics": {"AccelerationVoltage": str(voltage_V), "CameraLength": str(camera_length_m)},
                "Acquisition": {"AcquisitionStartDatetime": {"DateTime": "1700000000"}},
                "Scan": {"FrameTime": "0.001"}}
    text = np.frombuffer(json.dumps(metadata).encode(), np.uint8)
    n, ky, kx = frames.shape
    with h5py.File(path, "w") as f:
        f["Version"] = np.array([json.dumps({"format": "Velox", "version": "11"}).encode()])
        image = f.create_group(f"Data/Image/{UUID}")
        image.create_dataset("Data", data=np.moveaxis(frames, 0, -1), chunks=(ky, kx, 1))
        image["Metadata"] = np.repeat(np.pad(text, (0, 64))[:, None], n, axis=1)
    return Path(path)
