"""Preparation of the patterns as they are read, and what it does to the mask and the sampling.

Order (``data.transform`` and the ``data`` policies), on each chunk (c, ky, kx) as stored:

1. subtract the file's dark/background frame (``data.subtract_background``), then divide by the
   detector's gain (``data.flat_field``, ``flat_field.py``)
2. crop to ``crop`` x ``crop`` pixels, centred on the stored zero frequency (ky // 2, kx // 2)
   or starting at ``crop_offset`` [row, col] of the stored pattern
3. NaN/Inf and negative values (``data.nonfinite``, ``data.negative``), pixel by pixel
4. bin: sum ``bin`` x ``bin`` blocks (counts stay counts)
5. orientation: transpose, then flip_y, then flip_x; a flip reverses the pixels (i -> n - 1 - i) or, in
   the far field with ``flip_about_zero``, turns them about the zero frequency (i -> n - i, modulo n,
   on an even size), for flips the orientation auto measured: whichever leaves the bright-field
   disk's centre nearer the zero frequency (``autocalibration._centred_orientation``)
6. zero-pad to ``pad`` x ``pad`` pixels (``upsample`` K with ``upsample`` > 1), centred; the padded
   pixels are left out of the loss
7. far field: ifftshift to the model's layout (zero frequency at [0, 0])

The detector mask follows steps 2, 4 (a binned pixel is good only when all its pixels are),
5, 6 and 7. Calibration: ``experiment.dk_invA``, ``dx_A`` and ``detector_pixel_m`` describe the
patterns as stored; binning multiplies the reciprocal (far field) or detector (near field)
pixel by ``bin``, and in the far field the object pixel is dx = 1 / (K dk) with K the final
size, so crop and pad change it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ptyacc.config import TransformConfig
from ptyacc.data.formats.cxi import DETECTOR as CXI_DETECTOR
from ptyacc.errors import DataError


@dataclass(frozen=True)
class Preparation:
    """The geometry of ``data.transform`` for patterns of ``stored_shape`` (ky, kx).

    crop_start, crop_shape: the kept block of the stored pattern, (row, col) and (rows, cols)
    bin:        pixels summed along each axis
    pad:        final size after zero padding, or None
    far_field:  whether the patterns are diffraction patterns (ifftshifted at the end)
    flip_about_zero: per axis (y, x), whether that axis's flip turns the pixels about the zero
                frequency (n // 2) instead of reversing them. On an even size the two differ by one
                pixel: reversing is the inverse of a detector read out backwards (its disk, centred
                at n // 2, is stored at n // 2 - 1), turning is the exact image of k -> -k, which is
                what a flip chosen only to bring the scan rotation near 0 stands for.
    """

    stored_shape: tuple[int, int]
    crop_start: tuple[int, int]
    crop_shape: tuple[int, int]
    bin: int
    transpose: bool
    flip_y: bool
    flip_x: bool
    pad: int | None
    far_field: bool
    flip_about_zero: tuple[bool, bool] = (False, False)

    @classmethod
    def from_config(cls, transform: TransformConfig, stored_shape: tuple[int, int], far_field: bool,
                    source: str, attrs: dict | None = None) -> Preparation:
        """Check ``transform`` against patterns of ``stored_shape`` in the file ``source``, whose
        calibration ``attrs`` give the detector's basis vectors for ``orientation: auto``."""
        if transform.orientation == "auto":
            basis = (attrs or {}).get("detector_basis_vectors_m")
            if basis is None:
                raise DataError(f"{source}: data.transform.orientation: auto needs the detector's basis_vectors "
                                f"({CXI_DETECTOR}/basis_vectors in a CXI file), found none; set transpose, flip_y and flip_x")
            transform = dataclasses.replace(transform, **orientation_from_basis(basis, source))
        k_y, k_x = (int(s) for s in stored_shape)
        if transform.crop is None:
            start, shape = (0, 0), (k_y, k_x)
        else:
            c = transform.crop
            start = tuple(transform.crop_offset) if transform.crop_offset else (k_y // 2 - c // 2, k_x // 2 - c // 2)
            shape = (c, c)
            if min(start) < 0 or start[0] + c > k_y or start[1] + c > k_x:
                where = f"at offset {list(start)}" if transform.crop_offset else "centred"
                raise DataError(f"{source}: data.transform.crop: a {c} x {c} crop {where} does not fit in the "
                                f"stored {k_y} x {k_x} patterns")
        b = transform.bin
        if shape[0] % b or shape[1] % b:
            raise DataError(f"{source}: data.transform.bin: {b} does not divide the {'cropped' if transform.crop else 'stored'} "
                            f"pattern size {shape[0]} x {shape[1]}; crop to a multiple of {b} (data.transform.crop)")
        binned = (shape[0] // b, shape[1] // b)
        if transform.upsample > 1:
            if not far_field:
                raise DataError(f"{source}: data.transform.upsample: {transform.upsample} makes the object's pixels finer "
                                "in the far field only; near-field pixels are the detector's (use 1)")
            transform = dataclasses.replace(transform, pad=transform.upsample * max(binned))
        if transform.pad is not None and transform.pad < max(binned):
            raise DataError(f"{source}: data.transform.pad: {transform.pad} is smaller than the {binned[0]} x "
                            f"{binned[1]} px patterns after crop and bin; pad to at least {max(binned)}")
        prep = cls((k_y, k_x), start, shape, b, transform.transpose, transform.flip_y, transform.flip_x,
                   transform.pad, far_field, flip_about_zero=tuple(bool(v) for v in transform.flip_about_zero))
        final = prep.shape
        if final[0] != final[1]:
            raise DataError(f"{source}: patterns must be square, found {final[0]} x {final[1]}"
                            + ("" if prep.changes_shape else "; crop them with data.transform.crop"))
        return prep

    @property
    def changes_shape(self) -> bool:
        return self.crop_shape != self.stored_shape or self.bin != 1 or self.pad is not None

    @property
    def shape(self) -> tuple[int, int]:
        """(ky, kx) of the prepared patterns."""
        rows, cols = self.crop_shape[0] // self.bin, self.crop_shape[1] // self.bin
        if self.transpose:
            rows, cols = cols, rows
        return (self.pad, self.pad) if self.pad is not None else (rows, cols)

    def object_pixel_A(self, stored_dx_A: float) -> float:
        """Object pixel (Å) of the prepared patterns, given the one of the stored patterns
        (``stored_dx_A`` = 1 / (kx_stored dk)). Far field: dk grows by ``bin`` and dx = 1 / (K dk)
        = stored_dx_A kx_stored / (bin K); near field: the image pixel grows by ``bin``."""
        if not self.far_field:
            return stored_dx_A * self.bin
        return stored_dx_A * self.stored_shape[1] / (self.bin * self.shape[1])

    def centre_after(self, offset_px: tuple[float, float]) -> tuple[tuple[float, float], tuple[bool, bool]]:
        """Where a bright-field disk found ``offset_px`` (y, x) px from the zero frequency in patterns
        prepared without transpose or flips lands after this preparation's, each flip the one of its two
        (reversing, or turning about the zero frequency) that leaves it nearer the zero frequency; and
        per axis (y, x) whether that is the turn. On an even size n reversing maps an offset o to
        -o - 1, turning to -o; on an odd size both to -o (reversing is kept)."""
        rows, cols = self.crop_shape[0] // self.bin, self.crop_shape[1] // self.bin
        sizes = (cols, rows) if self.transpose else (rows, cols)
        offsets = tuple(offset_px[::-1]) if self.transpose else tuple(offset_px)
        landed, about = [], []
        for offset, flipped, size in zip(offsets, (self.flip_y, self.flip_x), sizes, strict=True):
            reversed_offset = -offset - (1 if size % 2 == 0 else 0)
            turn = flipped and size % 2 == 0 and abs(-offset) < abs(reversed_offset)
            landed.append(float(-offset if turn else reversed_offset if flipped else offset))
            about.append(bool(turn))
        return (landed[0], landed[1]), (about[0], about[1])

    def keeping_centre(self, offset_px: tuple[float, float]) -> Preparation:
        """This preparation with each flip chosen by ``centre_after`` for a disk found ``offset_px`` (y, x)
        px from the zero frequency in patterns prepared without transpose or flips."""
        return dataclasses.replace(self, flip_about_zero=self.centre_after(offset_px)[1])

    def crop(self, chunk: np.ndarray) -> np.ndarray:
        """(c, ky, kx) as stored -> (c, crop, crop), a view."""
        (r0, c0), (rows, cols) = self.crop_start, self.crop_shape
        return chunk[:, r0:r0 + rows, c0:c0 + cols]

    def binned(self, chunk: np.ndarray, reduce: str = "sum") -> np.ndarray:
        """(c, rows, cols) -> (c, rows / bin, cols / bin): ``bin`` x ``bin`` blocks summed
        (``reduce="sum"``, in the chunk's dtype) or required all true (``"all"``, for masks)."""
        b = self.bin
        if b == 1:
            return chunk
        count, rows, cols = chunk.shape
        blocks = chunk.reshape(count, rows // b, b, cols // b, b)
        return blocks.all(axis=(2, 4)) if reduce == "all" else blocks.sum(axis=(2, 4), dtype=chunk.dtype)

    def orient_and_pad(self, chunk: np.ndarray) -> np.ndarray:
        """Transpose, flips, centred zero padding and (far field) the ifftshift; a new array."""
        if self.transpose:
            chunk = chunk.transpose(0, 2, 1)
        if self.flip_y:
            chunk = chunk[:, ::-1, :]
            if self.flip_about_zero[0] and chunk.shape[1] % 2 == 0:
                chunk = np.roll(chunk, 1, axis=1)
        if self.flip_x:
            chunk = chunk[:, :, ::-1]
            if self.flip_about_zero[1] and chunk.shape[2] % 2 == 0:
                chunk = np.roll(chunk, 1, axis=2)
        if self.pad is not None:
            chunk = self._padded(chunk)
        return np.fft.ifftshift(chunk, axes=(-2, -1)) if self.far_field else np.ascontiguousarray(chunk)

    def _padded(self, chunk: np.ndarray) -> np.ndarray:
        """Centred: stored zero frequency (rows // 2, cols // 2) lands on (pad // 2, pad // 2)."""
        rows, cols = chunk.shape[-2:]
        out = np.zeros((len(chunk), self.pad, self.pad), dtype=chunk.dtype)
        r0, c0 = self.pad // 2 - rows // 2, self.pad // 2 - cols // 2
        out[:, r0:r0 + rows, c0:c0 + cols] = chunk
        return out

    def mask(self, stored_mask: np.ndarray | None) -> np.ndarray | None:
        """(K, K) bool in the model's layout, True = pixel counts in the loss: the stored mask
        (ky, kx) through crop, bin, orientation and pad, with the padded pixels False; None when
        there is no mask and no padding."""
        if stored_mask is None and self.pad is None:
            return None
        good = np.ones(self.stored_shape, dtype=bool) if stored_mask is None else np.asarray(stored_mask, dtype=bool)
        return self.orient_and_pad(self.binned(self.crop(good[None]), reduce="all"))[0]


def orientation_from_basis(basis_vectors: object, source: str) -> dict[str, bool]:
    """``transpose``, ``flip_y`` and ``flip_x`` that turn a detector whose array axes (rows,
    columns) point along the lab vectors ``basis_vectors`` (CXI: (3, 2), column i = axis i as
    (x, y, z); (2, 3) is read as its transpose) into rows along +y and columns along +x.
    Each axis must lie along lab x or y; anything else (a tilted or rotated detector) is a
    DataError naming ``source``."""
    basis = np.asarray(basis_vectors, dtype=np.float64)
    if basis.shape == (2, 3):
        basis = basis.T
    fix = "set data.transform transpose, flip_y and flip_x by hand (orientation: manual)"
    if basis.shape != (3, 2) or not np.isfinite(basis).all():
        raise DataError(f"{source}: detector basis_vectors: expected a (3, 2) array of finite lab vectors (x, y, z), "
                        f"found {basis.tolist()!r}; {fix}")
    lab_axis = []
    for i, vector in enumerate(basis.T):
        length = np.abs(vector)
        dominant = int(np.argmax(length))
        if dominant == 2 or length.max() == 0 or np.delete(length, dominant).max() > 1e-6 * length.max():
            raise DataError(f"{source}: detector basis_vectors: array axis {i} points along {vector.tolist()} (x, y, z), "
                            f"not along lab x or y; {fix}")
        lab_axis.append(dominant)
    if sorted(lab_axis) != [0, 1]:
        raise DataError(f"{source}: detector basis_vectors: both array axes point along lab "
                        f"{'xy'[lab_axis[0]]}; {fix}")
    transpose = lab_axis[0] == 0  # rows along x: swap so that rows run along y
    rows, cols = (basis[:, 1], basis[:, 0]) if transpose else (basis[:, 0], basis[:, 1])
    return {"transpose": transpose, "flip_y": bool(rows[1] < 0), "flip_x": bool(cols[0] < 0)}


def pattern_preparation(prep: Preparation, source: str, nonfinite: str = "error", negative: str = "clip",
                        background: np.ndarray | None = None,
                        gain_factor: np.ndarray | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """The per-chunk preparation (float32 (c, ky, kx) as stored -> (c, K, K) prepared) in the
    order of the module docstring; ``nonfinite`` and ``negative`` as ``data.nonfinite`` and
    ``data.negative``; ``gain_factor`` (ky, kx) as stored, 1 / gain (``flat_field.read_flat_field``)."""
    cropped_background = None if background is None else prep.crop(background[None])[0]
    cropped_gain = None if gain_factor is None else prep.crop(gain_factor[None])[0]

    def prepare(chunk: np.ndarray) -> np.ndarray:
        chunk = prep.crop(chunk)  # a view: the caller's chunk is never changed in place
        if cropped_background is not None:
            chunk = chunk - cropped_background
        if cropped_gain is not None:
            chunk = chunk * cropped_gain
        bad = ~np.isfinite(chunk)
        if bad.any():
            if nonfinite == "error":
                raise DataError(f"{source}: {int(bad.sum())} NaN/Inf pattern values; "
                                "set data.nonfinite: zero to replace them by 0")
            chunk = np.where(bad, np.float32(0), chunk)
        if (chunk < 0).any():
            if negative == "error":
                raise DataError(f"{source}: negative pattern values (min {chunk.min():g}); "
                                "set data.negative: clip to set them to 0")
            chunk = np.maximum(chunk, np.float32(0))
        return prep.orient_and_pad(prep.binned(chunk))

    return prepare
