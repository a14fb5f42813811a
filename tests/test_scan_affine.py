"""The scan's global affine distortion (optim.start.scan_affine): the positions it makes, and a
drifting, jittered scan recovered from its nominal raster."""

import dataclasses

import numpy as np
import pytest
import torch

import ptyacc
from ptyacc.data import load_data
from ptyacc.data.positions import turned_positions_A
from ptyacc.data.simulate import _forward
from ptyacc.physics import fresnel_propagator

DRIFT_A_PER_ROW = (0.01, 0.03)  # (y, x): the scan slowly stretches along y and shears along x
JITTER_A = 0.1


def test_positions_are_the_affine_of_the_nominal_ones_plus_the_offsets():
    config = ptyacc.load_config({"data": {"simulate": {"scan_shape": [4, 5], "detector_px": 16}},
                                 "experiment": {"dx_A": 0.3}, "optim": {"start": {"scan_affine": 0}}})
    data = load_data(config)
    rec = ptyacc.reconstruct(dataclasses.replace(config, optim=dataclasses.replace(config.optim, iterations=1)),
                             data=data, write=False)
    model = rec.model
    with torch.no_grad():
        model.scan_affine.copy_(torch.tensor([[0.02, -0.05], [0.03, 0.01]]))
        model.position_offsets.copy_(torch.randn(model.position_offsets.shape, generator=torch.Generator().manual_seed(0)))
    nominal = model.positions_px.double().numpy()
    centre = nominal.mean(0)
    expected = centre + (nominal - centre) @ (np.eye(2) + model.scan_affine.detach().double().numpy()).T
    expected += model.position_offsets.detach().double().numpy()
    np.testing.assert_allclose(model.positions().detach().double().numpy(), expected, rtol=0, atol=1e-4)


def test_the_refined_affine_is_in_results_h5(tmp_path):
    config = ptyacc.load_config({"data": {"simulate": {"scan_shape": [4, 5], "detector_px": 16}},
                                 "experiment": {"dx_A": 0.3}, "optim": {"iterations": 2, "start": {"scan_affine": 0}},
                                 "output": {"dir": str(tmp_path), "figures": False}, "runtime": {"progress": False}})
    rec = ptyacc.reconstruct(config)
    affine = rec.model.scan_affine.detach().double().numpy()
    assert np.abs(affine).max() > 0  # stepped, not the start
    saved = ptyacc.load_results(tmp_path / "results.h5").quantities["fitted"]["scan_affine"]
    np.testing.assert_array_equal(saved, affine)


def drifting_scan(config: dict, seed: int = 0):
    """The dataset of ``config`` made again with probes that drift row by row (DRIFT_A_PER_ROW)
    and jitter (JITTER_A rms per axis), the file keeping the nominal raster; the true positions
    (N, 2) Å in its ground truth."""
    loaded = ptyacc.load_config(config)
    data = load_data(loaded)
    geometry, dx = data.ground_truth["geometry"], data.dx_A
    rows = np.repeat(np.arange(loaded.data.simulate.scan_shape[0]), loaded.data.simulate.scan_shape[1])
    rng = np.random.default_rng(seed)
    true_px = (geometry.positions_px + rows[:, None] * np.asarray(DRIFT_A_PER_ROW) / dx
               + rng.normal(0, JITTER_A / dx, geometry.positions_px.shape))
    propagator = fresnel_propagator(data.detector_px, dx, data.wavelength_A, loaded.model.slice_thickness_A)
    patterns = _forward(torch.from_numpy(data.ground_truth["probe"]), torch.from_numpy(data.ground_truth["phase"]),
                        true_px, propagator)
    truth = dict(data.ground_truth, positions_A=geometry.to_A(true_px))
    return dataclasses.replace(data, patterns=patterns.float(), ground_truth=truth)


def rms_error_A(found_A, true_A):
    """RMS distance (Å) between two position sets after removing their mean difference."""
    error = np.asarray(found_A) - np.asarray(true_A)
    return float(np.sqrt(((error - error.mean(0)) ** 2).sum(1).mean()))


