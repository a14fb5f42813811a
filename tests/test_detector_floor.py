"""A dark offset left in electron counts (a pedestal): the dark field's flat floor is measured, kept apart from a
sample's scattering, taken off the scattering share that the loss's auto reads, and fitted as the model's background
from that floor (``model.background: auto``); a run that leaves it out says so."""

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml

import ptyacc
from ptyacc.optim.autos import FLAT_SLOPE, dark_field_fraction, detector_floor
from ptyacc.results.quality import scanned_region_ncc

ROOT = Path(__file__).parents[1]
DEMO = ROOT / "ptyacc" / "demo" / "demo_mos2.h5"
WAVELENGTH_A, SEMIANGLE_MRAD, DK = 0.0417572, 25.0, 0.078125  # the demo's 80 kV beam and detector pixel


def demo_mean_pattern() -> torch.Tensor:
    """The demo's mean pattern, unshifted (zero frequency at [0, 0]), as the run's statistics give it."""
    with h5py.File(DEMO) as f:
        mean = f["patterns"][()].reshape(-1, 64, 64).astype(np.float64).mean(0)
    return torch.from_numpy(np.fft.ifftshift(mean))


def disk_and_decay(offset: float, power: float = 3.0) -> torch.Tensor:
    """A synthetic mean pattern (unshifted): a disk of 1000 counts per pixel and the demo's radius, beyond it a
    scattering of 2 counts per pixel at the disk's edge falling as radius^-power, plus ``offset`` on every pixel."""
    k = torch.fft.fftfreq(64, d=1.0 / 64, dtype=torch.float64)
    r = torch.sqrt(k[:, None] ** 2 + k[None, :] ** 2)
    radius = SEMIANGLE_MRAD * 1e-3 / WAVELENGTH_A / DK
    return torch.where(r <= radius, torch.tensor(1000.0), 2.0 * (r.clamp(min=radius) / radius) ** -power) + offset


@pytest.mark.parametrize("offset, flat", [(0.0, False), (0.05, False), (1.0, True), (5.0, True)])
def test_a_floor_is_flat_where_an_offset_outweighs_the_scattering_that_falls_away_from_the_disk(offset, flat):
    floor = detector_floor(disk_and_decay(offset), WAVELENGTH_A, SEMIANGLE_MRAD, DK)
    assert floor.flat == flat, floor
    if offset == 0.0:  # the pure power law's own power, between the two thirds' median distances
        assert floor.slope == pytest.approx(-3.0, abs=0.05)
    # the outer third lies 2.2-4.2 disk radii out: the scattering there is 2 (r / radius)^-3, under 0.19 counts
    assert offset <= floor.outer <= offset + 0.19
    assert floor.inner > floor.outer  # the scattering is higher near the disk, with or without the offset


def test_the_demos_dark_field_is_scattering_and_an_added_offset_is_found_and_taken_off_the_share():
    mean = demo_mean_pattern()
    clean = detector_floor(mean, WAVELENGTH_A, SEMIANGLE_MRAD, DK)
    assert not clean.flat and clean.outer < 0.2 * clean.inner  # abTEM's MoS2: the dark field falls off
    offset = detector_floor(mean + 3.0, WAVELENGTH_A, SEMIANGLE_MRAD, DK)
    assert offset.flat and offset.outer == pytest.approx(3.0 + clean.outer, abs=1e-9)
    assert offset.slope >= -FLAT_SLOPE > clean.slope
    share = dark_field_fraction(mean, WAVELENGTH_A, SEMIANGLE_MRAD, DK)
    assert dark_field_fraction(mean + 3.0, WAVELENGTH_A, SEMIANGLE_MRAD, DK) > 5 * share  # read as strong scattering
    taken_off = dark_field_fraction(mean + 3.0, WAVELENGTH_A, SEMIANGLE_MRAD, DK, floor=offset.outer)
    assert taken_off == pytest.approx(share, rel=0.2)


def offset_demo(folder: Path, counts: float) -> Path:
    """The demo's file with a Poisson offset of ``counts`` per pixel added to every pattern."""
    path = folder / f"offset{counts:g}.h5"
    with h5py.File(DEMO) as demo, h5py.File(path, "w") as f:
        f.attrs.update(demo.attrs)
        patterns = demo["patterns"][()].astype(np.int64)
        f["patterns"] = (patterns + np.random.default_rng(0).poisson(counts, patterns.shape)).astype(np.uint16)
        f["positions_A"] = demo["positions_A"][()]
        f.create_dataset("ground_truth/phase", data=demo["ground_truth/phase"][()])
    return path


