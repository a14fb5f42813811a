"""The figures of a run: object phase (with a scale bar), probe modes (hue = phase, with its
colour wheel), loss, positions, and summary.png with all of them plus the object amplitude, the
probe's spectrum and the mean diffraction patterns on k (1/Å) and mrad axes.

Drawn on ``matplotlib.figure.Figure`` objects, which need no backend: the library never switches
the backend of the session that imports it, so in Jupyter the figures of ``make_figures`` (and
the user's own) display inline. ``ptyacc plot`` redraws a run's figures from results.h5 alone
(the initial positions are saved there too).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ptyacc.results.outdir import write_bytes, writing

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ptyacc.results.h5file import Results

MIN_DRAWN_SHIFT_PX = 1e-3  # position corrections below this (rounding noise) are not drawn
FIGURE_ADVICE = "free space, or make the figures elsewhere with `ptyacc plot RESULTS.h5 -o FOLDER`"


def save_figures(folder: Path, results: Results, initial_positions_A: np.ndarray | None = None) -> list[Path]:
    """The PNGs of ``make_figures`` in ``folder``. A figure that cannot be written raises
    OutputError; those written before it are kept."""
    with writing(folder, advice=FIGURE_ADVICE):
        folder.mkdir(parents=True, exist_ok=True)
    return [_save(fig, folder / name) for name, fig in make_figures(results, initial_positions_A).items()]


def make_figures(results: Results, initial_positions_A: np.ndarray | None = None) -> dict[str, Figure]:
    """{file name: Figure} of a run; ``initial_positions_A`` (N, 2) default to the results' own."""
    initial = results.initial_positions_A if initial_positions_A is None else initial_positions_A
    figures = {"object_phase.png": object_figure(results), "probe.png": probe_figure(results),
               "loss.png": loss_figure(results), "positions.png": positions_figure(results, initial),
               "summary.png": summary_figure(results, initial)}
    if "probe_variation" in (results.quantities or {}):
        figures["probe_variation.png"] = probe_variation_figure(results)
    if "parallax_shifts_A" in (results.detector or {}):
        figures["parallax.png"] = parallax_figure(results.detector)
    return figures