@pytest.mark.slow
def test_drift_and_jitter_are_recovered():
    """Nominal raster in the file, true probes drifted (up to 0.33 Å along x at the last row) and
    jittered by 0.1 Å per axis (0.14 Å rms): the affine and the positions refined together come
    within half the jitter of the truth (mean removed). Measured after 30 iterations: 0.174 Å
    before, 0.058 Å after (0.078 Å with the positions alone)."""
    config = {"data": {"simulate": {"scan_shape": [12, 12], "detector_px": 32, "dose": None, "seed": 2}},
              "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 50.0, "scan_step_A": 0.6,
                             "dx_A": 0.25},
              "optim": {"iterations": 30, "start": {"positions": 0, "scan_affine": 0}, "lr": {"positions": 0.03}},
              "runtime": {"progress": False, "threads": 2}}
    data = drifting_scan(config)
    rec = ptyacc.reconstruct(ptyacc.load_config(config), data=data, write=False)
    true_A = data.ground_truth["positions_A"]
    jitter_rms_A = JITTER_A * np.sqrt(2)
    before, after = rms_error_A(data.positions_A, true_A), rms_error_A(rec.results.positions_A, true_A)
    assert before > jitter_rms_A and after < 0.5 * jitter_rms_A, (before, after)
    offsets = rec.model.position_offsets.detach()
    torch.testing.assert_close(offsets.mean(0), torch.zeros(2), rtol=0, atol=1e-5)  # kept at zero mean


def test_the_rotation_alone_turns_the_positions_about_their_centre(tmp_path):
    """model.scan_affine: rotation: the positions are the nominal ones turned by the one refined angle
    about their mean (NumPy's rotation), plus the offsets; results.h5 keeps the angle and M = R - I."""
    config = ptyacc.load_config({"data": {"simulate": {"scan_shape": [4, 5], "detector_px": 16}},
                                 "experiment": {"dx_A": 0.3}, "model": {"scan_affine": "rotation"},
                                 "optim": {"iterations": 1, "start": {"scan_affine": 0}},
                                 "output": {"dir": str(tmp_path), "figures": False}, "runtime": {"progress": False}})
    rec = ptyacc.reconstruct(config)
    model = rec.model
    assert model.scan_affine is None  # one angle, not four terms
    turn = model.quantities["positions"].scan_turn_rad
    assert abs(float(turn.detach())) > 0  # stepped, not the start
    saved = ptyacc.load_results(tmp_path / "results.h5").quantities["fitted"]
    np.testing.assert_allclose(saved["scan_turn_deg"], np.degrees(float(turn.detach())), rtol=1e-6)
    a = float(turn.detach())
    np.testing.assert_allclose(saved["scan_affine"], [[np.cos(a) - 1, np.sin(a)], [-np.sin(a), np.cos(a) - 1]],
                               rtol=0, atol=1e-15)
    with torch.no_grad():
        turn.fill_(0.05)
        model.position_offsets.copy_(torch.randn(model.position_offsets.shape, generator=torch.Generator().manual_seed(1)))
    c, s = np.cos(0.05), np.sin(0.05)
    nominal = model.positions_px.double().numpy()
    centre = nominal.mean(0)
    y, x = (nominal - centre).T
    expected = centre + np.column_stack([c * y + s * x, -s * y + c * x])  # +x turned towards +y
    expected += model.position_offsets.detach().double().numpy()
    np.testing.assert_allclose(model.positions().detach().double().numpy(), expected, rtol=0, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("off_deg", [3.0, -2.0])
def test_a_scan_rotation_a_few_degrees_off_is_refined_back(off_deg):
    """The data's positions turned ``off_deg`` from the true ones (a measured scan rotation that is off):
    model.scan_affine: rotation refined from the first iteration turns them back to within 0.4 degrees,
    and the object comes out better than with the wrong angle kept."""
    config = {"data": {"simulate": {"scan_shape": [12, 12], "detector_px": 32, "dose": 1e5, "seed": 3}},
              "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 60.0, "scan_step_A": 0.6,
                             "dx_A": 0.25},
              "model": {"scan_affine": "rotation"},
              "optim": {"iterations": 50, "start": {"scan_affine": 0}},
              "runtime": {"progress": False, "threads": 2}}
    loaded = ptyacc.load_config(config)
    data = load_data(loaded)
    wrong = dataclasses.replace(data, positions_A=turned_positions_A(data.positions_A, off_deg))
    rec = ptyacc.reconstruct(loaded, data=wrong, write=False)
    turn_deg = np.degrees(float(rec.model.quantities["positions"].scan_turn_rad.detach()))
    assert abs(turn_deg + off_deg) < 0.4, turn_deg
    true_A = data.positions_A
    assert rms_error_A(rec.results.positions_A, true_A) < 0.2 * rms_error_A(wrong.positions_A, true_A)
