"""One change of focus for every probe mode, refined in the run (``optim.start.probe_focus``,
``ptyacc/quantities/probe_focus.py``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import tiny_config
from test_distributed import ONE_TWO_DATA_SPLIT, launch_configs
from varying_probe import phase_ncc, write_varying_case

import ptyacc
from ptyacc.data.trouble import refocused_probe_said
from ptyacc.errors import ConfigError
from ptyacc.physics.probe import stem_probe
from ptyacc.physics.wavelength import electron_wavelength_A
from ptyacc.quantities.probe_focus import FOCUS_STEP_SHARE, ProbeFocus, probe_focus

K, DK, SEMIANGLE = 64, 0.03, 25.0
WAVELENGTH = electron_wavelength_A(80e3)


def modes_at(defocus_A: float) -> torch.Tensor:
    """(2, K, K) complex: two probe modes of ``defocus_A`` (the second a shifted copy at half the amplitude)."""
    probe = stem_probe(K, DK, WAVELENGTH, SEMIANGLE, {"C10": -defocus_A})
    return torch.stack([probe, 0.5 * torch.roll(probe, (3, -2), dims=(0, 1))])


def test_every_mode_is_propagated_by_the_change_and_a_fold_keeps_the_probes():
    """The modes with a change of d Å are those made with d Å more defocus (``stem_probe``'s aberration phase, at
    changes far beyond first order); after a fold the probe parameter holds them, the change is zero and the total
    keeps the sum."""
    focus = ProbeFocus(1.0 / (K * DK), WAVELENGTH)
    start = modes_at(80.0)
    for change in (-60.0, 25.0, 140.0):
        with torch.no_grad():
            focus.change_A.fill_(change)
        moved = focus.probes(start, torch.arange(3), torch.tensor(1.0)).detach()
        expected = modes_at(80.0 + change)
        torch.testing.assert_close(moved, expected, rtol=0, atol=1e-5 * float(expected.abs().max()))
    parameter = torch.view_as_real(start).clone()
    with torch.no_grad():
        focus.change_A.fill_(12.5)
    before = focus.probes(start, torch.arange(3), torch.tensor(1.0)).detach()
    focus.fold(parameter)
    assert float(focus.change_A.detach()) == 0.0 and float(focus.total_A) == 12.5
    folded = torch.view_as_complex(parameter)
    torch.testing.assert_close(folded, before, rtol=0, atol=1e-6 * float(before.abs().max()))
    torch.testing.assert_close(focus.probes(folded, torch.arange(3), torch.tensor(1.0)), folded)  # change 0: as is
    with torch.no_grad():
        focus.change_A.fill_(-2.5)
    focus.fold(parameter)
    assert float(focus.total_A) == 10.0
    torch.testing.assert_close(torch.view_as_complex(parameter), modes_at(90.0), rtol=0,
                               atol=1e-5 * float(before.abs().max()))


def test_the_change_s_gradient_is_the_data_term_s_slope():
    """The gradient in the change of focus of a Poisson data term (two modes' intensities summed, a random phase
    object) equals its central differences in float64."""
    generator = torch.Generator().manual_seed(4)
    focus = ProbeFocus(1.0 / (K * DK), WAVELENGTH).double()
    modes = modes_at(100.0).to(torch.complex128)
    transmission = torch.polar(torch.ones(K, K, dtype=torch.float64),
                               0.3 * torch.rand(K, K, generator=generator, dtype=torch.float64))
    measured = torch.poisson(1e3 * (torch.fft.fft2(modes_at(110.0).to(torch.complex128) * transmission).abs() ** 2)
                             .sum(0) / (torch.fft.fft2(modes * transmission).abs() ** 2).sum(), generator=generator)

    def data_term() -> torch.Tensor:
        waves = torch.fft.fft2(focus.probes(modes, torch.arange(1), torch.tensor(1.0)) * transmission)
        model = 1e3 * (waves.abs() ** 2).sum(0) / (torch.fft.fft2(modes * transmission).abs() ** 2).sum()
        return (model - measured * torch.log(model + 1e-9)).sum()

    with torch.no_grad():
        focus.change_A.fill_(3.0)
    data_term().backward()
    gradient = float(focus.change_A.grad)
    step = 1e-3
    values = []
    for change in (3.0 + step, 3.0 - step):
        with torch.no_grad():
            focus.change_A.fill_(change)
            values.append(float(data_term()))
    assert abs(gradient) > 1e-3  # a slope worth checking: the data were made 7 Å further on
    assert gradient == pytest.approx((values[0] - values[1]) / (2 * step), rel=1e-5)


def test_run_s_end_says_the_change_and_the_defocus_that_starts_a_run_there():
    """run.log's line: the change from the defocus the run started at and where it leads; on the terminal too from
    5 % of it; none without the refinement."""
    results = SimpleNamespace(attrs={"probe_focus_change_A": 9.84}, calibration={"defocus_A": (115.2, "fitted")})
    [(line, told)] = refocused_probe_said(results)
    assert "changed the defocus by +9.8 A from the 115.2 A it started at (fitted)" in line
    assert "experiment.defocus_A: 125.0 starts a run there" in line
    assert told
    small = SimpleNamespace(attrs={"probe_focus_change_A": -3.0}, calibration={"defocus_A": (-120.0, "config")})
    [(line, told)] = refocused_probe_said(small)
    assert "experiment.defocus_A: -123.0" in line and not told
    assert refocused_probe_said(SimpleNamespace(attrs={}, calibration={"defocus_A": (115.2, "file")})) == []


def reconstruct(path: Path, out: Path, defocus_A: float, **optim) -> ptyacc.Reconstruction:
    config = {"data": {"path": str(path)},
              "experiment": {"positions": {"key": "positions_A"}, "defocus_A": defocus_A},
              "optim": {"iterations": 30, "batch_size": 32, **optim}, "runtime": {"progress": False},
              "output": {"dir": str(out)}}
    return ptyacc.reconstruct(ptyacc.load_config(config))


@pytest.mark.slow
def test_a_defocus_started_off_is_brought_near_the_truth(grid_simulator, tmp_path):
    """Random atoms (16 x 16 in 0.5 Å steps, 1e4 counts) at a defocus of 100 Å, the run started at 85 Å (15 % low,
    as a partly coherent beam's parallax can read it): with the change of focus refined from iteration 4 the run
    ends within 4 Å of the truth (measured 97.7 Å), fits the data about as well as the run told the truth and its
    phase correlates with the truth as well (0.9886 against 0.9887 told and 0.9860 without the refinement)."""
    path = tmp_path / "case.h5"
    truth = write_varying_case(grid_simulator, path, defocus_A=(100.0, 100.0), current_spread=0.0,
                               scan_shape=(16, 16), dose=1e4, seed=3)
    plain = reconstruct(path, tmp_path / "plain", 85.0)
    refined = reconstruct(path, tmp_path / "refined", 85.0, start={"probe_focus": 4})
    told = reconstruct(path, tmp_path / "told", 100.0)
    assert "probe_focus_change_A" not in plain.results.attrs
    assert abs(85.0 + refined.results.attrs["probe_focus_change_A"] - 100.0) < 4.0
    assert told.poisson_deviance < refined.poisson_deviance < plain.poisson_deviance
    assert refined.poisson_deviance - told.poisson_deviance < 0.2 * (plain.poisson_deviance - told.poisson_deviance)
    assert phase_ncc(refined, truth) > phase_ncc(plain, truth) + 0.0015
    assert phase_ncc(refined, truth) > phase_ncc(told, truth) - 0.001


def factory_config(radiation: str = "electron", lr: float | str = "auto", focus_to_sample_m=None, probe_init=None,
                   geometry: str = "far_field"):
    return SimpleNamespace(optim=SimpleNamespace(start=SimpleNamespace(probe_focus=0), lr=SimpleNamespace(probe_focus=lr)),
                           experiment=SimpleNamespace(radiation=radiation, focus_to_sample_m=focus_to_sample_m,
                                                      geometry=geometry),
                           model=SimpleNamespace(probe_init=probe_init))


def test_several_scans_are_refused():
    """The probes of several scans (``scans:``) are not refocused: the key is refused, not ignored."""
    config = factory_config()
    geometry, data = SimpleNamespace(dx_A=0.3), SimpleNamespace(wavelength_A=WAVELENGTH)
    made = probe_focus(config, None, SimpleNamespace(scans=None, geometry=geometry, data=data, said=[]))
    assert isinstance(made, ProbeFocus) and made.dx_A == 0.3
    with pytest.raises(ConfigError, match="optim.start.probe_focus: one scan only"):
        probe_focus(config, None, SimpleNamespace(scans=["first", "second"], geometry=geometry, data=data, said=[]))
    config.optim.start.probe_focus = None
    assert probe_focus(config, None, SimpleNamespace(scans=None, geometry=geometry, data=data, said=[])) is None


XRAY_WAVELENGTH, XRAY_DX, XRAY_K = 1.5498, 800.0, 128


def zone_plate_beam(focus_to_sample_A: float) -> np.ndarray:
    """(K, K) complex, NumPy alone: a zone plate's beam (its far field an annulus of radii 10 and 24 frequency pixels)
    advanced ``focus_to_sample_A`` past its focus by exp(-i pi lambda z k^2), centred in the window."""
    k = np.fft.fftfreq(XRAY_K, d=XRAY_DX)
    radius = np.hypot(*np.meshgrid(np.fft.fftfreq(XRAY_K) * XRAY_K, np.fft.fftfreq(XRAY_K) * XRAY_K, indexing="ij"))
    annulus = ((radius >= 10) & (radius <= 24)).astype(float)
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    return np.fft.fftshift(np.fft.ifft2(annulus * np.exp(-1j * np.pi * XRAY_WAVELENGTH * focus_to_sample_A * k2)))


def test_an_x_ray_change_moves_the_sample_s_place_the_other_way():
    """A zone plate's beam 2.6 mm past its focus with a change of d Å is the beam 2.6 mm - d past it (NumPy's angular
    spectrum): the end line's experiment.focus_to_sample_m subtracts the change, and says so from 5 % of the place."""
    focus = ProbeFocus(XRAY_DX, XRAY_WAVELENGTH, focus_to_sample_m=-2.6e-3)
    start = torch.from_numpy(zone_plate_beam(-2.6e7)).to(torch.complex64)
    for change in (2.5e6, -4e5):
        with torch.no_grad():
            focus.change_A.fill_(change)
        moved = focus.probes(start[None], torch.arange(1), torch.tensor(1.0))[0].detach().numpy()
        expected = zone_plate_beam(-2.6e7 - change)
        assert np.abs(moved - expected).max() < 1e-4 * np.abs(expected).max()
        assert np.abs(moved - zone_plate_beam(-2.6e7 + change)).max() > 0.1 * np.abs(expected).max()
    attributes = focus.attributes(None)
    assert attributes["probe_focus_to_sample_start_m"] == -2.6e-3
    [(line, told)] = refocused_probe_said(SimpleNamespace(attrs={**attributes, "probe_focus_change_A": 2.5e6},
                                                          calibration={}))
    assert "moved the sample's place past the focus by -0.25 mm from the -2.6 mm it started at" in line
    assert "experiment.focus_to_sample_m: -0.00285 starts a run there" in line and told
    [(line, told)] = refocused_probe_said(SimpleNamespace(attrs={**attributes, "probe_focus_change_A": -1e5},
                                                          calibration={}))
    assert "experiment.focus_to_sample_m: -0.00259 starts" in line and not told
    unknown = {"probe_focus_change_A": 1e5, "probe_focus_to_sample_start_m": float("nan")}
    [(line, told)] = refocused_probe_said(SimpleNamespace(attrs=unknown, calibration={}))
    assert "by -0.01 mm from where the initial probe was made" in line and "starts a run" not in line