def parallax_figure(detector: dict[str, np.ndarray]) -> Figure:
    """``experiment.defocus_A: auto``: the tilt-corrected bright-field image of the scan's middle
    block, and each pixel group's measured shift (Å) drawn at its spatial frequency, beside the
    linear fit's; the scan rotation in the title where it was measured (``scan_rotation_deg``)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.6))
    image_ax, shift_ax = fig.subplots(1, 2)
    image_ax.imshow(detector["parallax_image"], cmap="gray")
    image_ax.set(title="tilt-corrected bright field (raster steps)", xlabel="fast", ylabel="slow")
    k, shifts, fit = detector["parallax_k_invA"], detector["parallax_shifts_A"], detector["parallax_fit_A"]
    defocus, error = detector["parallax_defocus_A"][:2]
    fitted = k @ fit[:, 1:].T
    shifts = shifts - fit[:, 0]  # the constant part (the disk's centre off the axis) left out
    gaps = np.hypot(*(k[:, None] - k[None]).transpose(2, 0, 1))
    spacing = float(np.min(gaps[gaps > 0])) if len(k) > 1 else 1.0
    scale = float(np.abs(shifts).max()) / (0.9 * spacing) or 1.0  # Å per 1/Å: the longest arrow 0.9 of the spacing
    arrows = {"angles": "xy", "scale_units": "xy", "scale": scale}
    shift_ax.quiver(k[:, 1], k[:, 0], fitted[:, 1], fitted[:, 0], color="0.6", width=0.012, label="fit", **arrows)
    shift_ax.quiver(k[:, 1], k[:, 0], shifts[:, 1], shifts[:, 0], color="C3", width=0.005, label="measured", **arrows)
    reach = float(np.abs(k).max()) + spacing
    shift_ax.set(title=f"pixel groups' shifts (0.1 1/A: {0.1 * scale:.3g} A)\ndefocus {defocus:.1f} +- {error:.1f} A",
                 xlim=(-reach, reach), ylim=(-reach, reach), xlabel="kx (1/A)",
                 ylabel="ky (1/A)", aspect="equal")
    shift_ax.invert_yaxis()
    shift_ax.legend(loc="upper right", fontsize="small")
    if "scan_rotation_deg" in detector:
        fig.suptitle(f"scan rotation from the data: {float(detector['scan_rotation_deg']):.2f} deg")
    return fig


def probe_variation_figure(results: Results) -> Figure:
    """A varying probe (results.h5's ``probe_variation``): each mode [P_0, E_1, ...] above its
    weights over the scan, a dot per position coloured by the weight."""
    from matplotlib.figure import Figure

    modes, weights = results.quantities["probe_variation"]["modes"], results.quantities["probe_variation"]["weights"]
    unit, per_A = length_unit(results)
    where = results.positions_A * per_A
    fig = Figure(figsize=(3.8 * len(modes), 7.2))
    axes = fig.subplots(2, len(modes), squeeze=False)
    for k, (top, bottom) in enumerate(zip(axes[0], axes[1], strict=True)):
        _probe_panel(top, modes[k], results, "mean probe P_0" if k == 0 else f"eigen-probe E_{k}")
        dots = bottom.scatter(where[:, 1], where[:, 0], c=weights[:, k], s=6, cmap="coolwarm" if k else "viridis")
        bottom.set(xlabel=f"x ({unit})", ylabel=f"y ({unit})", title=f"weight {k}", aspect="equal")
        bottom.invert_yaxis()
        fig.colorbar(dots, ax=bottom, shrink=0.8)
    return fig


def object_figure(results: Results) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 5.5))
    ax = fig.subplots()
    _object_panel(fig, ax, results.phase, results, "object phase, summed over slices", "phase (rad)", shrink=0.8)
    return fig


def probe_figure(results: Results) -> Figure:
    from matplotlib.figure import Figure

    modes = results.probe
    power = (np.abs(modes) ** 2).sum(axis=(1, 2))
    fig = Figure(figsize=(4.6 * len(modes), 3.6))
    axes = fig.subplots(1, len(modes), squeeze=False)[0]
    for i, ax in enumerate(axes):
        _probe_panel(ax, modes[i], results, f"probe mode {i}: {100 * power[i] / power.sum():.1f}%")
    return fig


def loss_figure(results: Results) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5, 3.8))
    plot_loss(fig.subplots(), results)
    return fig


def positions_figure(results: Results, initial_positions_A: np.ndarray | None) -> Figure:
    """The positions; the initial ones beside them (and a legend) only when they were refined
    and moved."""
    from matplotlib.figure import Figure

    unit, per_A = length_unit(results)
    fig = Figure(figsize=(5, 5))
    ax = fig.subplots()
    now = results.positions_A * per_A
    moved = _largest_shift(results, initial_positions_A) > 0 and _positions_refined(results) is not False
    if moved:
        start = initial_positions_A * per_A
        ax.plot(start[:, 1], start[:, 0], ".", ms=3, color="0.6", label="initial")
    ax.plot(now[:, 1], now[:, 0], ".", ms=3, label="refined" if moved else None)
    title = "probe positions" + ("" if moved else " (not refined)" if _positions_refined(results) is False else "")
    ax.set(xlabel=f"x ({unit})", ylabel=f"y ({unit})", title=title, aspect="equal")
    ax.invert_yaxis()
    if moved:
        ax.legend(loc="upper right", fontsize=8)
    return fig


def summary_figure(results: Results, initial_positions_A: np.ndarray | None) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(17, 8.5))
    axes = fig.subplots(2, 4)
    amplitude = np.abs(results.object[0]).prod(axis=0)
    _object_panel(fig, axes[0, 0], results.phase, results, "object phase\nsummed over slices", "phase (rad)")
    _object_panel(fig, axes[0, 1], amplitude, results, "object amplitude\nproduct over slices", "amplitude (1: none absorbed)")
    _probe_panel(axes[0, 2], results.probe[0], results, f"probe mode 0 of {len(results.probe)}\n(hue = phase)",
                 wheel_beside=False)
    spectrum = np.fft.fftshift(np.abs(np.fft.fft2(np.fft.ifftshift(results.probe[0]))))
    _pattern_panel(axes[0, 3], np.log10(spectrum + spectrum.max() * 1e-4), results,
                   "probe mode 0, |FFT| (log)", "magma")
    _position_panel(axes[1, 0], results, initial_positions_A)
    plot_loss(axes[1, 1], results)
    for ax, pattern, title in ((axes[1, 2], results.mean_pattern_measured, "mean measured pattern (log)"),
                               (axes[1, 3], results.mean_pattern_predicted, "mean predicted pattern (log)")):
        if pattern is None:
            ax.set_title(title)
            ax.axis("off")
            continue
        _pattern_panel(ax, np.log10(np.maximum(pattern, pattern.max() * 1e-5)), results, title, "viridis")
    return fig


def length_unit(results: Results) -> tuple[str, float]:
    """The unit of the figures' axes and its size per Å: µm for X-ray runs, Å otherwise."""
    return ("µm", 1e-4) if results.is_xray else ("Å", 1.0)


def plot_loss(ax: Axes, results: Results) -> None:
    """The loss as it was: log scale when positive (amplitude); the Poisson loss as the Poisson
    deviance per counted pixel (~1 at the noise level, ``poisson_deviance_history``), or where
    results.h5 lacks what that needs, as it is (it leaves out a data-only term and can be
    negative) on a linear scale."""
    loss, name = np.asarray(results.loss), results.attrs.get("loss_name", "")
    iterations = np.arange(1, len(loss) + 1)
    style = {"marker": "o", "ms": 3} if len(loss) <= 30 else {}  # a few iterations: points, not a line
    title = f"loss ({name})"
    deviance = poisson_deviance_history(results)
    if deviance is not None:
        ax.semilogy(iterations, deviance, **style)
        ax.axhline(1.0, color="0.6", lw=0.8, ls="--")  # the noise level
        ax.set_ylabel("Poisson deviance per counted pixel")
        title = f"Poisson deviance: final {float(results.attrs['poisson_deviance']):.4g}\n(dashed: 1, the noise level)"
    elif len(loss) and np.min(loss) > 0:
        ax.semilogy(iterations, loss, **style)
        ax.set_ylabel(f"loss ({name})")
    else:
        ax.plot(iterations, loss, **style)
        ax.set_ylabel("loss per pattern\n(up to a data-only constant)")
    if deviance is None and "poisson_deviance" in results.attrs:
        title += f"\nfinal Poisson deviance {float(results.attrs['poisson_deviance']):.4g} per pixel"
    ax.set(xlabel="iteration", title=title)
    ax.xaxis.get_major_locator().set_params(integer=True)


def poisson_deviance_history(results: Results) -> np.ndarray | None:
    """The Poisson loss of each iteration as the deviance per counted pixel, (loss - data term) /
    (counted / 2), from the data term and the count saved with the final deviance; None for
    other losses or results without them."""
    attrs = results.attrs
    if "poisson_data_nll_per_pattern" not in attrs or "counted_pixel_values_per_pattern" not in attrs:
        return None
    offset, counted = float(attrs["poisson_data_nll_per_pattern"]), float(attrs["counted_pixel_values_per_pattern"])
    return (np.asarray(results.loss) - offset) / (0.5 * counted)


def complex_to_rgb(field_: np.ndarray) -> np.ndarray:
    """Hue = phase, brightness = amplitude."""
    from matplotlib.colors import hsv_to_rgb

    amplitude = np.abs(field_)
    hsv = np.stack([(np.angle(field_) + np.pi) / (2 * np.pi), np.ones_like(amplitude),
                    amplitude / max(amplitude.max(), 1e-30)], axis=-1)
    return hsv_to_rgb(hsv)


def colour_wheel(ax: Axes, beside: bool = True) -> Axes:
    """An inset of ``ax``, to its right (``beside``, with a caption) or in its top right corner
    (white labels): the colours of ``complex_to_rgb`` for amplitude 0 to 1 (centre to rim) and
    phase -pi to pi (around), its phases labelled inside the inset's own box."""
    inset = ax.inset_axes([1.04, 0.5, 0.45, 0.45] if beside else [0.68, 0.68, 0.31, 0.31])
    y, x = np.mgrid[-1:1:65j, -1:1:65j]
    wheel = np.where(np.hypot(y, x) <= 1, np.hypot(y, x) * np.exp(1j * np.arctan2(-y, x)), 0)
    rgba = np.concatenate([complex_to_rgb(wheel), (np.hypot(y, x) <= 1)[..., None].astype(float)], axis=-1)
    inset.imshow(rgba, extent=(-1, 1, -1, 1))
    inset.set(xlim=(-1.9, 1.9), ylim=(-1.9, 1.9))
    inset.set_axis_off()
    colour = "black" if beside else "white"
    for (px, py), label, ha, va in (((1.1, 0), "0", "left", "center"), ((0, 1.1), "π/2", "center", "bottom"),
                                    ((-1.1, 0), "π", "right", "center"), ((0, -1.1), "−π/2", "center", "top")):
        inset.text(px, py, label, fontsize=7, ha=ha, va=va, color=colour)
    if beside:
        inset.text(0, -2.1, "hue: phase\nbrightness:\namplitude", fontsize=7, ha="center", va="top")
    return inset


def scale_bar(ax: Axes, width: float, unit: str) -> float:
    """A bar of a 1-2-5 length near a fifth of ``width`` (data units, ``unit``) in the lower right
    corner of ``ax``, white on a dark box so that it reads over any image; its length."""
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

    length = round_down_125(0.2 * width)
    bar = AnchoredSizeBar(ax.transData, length, f"{length:g} {unit}", "lower right", color="white", frameon=True,
                          size_vertical=0.012 * width, pad=0.3, borderpad=0.5, sep=3)
    bar.patch.set(facecolor="black", alpha=0.65, edgecolor="none")
    ax.add_artist(bar)
    return length


def round_down_125(value: float) -> float:
    """The largest 1, 2 or 5 x 10^k that is <= value (a readable scale)."""
    power = 10.0 ** np.floor(np.log10(value))
    return max(step * power for step in (1, 2, 5) if step * power <= value * (1 + 1e-9))


def _object_panel(fig: Figure, ax: Axes, image: np.ndarray, results: Results, title: str, bar_label: str,
                  shrink: float = 0.75) -> None:
    """``image`` (Ny, Nx) of the object in the positions' frame, its contrast from the scanned
    region (the weakly lit rim is noisy and would wash it out), with a scale bar and a colour bar
    labelled ``bar_label``."""
    unit, per_A = length_unit(results)
    ny, nx = image.shape
    oy, ox = results.origin_A
    extent = tuple(v * per_A for v in (ox, ox + nx * results.dx_A, oy + ny * results.dx_A, oy))
    px = (results.positions_A - np.asarray(results.origin_A)) / results.dx_A
    (r0, c0), (r1, c1) = np.floor(px.min(0)).astype(int), np.ceil(px.max(0)).astype(int) + 1
    low, high = np.percentile(image[max(r0, 0):r1, max(c0, 0):c1], [0.5, 99.5])
    im = ax.imshow(image, cmap="gray", extent=extent, vmin=low, vmax=high)
    ax.set(title=title, xlabel=f"x ({unit})", ylabel=f"y ({unit})")
    fig.colorbar(im, ax=ax, shrink=shrink, label=bar_label)
    scale_bar(ax, nx * results.dx_A * per_A, unit)


def _probe_panel(ax: Axes, mode: np.ndarray, results: Results, title: str, wheel_beside: bool = True) -> None:
    """One probe mode (K, K) in colour (hue = phase) on axes centred on the window, with a scale
    bar and the colour wheel (beside it, or in its corner)."""
    unit, per_A = length_unit(results)
    half = mode.shape[-1] * results.dx_A * per_A / 2
    ax.imshow(complex_to_rgb(mode), extent=(-half, half, half, -half))
    ax.set(title=title, xlabel=f"x ({unit})", ylabel=f"y ({unit})")
    scale_bar(ax, 2 * half, unit)
    colour_wheel(ax, wheel_beside)


def _pattern_panel(ax: Axes, image: np.ndarray, results: Results, title: str, cmap: str) -> None:
    """A (K, K) reciprocal-space image (zero frequency at the centre) on k axes (1/Å; 1/µm for
    X-rays) with the scattering angle in mrad on the top axis; a near-field image plainly."""
    ax.set_title(title)
    config = results.config or {}
    if (config.get("experiment") or {}).get("geometry") == "near_field" or "wavelength_A" not in results.attrs:
        ax.imshow(image, cmap=cmap)
        ax.set(xlabel="detector column (px)", ylabel="detector row (px)")
        return
    k = image.shape[-1]
    dk_invA = 1.0 / (k * results.dx_A)
    unit, per_invA = ("1/µm", 1e4) if results.is_xray else ("1/Å", 1.0)
    low, high = (-k // 2 - 0.5) * dk_invA * per_invA, (k - k // 2 - 0.5) * dk_invA * per_invA
    ax.imshow(image, cmap=cmap, extent=(low, high, high, low))
    ax.set(xlabel=f"k_x ({unit})", ylabel=f"k_y ({unit})")
    mrad_per_k = float(results.attrs["wavelength_A"]) * 1e3 / per_invA  # angle = k wavelength
    top = ax.secondary_xaxis("top", functions=(lambda v: v * mrad_per_k, lambda v: v / mrad_per_k))
    top.set_xlabel("scattering angle (mrad)", fontsize=8)


def _largest_shift(results: Results, initial_positions_A: np.ndarray | None) -> float:
    """The largest position correction (Å) above MIN_DRAWN_SHIFT_PX, else 0 (also without initial positions)."""
    if initial_positions_A is None:
        return 0.0
    shift = results.positions_A - initial_positions_A
    largest = float(np.hypot(shift[:, 0], shift[:, 1]).max())
    return largest if largest > MIN_DRAWN_SHIFT_PX * results.dx_A else 0.0


def _position_panel(ax: Axes, results: Results, initial_positions_A: np.ndarray | None) -> None:
    """Arrows from the initial to the refined positions, magnified by a factor stated in the
    title and a scale arrow; only the positions when they were not refined (the differences are
    then rounding noise) or moved by less than MIN_DRAWN_SHIFT_PX."""
    unit, per_A = length_unit(results)
    ax.set(xlabel=f"x ({unit})", ylabel=f"y ({unit})", aspect="equal")
    ax.invert_yaxis()
    now = results.positions_A * per_A
    refined = _positions_refined(results)
    largest = _largest_shift(results, initial_positions_A) * per_A
    if refined is False or not largest:
        ax.plot(now[:, 1], now[:, 0], ".", ms=2)
        ax.set_title("positions fixed (not refined)" if refined is False else "refined positions"
                     if initial_positions_A is None else f"position corrections: none above {MIN_DRAWN_SHIFT_PX:g} px")
        return
    start = initial_positions_A * per_A
    shift = now - start
    span = float(np.ptp(start, axis=0).max()) or 1.0
    magnify = round_down_125(0.05 * span / largest)
    arrows = ax.quiver(start[:, 1], start[:, 0], shift[:, 1], shift[:, 0], angles="xy", scale_units="xy",
                       scale=1 / magnify, color="C3", width=0.004)
    key = round_down_125(largest)
    ax.quiverkey(arrows, 0.8, -0.14, key, f"{key:g} {unit}", labelpos="E", coordinates="axes")
    ax.set_title(f"position corrections, arrows x{magnify:g}\n(largest {largest:.3g} {unit}; scale arrow below)")


def _positions_refined(results: Results) -> bool | None:
    """Whether the run refined positions (optim.start.positions set); None without a config."""
    optim = (results.config or {}).get("optim")
    if not isinstance(optim, dict):
        return None
    return (optim.get("start") or {}).get("positions") is not None


def save_figure(fig: Figure, path: Path) -> Path:
    """One figure as a PNG at ``path`` (its folder made if missing; OutputError if it cannot be written)."""
    with writing(path.parent, advice=FIGURE_ADVICE):
        path.parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, path)


def _save(fig: Figure, path: Path) -> Path:
    """Render ``fig`` as PNG in memory, then write it atomically (OutputError if it does not fit)."""
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    return write_bytes(path, png.getvalue(), FIGURE_ADVICE)
