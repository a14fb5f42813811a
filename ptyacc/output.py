"""results.h5 and figures. Called on the main process only.

results.h5 layout (a public contract; add, never rename):
- ``object``       complex64 (object_modes, slices, Ny, Nx) transmission
- ``probe``        complex64 (probe_modes, K, K) centred real-space probe modes
- ``positions_A``  float64 (N, 2) refined probe centres (y, x), same order and frame as the input
- ``loss``         float64 (iterations done,) loss per iteration
- ``iteration_time_s`` float64 (iterations done,) wall time of each iteration (main process)
- ``mean_pattern_measured``, ``mean_pattern_predicted`` float64 (K, K), zero frequency at the
  centre: the mean of up to 128 measured patterns and of the model's prediction for them
- attributes: ``dx_A`` object pixel size, ``origin_A`` (y, x) position of object pixel [0, 0] in
  the positions' frame, ``config`` (YAML text), ``versions`` (YAML text), ``world_size``,
  ``iterations_done``, ``wavelength_A``, ``loss_name``.
- multi-process runs: ``comm_bytes`` int64 and ``comm_time_s`` float64 (iterations of this launch,):
  gradient bytes all-reduced per iteration by each process, and the seconds those all-reduces took
  on the main process (waiting for the slowest process included); ``comm_bytes_object``,
  ``comm_bytes_probe``, ``comm_bytes_other`` int64, the same bytes by kind of parameter (they sum
  to ``comm_bytes``), and ``comm_calls`` int64, the collectives launched
- multislice runs with a tilt (``experiment.tilt_mrad``, ``optim.start.tilt``): ``tilt_mrad`` float64
  (2,) or (N, 2) per position, [y, x] in mrad (the convention in ptyacc/physics/tilt.py); with a
  tilt or a refined slice thickness, the attribute ``slice_thickness_A`` (the refined value)
- X-ray runs (``experiment.radiation: xray``) also in metres, X-ray's unit: ``positions_m``
  float64 (N, 2) and attributes ``dx_m``, ``origin_m``, each the Å value times 1e-10.
"""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import yaml

from ptyacc.errors import DataError
from ptyacc.outdir import atomic_write, write_bytes, writing

METRE_PER_A = 1e-10
COUNTS = ("comm_bytes", "comm_bytes_object", "comm_bytes_probe", "comm_bytes_other", "comm_calls")  # int64
MIN_DRAWN_SHIFT_PX = 1e-3  # position corrections below this (rounding noise) are not drawn
FIGURE_ADVICE = "free space, or make the figures elsewhere with `ptyacc plot RESULTS.h5 -o FOLDER`"


@dataclass
class Results:
    """A reconstruction, as saved in results.h5 (see the module docstring for shapes)."""

    object: np.ndarray
    probe: np.ndarray
    positions_A: np.ndarray
    loss: np.ndarray
    dx_A: float
    origin_A: tuple[float, float]
    attrs: dict[str, Any] = field(default_factory=dict)
    iteration_time_s: np.ndarray | None = None
    mean_pattern_measured: np.ndarray | None = None  # (K, K), zero frequency at the centre
    mean_pattern_predicted: np.ndarray | None = None
    comm_bytes: np.ndarray | None = None  # multi-process runs, per iteration of this launch
    comm_time_s: np.ndarray | None = None
    comm_bytes_object: np.ndarray | None = None
    comm_bytes_probe: np.ndarray | None = None
    comm_bytes_other: np.ndarray | None = None
    comm_calls: np.ndarray | None = None
    tilt_mrad: np.ndarray | None = None  # (2,) or (N, 2) [y, x] mrad, multislice with a tilt

    @property
    def phase(self) -> np.ndarray:
        """(Ny, Nx) object phase summed over slices (object mode 0)."""
        return np.angle(self.object[0]).sum(axis=0)

    @property
    def config(self) -> dict:
        return yaml.safe_load(self.attrs.get("config", "{}"))


def versions() -> dict[str, str]:
    import accelerate
    import torch

    return {"ptyacc": _own_version(), "python": sys.version.split()[0], "torch": str(torch.__version__),
            "accelerate": accelerate.__version__, "numpy": np.__version__, "h5py": h5py.__version__}


