"""The pictures a tracker shows of a run in progress, as uint8 RGB arrays (H, W, 3), drawn with
NumPy alone: an image every ``output.image_every`` iterations must cost a few milliseconds, not
a matplotlib figure's tenth of a second. Grey levels span each image's 0.5 to 99.5 percentile
(computed over the scanned region for the object), so a noisy rim does not wash the picture out."""

from __future__ import annotations

import functools

import numpy as np

from ptyacc.results.figures import complex_to_rgb

WHEEL_PX = 64  # the colour wheel's diameter
POSITIONS_PX = 256  # the positions picture's longer side
INITIAL_GREY = 150  # initial positions, drawn under the refined ones (red)


def grey(image: np.ndarray, region: tuple[slice, slice] | None = None) -> np.ndarray:
    """A real image (H, W) as uint8 RGB (H, W, 3), its grey levels spanning the 0.5 to 99.5
    percentile of ``region`` (the whole image if None)."""
    inner = image[region] if region is not None else image
    low, high = np.percentile(inner if inner.size else image, [0.5, 99.5])
    scaled = np.clip((image - low) / max(high - low, 1e-30), 0.0, 1.0)
    return np.repeat((255 * scaled).astype(np.uint8)[..., None], 3, axis=-1)


def object_images(obj: np.ndarray, region: tuple[slice, slice]) -> dict[str, np.ndarray]:
    """Object mode 0 of ``obj`` (object_modes, slices, Ny, Nx) complex: the phase of each slice
    (several slices), the phase summed over slices and the amplitude (product over slices),
    with grey levels from the scanned ``region``."""
    mode = obj[0]
    images = {"object/phase_sum": grey(np.angle(mode).sum(axis=0), region),
              "object/amplitude": grey(np.abs(mode).prod(axis=0), region)}
    if len(mode) > 1:
        for s, layer in enumerate(mode):
            images[f"object/phase_slice_{s}"] = grey(np.angle(layer), region)
    return images


@functools.cache
def colour_wheel(diameter_px: int = WHEEL_PX) -> np.ndarray:
    """The key to ``probe_image``'s colours: hue = phase (angle around the centre, 0 to the
    right, counter-clockwise as the image is shown), brightness = amplitude (radius), as uint8 RGB
    (read-only: drawn once)."""
    axis = np.linspace(-1.0, 1.0, diameter_px)
    field_ = axis[None, :] - 1j * axis[:, None]  # rows go down, so y = -row
    field_ = np.where(np.abs(field_) <= 1.0, field_, 0.0)
    wheel = (255 * complex_to_rgb(field_)).astype(np.uint8)
    wheel.flags.writeable = False
    return wheel


def probe_image(probe: np.ndarray) -> np.ndarray:
    """The probe modes (modes, K, K) complex side by side, hue = phase and brightness =
    amplitude (each mode scaled to its own maximum), then the colour wheel, as uint8 RGB."""
    k = probe.shape[-1]
    gap = np.zeros((k, 2, 3), dtype=np.uint8)
    wheel = np.zeros((k, WHEEL_PX, 3), dtype=np.uint8)
    side = min(WHEEL_PX, k)
    wheel[:side] = colour_wheel(WHEEL_PX)[:side]
    panels = []
    for mode in probe:
        panels += [(255 * complex_to_rgb(mode)).astype(np.uint8), gap]
    return np.concatenate([*panels, wheel], axis=1)


def positions_image(initial_px: np.ndarray, now_px: np.ndarray, longer_side_px: int = POSITIONS_PX) -> np.ndarray:
    """The probe positions (N, 2) (y, x) in object pixels: the initial ones grey, the current
    ones red, on a black canvas whose longer side is ``longer_side_px``, as uint8 RGB."""
    both = np.concatenate([initial_px, now_px])
    low, span = both.min(axis=0), np.ptp(both, axis=0).max() or 1.0
    scale = (longer_side_px - 3) / span
    # the longer side is longer_side_px - 3 up to float rounding, which ceil must not turn into one more
    shape = np.ceil(np.ptp(both, axis=0) * scale - 1e-6).astype(int) + 3
    canvas = np.zeros((*shape, 3), dtype=np.uint8)
    for points, colour in ((initial_px, (INITIAL_GREY,) * 3), (now_px, (255, 40, 40))):
        rows, cols = np.round((points - low) * scale).astype(int).T + 1
        for dy in (-1, 0, 1):  # 3 x 3 dots
            for dx in (-1, 0, 1):
                canvas[rows + dy, cols + dx] = colour
    return canvas


def patterns_image(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Measured (left) and predicted (right) mean pattern (K, K), log10 of the intensity on one
    shared grey scale (down to 1e-5 of the largest), as uint8 RGB."""
    top = max(float(measured.max()), float(predicted.max()), 1e-30)
    logs = [np.log10(np.maximum(p, top * 1e-5)) for p in (measured, predicted)]
    gap = np.full((measured.shape[0], 2), np.log10(top * 1e-5))
    return grey(np.concatenate([logs[0], gap, logs[1]], axis=1))


def scanned_region(positions_px: np.ndarray, shape: tuple[int, int]) -> tuple[slice, slice]:
    """The object pixels (rows, cols) between the outermost probe positions (N, 2) (y, x) px,
    inside an object of ``shape``."""
    (r0, c0), (r1, c1) = np.floor(positions_px.min(0)).astype(int), np.ceil(positions_px.max(0)).astype(int) + 1
    return slice(max(r0, 0), min(r1, shape[0])), slice(max(c0, 0), min(c1, shape[1]))
