"""Figures: what summary.png's panels say and draw."""

import io
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from conftest import tiny_config

import ptyacc
from ptyacc.results.figures import save_figures
from ptyacc.results.h5file import Results

matplotlib.use("Agg")


def results_on_a_grid(refine_positions: bool) -> Results:
    """A 5 x 5 scan, 1 Å apart, with the config of a run that did or did not refine positions."""
    config = ptyacc.load_config(tiny_config(Path("."), optim={"start": {"positions": 1 if refine_positions else None}}))
    grid = np.stack(np.meshgrid(np.arange(5.0), np.arange(5.0), indexing="ij"), -1).reshape(-1, 2) + 10
    rng = np.random.default_rng(0)
    obj = np.exp(1j * rng.normal(0, 0.1, (1, 1, 80, 80))).astype(np.complex64)
    probe = rng.normal(size=(1, 16, 16)).astype(np.complex64)
    return Results(object=obj, probe=probe, positions_A=grid, loss=np.array([3.0, 2.0]), dx_A=0.3,
                   origin_A=(0.0, 0.0), attrs={"config": config.to_yaml(), "loss_name": "amplitude"})


def position_panel(tmp_path, monkeypatch, results: Results, initial_positions_A: np.ndarray):
    """summary.png's position panel (row 2, column 1), taken from the figure as it is saved."""
    from matplotlib.figure import Figure

    saved = []
    real = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: saved.append(fig) or real(fig, *a, **k))
    save_figures(tmp_path, results, initial_positions_A=initial_positions_A)
    return saved[-1].axes[4]


def test_position_panel_says_fixed_instead_of_drawing_rounding_noise(tmp_path, monkeypatch):
    """Issue 14.4: positions not refined differ from the initial ones by ~1e-15 Å; the panel
    must say so, not draw full-size arrows of that noise."""
    from matplotlib.quiver import Quiver

    results = results_on_a_grid(refine_positions=False)
    noise = results.positions_A + np.random.default_rng(1).normal(0, 1e-15, results.positions_A.shape)
    panel = position_panel(tmp_path, monkeypatch, results, noise)
    assert panel.get_title() == "positions fixed (not refined)"
    assert not any(isinstance(c, Quiver) for c in panel.collections)


def test_position_arrows_have_a_stated_scale(tmp_path, monkeypatch):
    """Refined positions: arrows magnified by a 1-2-5 factor given in the title, the largest a
    few per cent of the scan, and a scale arrow with its length in Å."""
    from matplotlib.quiver import Quiver, QuiverKey

    results = results_on_a_grid(refine_positions=True)
    shift = np.random.default_rng(2).normal(0, 0.02, results.positions_A.shape)
    panel = position_panel(tmp_path, monkeypatch, results, results.positions_A - shift)
    largest = np.hypot(*shift.T).max()
    arrows = [c for c in panel.collections if isinstance(c, Quiver)]
    assert len(arrows) == 1 and arrows[0].scale_units == "xy"
    magnify = 1 / arrows[0].scale
    assert f"arrows x{magnify:g}" in panel.get_title() and f"largest {largest:.3g} Å" in panel.get_title()
    assert float(f"{magnify:.0e}") == pytest.approx(magnify)  # 1, 2 or 5 x 10^k
    assert 0.02 * 4 <= largest * magnify <= 0.05 * 4  # the scan spans 4 Å
    keys = [a for a in panel.get_children() if isinstance(a, QuiverKey)]
    assert len(keys) == 1 and keys[0].text.get_text().endswith(" Å")


def test_probe_has_a_colour_wheel_of_its_own_colours():
    from ptyacc.results.figures import complex_to_rgb, probe_figure

    panel = probe_figure(results_on_a_grid(False)).axes[0]
    (wheel,) = panel.child_axes
    image = wheel.get_images()[0].get_array()
    centre = image.shape[0] // 2
    np.testing.assert_allclose(image[centre, -1, :3], complex_to_rgb(np.array([1.0 + 0j]))[0])  # phase 0 at the right
    np.testing.assert_allclose(image[0, centre, :3], complex_to_rgb(np.array([1j]))[0])  # pi / 2 at the top
    np.testing.assert_allclose(image[centre, centre, :3], 0.0)  # amplitude 0 at the centre
    assert image[0, 0, 3] == 0 and image[centre, centre, 3] == 1  # only the disk is drawn


