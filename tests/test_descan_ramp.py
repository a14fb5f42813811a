"""``data.transform.descan_model: ramp`` (ptyacc/quantities/descan_ramp.py): the descan as a phase ramp on
each position's exit wave, against the independent simulator (benchmarks/grid/simulate.py), which makes the
descan as a ramp on the exit wave, on one slice and on several."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import descan_case

import ptyacc
from ptyacc.data.autocalibration import MeasuredDescan, descan_left_to_model
from ptyacc.physics import Detector, detected_intensities, shift_ramp
from ptyacc.quantities import BuildContext
from ptyacc.quantities.descan_ramp import DescanRamp, descan_in_model
from ptyacc.reconstruction.batch_auto import descan_moved
from ptyacc.results.quality import best_shift_ncc

PLANE = dict(descan_offset_px=(0.4, -0.7), descan_px_per_A=((0.15, -0.1), (0.08, 0.2)))


def predicted(result, n, descan_px, kernel=None):
    """ptyacc's intensities (N, K, K), fftshifted, of the simulator's probe and object (its slices with its
    propagator ``kernel`` between them) with ``descan_px`` (N, 2) put in by ``DescanRamp`` (None: none)."""
    centres_px = torch.from_numpy(result["positions_A"] / result["dx_A"])
    whole = torch.round(centres_px)
    probe = torch.from_numpy(result["probe"])[None]
    exit_ramps = None
    if descan_px is not None:
        exit_ramps = DescanRamp(descan_px, n).exit_ramp(torch.arange(len(centres_px))).to(probe.dtype)
    obj = torch.from_numpy(np.exp(1j * result["phases"]))[None]
    propagator = None if kernel is None else torch.from_numpy(kernel).to(probe.dtype)
    found = detected_intensities(probe, obj, (whole - n // 2).long(), shift_ramp(centres_px - whole, n), propagator,
                                 Detector(), exit_ramps=exit_ramps)
    return torch.fft.fftshift(found, dim=(-2, -1)).numpy()


@pytest.mark.parametrize("defocus, slices", [(0.0, 1), (60.0, 1), (60.0, 3)])
def test_the_ramp_moves_the_prediction_as_the_simulators_descan(grid_simulator, defocus, slices):
    setting = grid_simulator.Setting(detector_px=32, scan_shape=(4, 4), scan_step_A=0.9, dose=0.0, defocus_A=defocus,
                                     edge_mrad=80.0, seed=4, slices=slices, slice_thickness_A=20.0, **PLANE)
    result = grid_simulator.simulate(setting)
    kernel = None if slices == 1 else grid_simulator.fresnel_kernel(32, result["dx_A"], result["wavelength_A"],
                                                                   setting.slice_thickness_A)
    truth = result["descan_px"]
    assert 0.5 < np.abs(truth).max() < 2.0
    measured = result["patterns"].reshape(-1, 32, 32).astype(np.float64)

    def error(descan):
        return np.abs(predicted(result, 32, descan, kernel) - measured).max() / measured.max()

    assert error(truth) < 1e-6
    assert error(-truth) > 0.1 and error(None) > 0.05  # the sign shows, and the descan does


def test_taken_over_several_slices_refused_over_several_scans_and_off_unless_asked():
    config = ptyacc.load_config({"data": {"path": "x.h5", "transform": {"descan": "auto", "descan_model": "ramp"}}})
    found = SimpleNamespace(descan=MeasuredDescan(None, np.full((3, 2), 0.5), in_model=True))
    data = SimpleNamespace(autocalibration=found)

    def model(slices):
        return SimpleNamespace(object=torch.zeros(1, slices, 8, 8, 2), near_field=False, window=4,
                               refine_positions=False, fixed_fractions=torch.zeros(3, 2))

    ramp = descan_in_model(config, model(1), BuildContext(data, None))
    probe, indices = torch.randn(2, 4, 4, dtype=torch.complex64), torch.tensor([2, 0, 1])
    assert torch.equal(ramp.probes(probe, indices, torch.tensor(1.0)), probe)  # the probe left alone
    ramps = ramp.exit_ramp(indices)
    assert ramps.shape == (3, 4, 4) and ramps.dtype == torch.complex64
    assert torch.allclose(ramps[0], torch.exp(2j * torch.pi * 0.5 * torch.arange(4.0) / 4)[:, None]
                          * torch.exp(2j * torch.pi * 0.5 * torch.arange(4.0) / 4)[None], atol=1e-6)
    assert isinstance(descan_in_model(config, model(2), BuildContext(data, None)), DescanRamp)
    with pytest.raises(ValueError, match="one scan"):
        descan_in_model(config, model(1), BuildContext(data, None, scans=[None, None]))
    shift = ptyacc.load_config({"data": {"path": "x.h5", "transform": {"descan": "auto", "descan_model": "shift"}}})
    assert descan_in_model(shift, model(1), BuildContext(data, None)) is None
    default = ptyacc.load_config({"data": {"path": "x.h5", "transform": {"descan": "auto"}}})
    assert default.data.transform.descan_model == "auto" and descan_left_to_model(default)  # auto: the ramp
    sliced = ptyacc.load_config({"data": {"path": "x.h5", "transform": {"descan": "auto"}}, "model": {"slices": 2}})
    finer = ptyacc.load_config({"data": {"path": "x.h5", "transform": {"descan": "auto", "upsample": 2}}})
    assert descan_left_to_model(sliced) and not descan_left_to_model(finer)  # auto: the ramp over slices, the shift there
    # the patterns were not moved, so optim.batch_size: auto keeps about 8 steps per iteration
    shifted = SimpleNamespace(descan=MeasuredDescan(None, np.full((3, 2), 0.5)))
    assert not descan_moved(data) and descan_moved(SimpleNamespace(autocalibration=shifted))


def reconstructed(path, out, model, batch=32, iterations=20):
    config = {"data": {"path": str(path), "transform": {"descan": "auto", "descan_model": model}},
              "experiment": {"positions": {"key": "positions_A"}},
              "optim": {"iterations": iterations, "batch_size": batch},
              "output": {"dir": str(out), "figures": False}, "runtime": {"progress": False, "threads": 1}}
    return ptyacc.reconstruct(ptyacc.load_config(config)), (out / "run.log").read_text()


@pytest.mark.slow
def test_the_ramp_beats_the_shift_at_small_batches(grid_simulator, tmp_path):
    path, truth, dx, positions = descan_case(grid_simulator, tmp_path)
    found = {}
    for model in ("ramp", "shift"):
        rec, log = reconstructed(path, tmp_path / model, model)
        found[model], _ = best_shift_ncc(rec.results.phase, rec.results.origin_A, dx, positions, truth,
                                         levels=((0.5, 4), (0.1, 4)))
        if model == "ramp":
            assert "descan_ramp" in rec.model.quantities and "descan_model: ramp" in log
            assert rec.results.detector["descan_in_model"]
    assert found["ramp"] > 0.9 and found["ramp"] > found["shift"] + 0.05, found