def test_the_step_s_auto_is_an_angstrom_for_electrons_and_a_share_of_the_x_ray_beam_s_depth_of_focus():
    """optim.lr.probe_focus: auto is 1 Å per step for electrons; for X-rays FOCUS_STEP_SHARE of 1 / (pi lambda rms(q^2))
    over the initial probe's spectrum (NumPy: the annulus's pixels, equally bright), said in run.log; a number given is
    the step; the X-ray start is the place given, NaN for a probe from a file."""
    beam = zone_plate_beam(2.6e7)
    power = np.abs(np.fft.fft2(beam)) ** 2
    q = np.fft.fftfreq(XRAY_K, d=XRAY_DX)
    q2 = q[:, None] ** 2 + q[None, :] ** 2
    unit = 1.0 / (np.pi * XRAY_WAVELENGTH * np.sqrt((power * q2 ** 2).sum() / power.sum()))
    model = SimpleNamespace(complex_probe=lambda: torch.from_numpy(beam).to(torch.complex64)[None])

    def made(config, wavelength_A=XRAY_WAVELENGTH):
        context = SimpleNamespace(scans=None, geometry=SimpleNamespace(dx_A=XRAY_DX),
                                  data=SimpleNamespace(wavelength_A=wavelength_A), said=[])
        return probe_focus(config, model, context), context.said

    focus, said = made(factory_config("xray", focus_to_sample_m=2.6e-3))
    assert focus.step_A == pytest.approx(FOCUS_STEP_SHARE * unit, rel=1e-6)
    assert 1e6 < unit < 1e8  # millimetres of depth, where an electron probe's is tens of Å
    assert said == [f"optim.lr.probe_focus: {focus.step_A:.4g} A per step (auto: {FOCUS_STEP_SHARE:g} of {unit:.4g} A "
                    f"({unit * 1e-7:.3g} mm), the change of focus that alters the initial probe by its own norm)"]
    assert focus.groups(factory_config(), SimpleNamespace(probe=None), None)[0].lr == focus.step_A
    assert focus.focus_to_sample_m == 2.6e-3
    focus, said = made(factory_config("electron"), WAVELENGTH)
    assert focus.step_A == 1.0 and focus.focus_to_sample_m is None and "(auto: electrons)" in said[0]
    focus, said = made(factory_config("xray", lr=3e4, probe_init={"path": "probe.h5"}, focus_to_sample_m=2.6e-3))
    assert focus.step_A == 3e4 and said == [] and np.isnan(focus.focus_to_sample_m)
    context = SimpleNamespace(scans=None, geometry=SimpleNamespace(dx_A=XRAY_DX), said=[],
                              data=SimpleNamespace(wavelength_A=XRAY_WAVELENGTH))
    near = probe_focus(factory_config("xray", focus_to_sample_m=2.6e-3, geometry="near_field"), model, context)
    assert near.focus_to_sample_m is None  # the near field's place is the holograms' magnification, not the probe's