def _own_version() -> str:
    from ptyacc import __version__

    return __version__


def save_results(path: Path, results: Results) -> None:
    """Write results.h5 atomically: a temporary file in the same folder, then a rename, so an
    interrupted save never leaves a corrupt file under the final name. A full disk raises
    OutputError with the space needed; the previous results.h5, if any, is untouched."""
    arrays = (results.object, results.probe, results.positions_A, results.loss, results.iteration_time_s,
              results.mean_pattern_measured, results.mean_pattern_predicted, results.comm_bytes, results.comm_time_s)
    needed = sum(np.asarray(a).nbytes for a in arrays if a is not None)
    xray = _is_xray(results)
    with atomic_write(path, needed, "the run stops: free space and run again (--resume continues from the newest "
                      "checkpoint, if output.checkpoint_every is set)") as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("object", data=results.object.astype(np.complex64))
        f.create_dataset("probe", data=results.probe.astype(np.complex64))
        f.create_dataset("positions_A", data=results.positions_A.astype(np.float64))
        f.create_dataset("loss", data=np.asarray(results.loss, dtype=np.float64))
        for name in ("iteration_time_s", "mean_pattern_measured", "mean_pattern_predicted", "tilt_mrad"):
            if getattr(results, name) is not None:
                f.create_dataset(name, data=np.asarray(getattr(results, name), dtype=np.float64))
        for name in COUNTS:
            if getattr(results, name) is not None:
                f.create_dataset(name, data=np.asarray(getattr(results, name), dtype=np.int64))
        if results.comm_time_s is not None:
            f.create_dataset("comm_time_s", data=np.asarray(results.comm_time_s, dtype=np.float64))
        f.attrs["dx_A"] = results.dx_A
        f.attrs["origin_A"] = np.asarray(results.origin_A, dtype=np.float64)
        if xray:
            f.create_dataset("positions_m", data=results.positions_A.astype(np.float64) * METRE_PER_A)
            f.attrs["dx_m"] = results.dx_A * METRE_PER_A
            f.attrs["origin_m"] = np.asarray(results.origin_A, dtype=np.float64) * METRE_PER_A
        for key, value in results.attrs.items():
            f.attrs[key] = value


