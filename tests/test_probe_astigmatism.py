"""One change of two-fold astigmatism for every probe mode, refined in the run (``optim.start.probe_astigmatism``,
``ptyacc/quantities/probe_focus.py``): against ``stem_probe``'s aberration phase, central differences, a file of the
independent simulator made with a C12 the run is not told, and the 1-process run."""

from __future__ import annotations

from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import torch
from test_probe_focus import processes_split_and_resume_agree
from varying_probe import phase_ncc

import ptyacc
from ptyacc.data.trouble import astigmatism_said
from ptyacc.errors import ConfigError
from ptyacc.physics.probe import stem_probe
from ptyacc.physics.wavelength import electron_wavelength_A
from ptyacc.quantities.probe_focus import ProbeAstigmatism, probe_astigmatism

K, DK, SEMIANGLE = 64, 0.03, 25.0
WAVELENGTH = electron_wavelength_A(80e3)


def modes_at(c12a: float, c12b: float) -> torch.Tensor:
    """(2, K, K) complex: two probe modes at 90 Å defocus and this C12 (the second a shifted copy at half the
    amplitude)."""
    probe = stem_probe(K, DK, WAVELENGTH, SEMIANGLE, {"C10": -90.0, "C12a": c12a, "C12b": c12b})
    return torch.stack([probe, 0.5 * torch.roll(probe, (3, -2), dims=(0, 1))])


def test_every_mode_takes_the_change_and_a_fold_keeps_the_probes():
    """The modes with a change (a, b) Å are those made with that much more C12 (``stem_probe``'s aberration phase,
    far beyond first order); after a fold the probe parameter holds them, the change is zero, the total keeps the
    sum."""
    lens = ProbeAstigmatism(1.0 / (K * DK), WAVELENGTH, (4.0, -2.0))
    start = modes_at(4.0, -2.0)
    for change in ((30.0, 0.0), (0.0, -45.0), (-12.0, 20.0)):
        with torch.no_grad():
            lens.change_A.copy_(torch.tensor(change))
        moved = lens.probes(start, torch.arange(3), torch.tensor(1.0)).detach()
        expected = modes_at(4.0 + change[0], -2.0 + change[1])
        torch.testing.assert_close(moved, expected, rtol=0, atol=1e-5 * float(expected.abs().max()))
    parameter = torch.view_as_real(start).clone()
    with torch.no_grad():
        lens.change_A.copy_(torch.tensor([6.0, -3.0]))
    before = lens.probes(start, torch.arange(3), torch.tensor(1.0)).detach()
    lens.fold(parameter)
    assert lens.change_A.detach().tolist() == [0.0, 0.0] and lens.total_A.tolist() == [6.0, -3.0]
    torch.testing.assert_close(torch.view_as_complex(parameter), before, rtol=0, atol=1e-6 * float(before.abs().max()))
    with torch.no_grad():
        lens.change_A.copy_(torch.tensor([1.0, 1.0]))
    lens.fold(parameter)
    assert lens.total_A.tolist() == [7.0, -2.0]
    torch.testing.assert_close(torch.view_as_complex(parameter), modes_at(11.0, -4.0), rtol=0,
                               atol=1e-5 * float(before.abs().max()))
    attrs = lens.attributes(None)
    assert (attrs["probe_c12a_change_A"], attrs["probe_c12b_change_A"]) == (7.0, -2.0)
    assert (attrs["probe_c12a_start_A"], attrs["probe_c12b_start_A"]) == (4.0, -2.0)


def test_the_change_s_gradient_is_the_data_term_s_slope():
    """The gradient in (C12a, C12b) of a Poisson data term (two modes' intensities summed, a random phase object)
    equals its central differences in float64."""
    generator = torch.Generator().manual_seed(4)
    lens = ProbeAstigmatism(1.0 / (K * DK), WAVELENGTH).double()
    modes = modes_at(0.0, 0.0).to(torch.complex128)
    transmission = torch.polar(torch.ones(K, K, dtype=torch.float64),
                               0.3 * torch.rand(K, K, generator=generator, dtype=torch.float64))
    norm = (torch.fft.fft2(modes * transmission).abs() ** 2).sum()
    measured = torch.poisson(1e3 * (torch.fft.fft2(modes_at(8.0, -5.0).to(torch.complex128) * transmission).abs() ** 2)
                             .sum(0) / norm, generator=generator)

    def data_term() -> torch.Tensor:
        waves = torch.fft.fft2(lens.probes(modes, torch.arange(1), torch.tensor(1.0)) * transmission)
        model = 1e3 * (waves.abs() ** 2).sum(0) / norm
        return (model - measured * torch.log(model + 1e-9)).sum()

    at = torch.tensor([2.0, 1.0], dtype=torch.float64)
    with torch.no_grad():
        lens.change_A.copy_(at)
    data_term().backward()
    gradient = lens.change_A.grad.clone()
    step = 1e-3
    for part in range(2):
        values = []
        for sign in (1.0, -1.0):
            with torch.no_grad():
                lens.change_A.copy_(at + sign * step * torch.eye(2, dtype=torch.float64)[part])
                values.append(float(data_term()))
        assert abs(float(gradient[part])) > 1e-3  # a slope worth checking: the data were made at (8, -5) Å
        assert float(gradient[part]) == pytest.approx((values[0] - values[1]) / (2 * step), rel=1e-5)


