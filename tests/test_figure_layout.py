"""The saved figures' layout: every text inside the figure, every panel's axes and colour bars
labelled, the colour wheel's phases labelled, the scale bar on its own dark box."""

from pathlib import Path

import matplotlib
import numpy as np
import pytest
from conftest import tiny_config

import ptyacc
from ptyacc.results import figures
from ptyacc.results.h5file import Results

matplotlib.use("Agg")


def results(poisson: bool, modes: int = 2, iterations: int = 20) -> Results:
    """A 6 x 6 scan with a noisy object and ``modes`` probe modes, its loss a Poisson run's
    (with what the deviance needs) or an amplitude run's."""
    config = ptyacc.load_config(tiny_config(Path(".")))
    grid = np.stack(np.meshgrid(np.arange(6.0), np.arange(6.0), indexing="ij"), -1).reshape(-1, 2) + 8
    rng = np.random.default_rng(1)
    obj = (rng.uniform(0.8, 1, (1, 1, 90, 90)) * np.exp(1j * rng.normal(0, 0.3, (1, 1, 90, 90)))).astype(np.complex64)
    probe = (rng.normal(size=(modes, 24, 24)) + 1j * rng.normal(size=(modes, 24, 24))).astype(np.complex64)
    attrs = {"config": config.to_yaml(), "loss_name": "poisson" if poisson else "amplitude", "wavelength_A": 0.0418}
    loss = np.geomspace(5e3, 1e3, iterations)
    if poisson:
        attrs.update(poisson_data_nll_per_pattern=-2e4, counted_pixel_values_per_pattern=200.0, poisson_deviance=1.97)
        loss = -2e4 + 100 * np.geomspace(30, 2, iterations)
    pattern = np.fft.fftshift(np.abs(np.fft.fft2(probe[0])) ** 2)
    return Results(object=obj, probe=probe, positions_A=grid, loss=loss, dx_A=0.3, origin_A=(0.0, 0.0),
                   attrs=attrs, mean_pattern_measured=pattern, mean_pattern_predicted=pattern)


def drawn(fig):
    """``fig`` laid out and drawn as ``save_figures`` saves it; its renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    fig.tight_layout()
    canvas.draw()
    return canvas.get_renderer()


@pytest.mark.slow
@pytest.mark.parametrize("poisson", [True, False])
def test_no_text_is_cut_off_and_every_panel_is_labelled(poisson):
    from matplotlib.axis import Tick
    from matplotlib.text import Text

    def inside(extent, box) -> bool:
        return extent.x0 >= box.x0 - 1 and extent.y0 >= box.y0 - 1 and extent.x1 <= box.x1 + 1 and extent.y1 <= box.y1 + 1

    for name, fig in figures.make_figures(results(poisson)).items():
        renderer = drawn(fig)
        box = fig.bbox
        tick_labels = {id(label) for tick in fig.findobj(Tick) for label in (tick.label1, tick.label2)}
        texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in tick_labels]
        assert texts, name
        for text in texts:  # titles, axis labels, the scale bar's and the colour wheel's labels
            extent = text.get_window_extent(renderer)
            assert inside(extent, box), f"{name}: {text.get_text()!r} at {extent} outside the figure {box}"
        for ax in fig.axes + [child for parent in fig.axes for child in parent.child_axes]:  # tick labels drawn
            assert inside(ax.get_tightbbox(renderer), box), f"{name}: the axes titled {ax.get_title()!r}"
        for ax in fig.axes:
            if not ax.axison:
                continue
            assert ax.get_ylabel(), f"{name}: an axes without a y label (title {ax.get_title()!r})"
            if ax.get_label() != "<colorbar>":
                assert ax.get_xlabel(), f"{name}: an axes without an x label (title {ax.get_title()!r})"


def test_the_colour_wheel_names_its_phases_and_the_probe_has_axes():
    fig = figures.probe_figure(results(True, modes=2))
    drawn(fig)
    for ax in fig.axes:
        assert ax.get_xlabel() == "x (Å)" and ax.get_ylabel() == "y (Å)"
        (wheel,) = ax.child_axes
        labels = {t.get_text() for t in wheel.texts}
        assert {"0", "π/2", "π", "−π/2"} <= labels
        assert ax.get_xlim()[0] == pytest.approx(-24 * 0.3 / 2) and ax.get_xlim()[1] == pytest.approx(24 * 0.3 / 2)


def test_the_scale_bar_stands_on_a_dark_box():
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

    fig = figures.object_figure(results(False))
    (bar,) = [a for a in fig.axes[0].artists if isinstance(a, AnchoredSizeBar)]
    face = bar.patch.get_facecolor()
    assert bar.patch.get_visible() and max(face[:3]) < 0.2 and face[3] > 0.5  # dark, mostly opaque
    assert bar.txt_label.get_text() == "5 Å"  # 1-2-5 length near a fifth of 27 Å


def test_few_iterations_are_drawn_as_points():
    ax = figures.loss_figure(results(True, iterations=1)).axes[0]
    assert ax.lines[0].get_marker() == "o"
    ax = figures.loss_figure(results(True, iterations=100)).axes[0]
    assert ax.lines[0].get_marker() in ("None", None, "")