def load_results(path: str | Path) -> Results:
    """Read a results.h5 written by ptyacc."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: results file not found")
    try:
        with h5py.File(path, "r") as f:
            missing = [k for k in ("object", "probe", "positions_A", "loss") if k not in f]
            if missing:
                raise DataError(f"{path}: not a ptyacc results file (missing {', '.join(missing)})")
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            return Results(object=f["object"][()], probe=f["probe"][()], positions_A=f["positions_A"][()],
                           loss=f["loss"][()], dx_A=float(attrs.pop("dx_A")),
                           **{name: f[name][()] for name in ("iteration_time_s", "mean_pattern_measured",
                                                             "mean_pattern_predicted", "comm_time_s", "tilt_mrad",
                                                             *COUNTS)
                              if name in f},
                           origin_A=tuple(float(v) for v in attrs.pop("origin_A")), attrs=attrs)
    except OSError as exc:
        raise DataError(f"{path}: cannot be read as HDF5 ({exc})") from None


def save_figures(folder: Path, results: Results, initial_positions_A: np.ndarray | None = None) -> list[Path]:
    """PNG figures: object phase (summed over slices), probe modes, loss curve, positions, and
    summary.png with all of them plus the object amplitude, the probe in reciprocal space,
    position corrections and measured against predicted mean pattern. A figure that cannot be
    written raises OutputError; those written before it are kept."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with writing(folder, advice=FIGURE_ADVICE):
        folder.mkdir(parents=True, exist_ok=True)
    written = []
    unit, per_A = length_unit(results)
    ny, nx = results.object.shape[-2:]
    oy, ox = results.origin_A
    extent = tuple(v * per_A for v in (ox, ox + nx * results.dx_A, oy + ny * results.dx_A, oy))

    fig, ax = plt.subplots(figsize=(6, 5.5))
    # contrast from the scanned region: the weakly lit rim is noisy and would wash it out
    px = (results.positions_A - np.asarray(results.origin_A)) / results.dx_A
    (r0, c0), (r1, c1) = np.floor(px.min(0)).astype(int), np.ceil(px.max(0)).astype(int) + 1
    low, high = np.percentile(results.phase[max(r0, 0):r1, max(c0, 0):c1], [0.5, 99.5])
    im = ax.imshow(results.phase, cmap="gray", extent=extent, vmin=low, vmax=high)
    ax.set(title="object phase, summed over slices (rad)", xlabel=f"x ({unit})", ylabel=f"y ({unit})")
    fig.colorbar(im, ax=ax, shrink=0.8)
    written.append(_save(fig, folder / "object_phase.png"))

    modes = results.probe
    power = (np.abs(modes) ** 2).sum(axis=(1, 2))
    fig, axes = plt.subplots(1, len(modes), figsize=(3 * len(modes), 3.3), squeeze=False)
    for i, ax in enumerate(axes[0]):
        ax.imshow(_complex_to_rgb(modes[i]))
        ax.set_title(f"probe mode {i}: {100 * power[i] / power.sum():.1f}%")
        ax.axis("off")
    written.append(_save(fig, folder / "probe.png"))

    fig, ax = plt.subplots(figsize=(5, 3.5))
    _plot_loss(ax, results.loss)
    ax.set(xlabel="iteration", ylabel=f"loss ({results.attrs.get('loss_name', '')})", title="loss")
    written.append(_save(fig, folder / "loss.png"))

    fig, ax = plt.subplots(figsize=(5, 5))
    if initial_positions_A is not None:
        start = initial_positions_A * per_A
        ax.plot(start[:, 1], start[:, 0], ".", ms=3, color="0.6", label="initial")
    ax.plot(results.positions_A[:, 1] * per_A, results.positions_A[:, 0] * per_A, ".", ms=3, label="refined")
    ax.set(xlabel=f"x ({unit})", ylabel=f"y ({unit})", title="probe positions", aspect="equal")
    ax.invert_yaxis()
    ax.legend(loc="upper right", fontsize=8)
    written.append(_save(fig, folder / "positions.png"))
    written.append(_summary(folder / "summary.png", results, initial_positions_A, extent))
    return written


def length_unit(results: Results) -> tuple[str, float]:
    """The unit of the figures' axes and its size per Å: µm for X-ray runs, Å otherwise."""
    return ("µm", 1e-4) if _is_xray(results) else ("Å", 1.0)


def _is_xray(results: Results) -> bool:
    return ((results.config or {}).get("experiment") or {}).get("radiation") == "xray"


def _summary(path: Path, results: Results, initial_positions_A: np.ndarray | None, extent) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(17, 8.5))
    unit, _ = length_unit(results)
    px = (results.positions_A - np.asarray(results.origin_A)) / results.dx_A
    (r0, c0), (r1, c1) = np.floor(px.min(0)).astype(int), np.ceil(px.max(0)).astype(int) + 1
    inner = (slice(max(r0, 0), r1), slice(max(c0, 0), c1))
    amplitude = np.abs(results.object[0]).prod(axis=0)
    for ax, image, title in ((axes[0, 0], results.phase, "object phase (rad, summed over slices)"),
                             (axes[0, 1], amplitude, "object amplitude (product over slices)")):
        low, high = np.percentile(image[inner], [0.5, 99.5])
        im = ax.imshow(image, cmap="gray", extent=extent, vmin=low, vmax=high)
        ax.set(title=title, xlabel=f"x ({unit})", ylabel=f"y ({unit})")
        fig.colorbar(im, ax=ax, shrink=0.75)
    probe = results.probe[0]
    axes[0, 2].imshow(_complex_to_rgb(probe))
    axes[0, 2].set_title(f"probe mode 0 of {len(results.probe)} (hue = phase)")
    spectrum = np.fft.fftshift(np.abs(np.fft.fft2(np.fft.ifftshift(probe))))
    axes[0, 3].imshow(np.log10(spectrum + spectrum.max() * 1e-4), cmap="magma")
    axes[0, 3].set_title("probe mode 0, reciprocal space (log amplitude)")
    _position_panel(axes[1, 0], results, initial_positions_A)
    _plot_loss(axes[1, 1], results.loss)
    axes[1, 1].set(title=f"loss ({results.attrs.get('loss_name', '')})", xlabel="iteration")
    for ax, pattern, title in ((axes[1, 2], results.mean_pattern_measured, "mean measured pattern (log)"),
                               (axes[1, 3], results.mean_pattern_predicted, "mean predicted pattern (log)")):
        if pattern is not None:
            ax.imshow(np.log10(np.maximum(pattern, pattern.max() * 1e-5)), cmap="viridis")
        ax.set_title(title)
    for ax in (axes[0, 2], axes[0, 3], axes[1, 2], axes[1, 3]):
        ax.set_xticks([])
        ax.set_yticks([])
    return _save(fig, path)