def test_run_s_end_says_the_change_and_the_c12_that_starts_a_run_there():
    """run.log's line: the change from the C12 the run started at and where it leads; on the terminal too from 5 Å;
    none without the refinement."""
    results = SimpleNamespace(attrs={"probe_c12a_change_A": 9.84, "probe_c12b_change_A": -1.2,
                                     "probe_c12a_start_A": 2.0, "probe_c12b_start_A": 0.0})
    [(line, told)] = astigmatism_said(results)
    assert "changed C12a by +9.8 A and C12b by -1.2 A from the (2.0, 0.0) A it started at" in line
    assert "experiment.aberrations with C12a: 11.8, C12b: -1.2 (the others as they were) starts a run there" in line
    assert told
    small = SimpleNamespace(attrs={"probe_c12a_change_A": -3.0, "probe_c12b_change_A": 4.0})
    [(line, told)] = astigmatism_said(small)
    assert "C12a: -3.0, C12b: 4.0 (the others" in line and not told
    assert astigmatism_said(SimpleNamespace(attrs={"probe_focus_change_A": 2.0})) == []


def test_several_scans_are_refused_and_the_start_is_the_data_s():
    """The probes of several scans are not refined: the key is refused, not ignored. The C12 the run starts at is
    the dataset's."""
    config = SimpleNamespace(optim=SimpleNamespace(start=SimpleNamespace(probe_astigmatism=0)))
    geometry = SimpleNamespace(dx_A=0.3)
    data = SimpleNamespace(wavelength_A=WAVELENGTH, aberrations={"C10": -100.0, "C12a": 3.5, "C12b": -1.0})
    made = probe_astigmatism(config, None, SimpleNamespace(scans=None, geometry=geometry, data=data))
    assert isinstance(made, ProbeAstigmatism) and made.start_A.tolist() == [3.5, -1.0]
    with pytest.raises(ConfigError, match="optim.start.probe_astigmatism: one scan only"):
        probe_astigmatism(config, None, SimpleNamespace(scans=["first", "second"], geometry=geometry, data=data))
    config.optim.start.probe_astigmatism = None
    assert probe_astigmatism(config, None, SimpleNamespace(scans=None, geometry=geometry, data=data)) is None


@pytest.mark.slow
def test_an_astigmatism_the_run_is_not_told_is_found(grid_simulator, tmp_path):
    """Random atoms (16 x 16 in 0.5 Å steps, 1e5 counts) with a C12 of (18, -12) Å the run is not told: with the
    change of astigmatism refined from iteration 4 the run ends near it (measured (16.5, -11.3) Å), fits the data
    nearly as well as the run told it (deviance 1.7945 against 1.7938 told and 1.991 without) and its phase
    correlates with the truth as well (0.99797 against 0.99808 told and 0.99270 without)."""
    path = tmp_path / "case.h5"
    grid_simulator.write(str(path), grid_simulator.Setting(
        detector_px=48, scan_shape=(16, 16), scan_step_A=0.5, dose=1e5, defocus_A=100.0, c12_A=(18.0, -12.0), seed=3))
    with h5py.File(path) as f:
        truth = {"phase": f["ground_truth/phase"][()].astype(float), "positions_A": f["ground_truth/positions_A"][()]}

    def run(name: str, aberrations: dict, **optim) -> ptyacc.Reconstruction:
        config = {"data": {"path": str(path)},
                  "experiment": {"positions": {"key": "positions_A"}, "defocus_A": 100.0, "aberrations": aberrations},
                  "optim": {"iterations": 30, "batch_size": 32, **optim}, "runtime": {"progress": False},
                  "output": {"dir": str(tmp_path / name), "figures": False}}
        return ptyacc.reconstruct(ptyacc.load_config(config))

    plain = run("plain", {})
    refined = run("refined", {}, start={"probe_astigmatism": 4})
    told = run("told", {"C12a": 18.0, "C12b": -12.0})
    found = (refined.results.attrs["probe_c12a_change_A"], refined.results.attrs["probe_c12b_change_A"])
    assert "probe_c12a_change_A" not in plain.results.attrs
    assert np.hypot(found[0] - 18.0, found[1] + 12.0) < 3.0, found
    assert told.poisson_deviance < refined.poisson_deviance < plain.poisson_deviance
    assert refined.poisson_deviance - told.poisson_deviance < 0.05 * (plain.poisson_deviance - told.poisson_deviance)
    assert phase_ncc(refined, truth) > phase_ncc(plain, truth) + 0.003
    assert phase_ncc(refined, truth) > phase_ncc(told, truth) - 0.001


@pytest.mark.slow
def test_two_processes_the_split_object_and_resume_agree(tmp_path):
    """1 and 2 processes give the same change of astigmatism and losses; the split object gives shard_data's; a run
    resumed from a checkpoint ends where the uninterrupted run ends (the change, its total and start travel with it)."""
    changes = ("probe_c12a_change_A", "probe_c12b_change_A")
    processes_split_and_resume_agree(tmp_path, "probe_astigmatism", changes,
                                     (*changes, "probe_c12a_start_A", "probe_c12b_start_A"))