def run_scored(path: Path, out: Path, *sets: str) -> tuple[float, ptyacc.Reconstruction]:
    config = ptyacc.load_config(ROOT / "configs" / "demo.yaml", [
        f"data.path={path}", f"output.dir={out}", "runtime.progress=false", "output.figures=false",
        "optim.iterations=10", *sets])
    rec = ptyacc.reconstruct(config)
    with h5py.File(path) as f:
        truth = f["ground_truth/phase"][()]
    return scanned_region_ncc(rec.results.phase, rec.results.origin_A, rec.results.dx_A, rec.data.positions_A,
                              truth), rec


@pytest.mark.slow
def test_an_offset_of_three_counts_is_fitted_from_its_floor_and_a_run_without_it_warns(tmp_path, capsys):
    """The demo with 3 counts per pixel added (a tenth of its counts), 10 iterations: measured NCC 0.971 with
    the background fitted from the floor, 0.404 without it."""
    path = offset_demo(tmp_path, 3.0)
    fitted, rec = run_scored(path, tmp_path / "auto")
    assert "model.background: fitted, from the dark field's flat floor of 3.0" in capsys.readouterr().err
    with h5py.File(tmp_path / "auto" / "results.h5") as f:
        values = yaml.safe_load(f.attrs["auto_values"])
        background = f["fitted/background"][()]
    assert values["model.background"] is True and values["model.background_start_counts"] == pytest.approx(3.0, abs=0.1)
    assert values["optim.loss"] == "poisson"  # the offset is not read as a strong scatterer's dark field
    assert np.median(background) == pytest.approx(3.0, abs=0.3)
    left_out, _ = run_scored(path, tmp_path / "false", "model.background=false")
    said = capsys.readouterr().err
    assert "warning: the dark field has a flat floor of 3.0" in said and "model.background: auto fits it" in said
    with h5py.File(tmp_path / "false" / "results.h5") as f:
        assert any("flat floor" in text for text in yaml.safe_load(f.attrs["warnings"]))
    print(f"NCC fitted {fitted:.3f}, left out {left_out:.3f}")
    assert fitted > 0.93 and fitted > left_out + 0.1, (fitted, left_out)


@pytest.mark.processes
def test_one_and_two_processes_fit_the_same_background_and_split_data_reads_the_same_floor(tmp_path):
    """The demo with 3 counts added, 3 iterations: 1 and 2 processes fit the same background and object. With the
    data split between the processes (``runtime.shard_data``, whose batches differ from one process's: its own
    reference) each process reads its share of one sample of positions, the same on any number of processes, so
    the floor measured is the one process's (it was 3.0273 against 3.0234 when each process sampled its own share)."""
    from test_distributed import ONE_TWO_DATA_SPLIT, launch_configs

    settings = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    settings["data"]["path"] = str(offset_demo(tmp_path, 3.0))
    settings["optim"] = {"iterations": 3}
    settings["output"] = {"figures": False}
    settings["runtime"] = {"progress": False, "threads": 1}
    outs = launch_configs(tmp_path, [(name, settings, processes, extra) for name, processes, extra in ONE_TWO_DATA_SPLIT
                                     if name in ("one", "two", "data")])
    runs = {}
    for name, out in outs.items():
        with h5py.File(out / "results" / "results.h5") as f:
            values = yaml.safe_load(f.attrs["auto_values"])
            runs[name] = (values["model.background_start_counts"], f["fitted/background"][()], f["object"][()], f["loss"][()])
        assert values["model.background"] is True
    start, background, obj, loss = runs["one"]
    assert start == pytest.approx(3.0, abs=0.1) and abs(np.median(background) - start) > 1e-4  # fitted: it moved
    assert runs["two"][0] == start and runs["data"][0] == pytest.approx(start, rel=1e-12)
    np.testing.assert_allclose(runs["two"][1], background, rtol=0, atol=1e-4 * np.abs(background).max())
    np.testing.assert_allclose(runs["two"][2], obj, rtol=0, atol=1e-4 * np.abs(obj).max())
    np.testing.assert_allclose(runs["two"][3], loss, rtol=1e-6)