def _position_panel(ax, results: Results, initial_positions_A: np.ndarray | None) -> None:
    """Arrows from the initial to the refined positions, magnified by a factor stated in the
    title and a scale arrow; only the positions when they were not refined (the differences are
    then rounding noise) or moved by less than MIN_DRAWN_SHIFT_PX."""
    unit, per_A = length_unit(results)
    ax.set(xlabel=f"x ({unit})", ylabel=f"y ({unit})", aspect="equal")
    ax.invert_yaxis()
    now = results.positions_A * per_A
    refined = _positions_refined(results)
    shift = None if initial_positions_A is None else (results.positions_A - initial_positions_A) * per_A
    largest = 0.0 if shift is None else float(np.hypot(shift[:, 0], shift[:, 1]).max())
    if refined is False or shift is None or largest <= MIN_DRAWN_SHIFT_PX * results.dx_A * per_A:
        ax.plot(now[:, 1], now[:, 0], ".", ms=2)
        ax.set_title("positions fixed (not refined)" if refined is False else "refined positions" if shift is None
                     else f"position corrections: none above {MIN_DRAWN_SHIFT_PX:g} px")
        return
    start = initial_positions_A * per_A
    span = float(np.ptp(start, axis=0).max()) or 1.0
    magnify = _round_down_125(0.05 * span / largest)
    arrows = ax.quiver(start[:, 1], start[:, 0], shift[:, 1], shift[:, 0], angles="xy", scale_units="xy",
                       scale=1 / magnify, color="C3", width=0.004)
    key = _round_down_125(largest)
    ax.quiverkey(arrows, 0.8, -0.14, key, f"{key:g} {unit}", labelpos="E", coordinates="axes")
    ax.set_title(f"position corrections, arrows x{magnify:g}\n(largest {largest:.3g} {unit}; scale arrow below)")


def _positions_refined(results: Results) -> bool | None:
    """Whether the run refined positions (optim.start.positions set); None without a config."""
    optim = (results.config or {}).get("optim")
    if not isinstance(optim, dict):
        return None
    return (optim.get("start") or {}).get("positions") is not None


def _round_down_125(value: float) -> float:
    """The largest 1, 2 or 5 x 10^k that is <= value (a readable scale)."""
    power = 10.0 ** np.floor(np.log10(value))
    return max(step * power for step in (1, 2, 5) if step * power <= value * (1 + 1e-9))


def _plot_loss(ax, loss: np.ndarray) -> None:
    """Log scale when the loss is positive (amplitude); the Poisson loss, which drops a
    data-only constant and can be negative, is shown above its minimum instead."""
    iterations = np.arange(1, len(loss) + 1)
    if len(loss) and np.min(loss) > 0:
        ax.semilogy(iterations, loss)
    else:
        ax.semilogy(iterations, loss - np.min(loss) + 1e-12 * max(1.0, abs(np.min(loss))))
        ax.set_ylabel("loss - min(loss)")


def _save(fig, path: Path) -> Path:
    """Render ``fig`` as PNG in memory, then write it atomically (OutputError if it does not fit)."""
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=110)
    finally:
        plt.close(fig)
    return write_bytes(path, png.getvalue(), FIGURE_ADVICE)


def _complex_to_rgb(field_: np.ndarray) -> np.ndarray:
    """Hue = phase, brightness = amplitude."""
    from matplotlib.colors import hsv_to_rgb

    amplitude = np.abs(field_)
    hsv = np.stack([(np.angle(field_) + np.pi) / (2 * np.pi), np.ones_like(amplitude),
                    amplitude / max(amplitude.max(), 1e-30)], axis=-1)
    return hsv_to_rgb(hsv)
