"""Figures: what summary.png's panels say and draw."""

from pathlib import Path

import matplotlib
import numpy as np
import pytest
from conftest import tiny_config

import ptyacc
from ptyacc.output import Results, save_figures

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