def processes_split_and_resume_agree(tmp_path: Path, start: str, changes: tuple[str, ...],
                                     resumed: tuple[str, ...], experiment: dict | None = None) -> None:
    """A probe quantity refined from iteration 2 (``optim.start.<start>``): 1 and 2 processes give the same
    ``changes`` (results.h5 attributes: each moved) and losses; the split object gives shard_data's; a run resumed
    from a checkpoint ends where the uninterrupted run ends, with the same ``resumed`` attributes. ``experiment``:
    in place of the electrons' section."""
    settings = tiny_config(tmp_path, optim={"iterations": 5, "batch_size": 8, "start": {start: 2}},
                           output={"figures": False, "checkpoint_every": 2, "keep_checkpoints": 2})
    settings["data"]["simulate"].update(scan_shape=[10, 10])
    settings["experiment"]["scan_step_A"] = 3.0
    if experiment is not None:
        settings["experiment"] = experiment
    outs = launch_configs(tmp_path, [(name, settings, processes, extra) for name, processes, extra in ONE_TWO_DATA_SPLIT])
    runs = {name: ptyacc.load_results(out / "results" / "results.h5") for name, out in outs.items()}
    for reference, name in (("one", "two"), ("data", "split")):
        for attr in changes:
            change = [runs[n].attrs[attr] for n in (reference, name)]
            assert abs(change[0]) > 1e-3  # it moved
            assert change[1] == pytest.approx(change[0], rel=1e-4, abs=1e-5)
        np.testing.assert_allclose(runs[name].probe, runs[reference].probe, rtol=0,
                                   atol=1e-4 * np.abs(runs[reference].probe).max())
        np.testing.assert_allclose(runs[name].loss, runs[reference].loss, rtol=1e-4)
    config = ptyacc.load_config({**settings, "output": {**settings["output"], "dir": str(tmp_path / "resume")}})
    whole = ptyacc.reconstruct(config).results
    sorted((tmp_path / "resume" / "checkpoints").iterdir())[-1].unlink()
    again = ptyacc.reconstruct(config, resume=True).results
    for attr in resumed:
        assert again.attrs[attr] == whole.attrs[attr]
    np.testing.assert_array_equal(again.probe, whole.probe)


@pytest.mark.slow
def test_two_processes_the_split_object_and_resume_agree(tmp_path):
    """1 and 2 processes give the same change of focus and losses; the split object gives shard_data's; a run
    resumed from a checkpoint ends where the uninterrupted run ends (the change and its total travel with it)."""
    processes_split_and_resume_agree(tmp_path, "probe_focus", ("probe_focus_change_A",), ("probe_focus_change_A",))


@pytest.mark.slow
def test_x_ray_far_field_two_processes_the_split_object_and_resume_agree(tmp_path):
    """The same for a simulated X-ray far-field scan, its step auto (a share of the beam's depth of focus), the sample
    1 mm past the focus: the change and the place it started at agree and travel with a checkpoint."""
    experiment = {"radiation": "xray", "energy_eV": 8000.0, "detector_distance_m": 2.0, "detector_pixel_m": 75e-6,
                  "scan_step_A": 8000.0, "focus_to_sample_m": 1e-3}
    processes_split_and_resume_agree(tmp_path, "probe_focus", ("probe_focus_change_A",),
                                     ("probe_focus_change_A", "probe_focus_to_sample_start_m"), experiment)