def test_object_has_a_scale_bar_and_patterns_k_and_mrad_axes():
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

    from ptyacc.results.figures import object_figure, summary_figure

    results = results_on_a_grid(False)
    bars = [a for a in object_figure(results).axes[0].artists if isinstance(a, AnchoredSizeBar)]
    assert len(bars) == 1 and bars[0].txt_label.get_text() == "2 Å"  # 1-2-5 below a fifth of 24 Å
    results.mean_pattern_measured = np.ones((16, 16))
    results.attrs["wavelength_A"] = 0.0418
    panel = summary_figure(results, None).axes[6]
    assert panel.get_xlabel() == "k_x (1/Å)"
    dk = 1 / (16 * 0.3)
    np.testing.assert_allclose(panel.get_images()[0].get_extent(), [-8.5 * dk, 7.5 * dk, 7.5 * dk, -8.5 * dk])
    (top,) = panel.child_axes
    assert top.get_xlabel() == "scattering angle (mrad)"
    panel.figure.savefig(io.BytesIO(), format="png")  # the top axis takes its limits from the panel as it is drawn
    np.testing.assert_allclose(top.get_xlim(), np.array(panel.get_xlim()) * 0.0418 * 1e3)  # angle = k wavelength


def test_poisson_loss_is_drawn_as_it_is_with_the_deviance():
    from ptyacc.results.figures import loss_figure

    results = results_on_a_grid(False)
    results.loss, results.attrs["loss_name"] = np.array([-5.0, -7.0, -7.5]), "poisson"
    results.attrs["poisson_deviance"] = 1.07
    ax = loss_figure(results).axes[0]
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), results.loss)
    assert ax.get_yscale() == "linear" and "final Poisson deviance 1.07" in ax.get_title()


@pytest.mark.parametrize("refined", [False, True])
def test_positions_legend_only_for_what_happened(refined):
    from ptyacc.results.figures import positions_figure

    results = results_on_a_grid(refined)
    initial = results.positions_A - (0.05 if refined else 0.0)
    ax = positions_figure(results, initial).axes[0]
    if refined:
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["initial", "refined"]
    else:
        assert ax.get_legend() is None and len(ax.lines) == 1 and ax.get_title() == "probe positions (not refined)"


@pytest.mark.slow
def test_plot_redraws_the_runs_figures_exactly(tmp_path):
    from click.testing import CliRunner

    from ptyacc.commands.cli import cli

    config = ptyacc.load_config(tiny_config(tmp_path, optim={"iterations": 3, "start": {"positions": 1}}))
    ptyacc.reconstruct(config)
    out = tmp_path / "out"
    assert ptyacc.load_results(out / "results.h5").initial_positions_A is not None
    result = CliRunner().invoke(cli, ["plot", str(out / "results.h5"), "-o", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    for name in ("object_phase.png", "probe.png", "loss.png", "positions.png", "summary.png"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes(), name


@pytest.mark.slow
def test_poisson_runs_draw_the_deviance_per_iteration(tmp_path):
    """The Poisson loss leaves out the data-only term sum(M - M log M); results.h5 keeps it (and
    the count of pixel values >= 1), so the loss history becomes the deviance per counted pixel,
    whose last value is near the final model's deviance."""
    from ptyacc.results.figures import loss_figure, poisson_deviance_history

    config = ptyacc.load_config(tiny_config(tmp_path, optim={"iterations": 6, "loss": "poisson"},
                                            data={"simulate": {"scan_shape": [6, 6], "detector_px": 16, "atoms": 6,
                                                               "dose": 1e4}}))
    rec = ptyacc.reconstruct(config)
    measured = np.fft.fftshift(rec.data.patterns.double().numpy(), axes=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        data_term = np.where(measured > 0, measured - measured * np.log(measured), 0.0).sum(axis=(1, 2)).mean()
    results = ptyacc.load_results(tmp_path / "out" / "results.h5")
    assert results.attrs["poisson_data_nll_per_pattern"] == pytest.approx(data_term, rel=1e-9)
    assert results.attrs["counted_pixel_values_per_pattern"] == pytest.approx((measured >= 1).sum() / len(measured))
    assert results.attrs["counts_per_counted_pixel"] == pytest.approx(measured.sum() / (measured >= 1).sum(), rel=1e-9)
    deviance = poisson_deviance_history(results)
    expected = (results.loss - data_term) / (0.5 * (measured >= 1).sum() / len(measured))
    np.testing.assert_allclose(deviance, expected, rtol=1e-9)
    assert deviance[-1] == pytest.approx(results.attrs["poisson_deviance"], rel=0.2)
    assert deviance[0] > deviance[-1] > 0
    ax = loss_figure(results).axes[0]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), deviance)
    assert ax.get_ylabel() == "Poisson deviance per counted pixel"
