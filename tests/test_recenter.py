"""model.recenter: probe centring, the Fourier-space probe mask and the object's depth centring
leave the predicted patterns as they were (up to float rounding), and probe centring removes
the sub-pixel drift of a reconstruction whose probe started off-centre."""

from pathlib import Path

import numpy as np
import pytest
import torch
from crystal_data import best_shift_ncc, phase_ncc

import ptyacc
from ptyacc.data import load_data
from ptyacc.physics import fourier_shift, spatial_frequencies
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.reconstruction.initial import build_model
from ptyacc.reconstruction.recenter import ObjectDepthCentring, ProbeCentring, ProbeMask, probe_centre_offset_px
from ptyacc.results.h5file import Results, save_results

SIM = {"data": {"simulate": {"scan_shape": [8, 8], "detector_px": 32, "dose": 1e5, "seed": 2}},
       "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 50.0, "scan_step_A": 0.6, "dx_A": 0.25},
       "runtime": {"progress": False, "threads": 2}}


def built_model(slices=1, tilt_mrad=(0.0, 0.0), **model):
    config = ptyacc.load_config({**SIM, "model": {"slices": slices, **model},
                                 "experiment": {**SIM["experiment"], "tilt_mrad": list(tilt_mrad)}})
    data = load_data(config)
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px)
    model = build_model(config, data, geometry)
    with torch.no_grad():  # a structured object, different in every slice
        phase = torch.from_numpy(np.resize(data.ground_truth["phase"][0], model.object.shape[1:4])).float()
        phase = phase * torch.linspace(0.5, 1.5, slices)[:, None, None]
        model.object.copy_(torch.view_as_real(torch.polar(torch.ones_like(phase), phase))[None])
    return model, data


def predicted(model):
    with torch.no_grad():
        return model(torch.arange(len(model.positions_px))).double()


@pytest.mark.parametrize("slices", [1, 3])
def test_probe_centring_leaves_the_patterns_and_centres_the_probe(slices):
    """A probe moved 0.37 px down and 0.81 px left in its window: centring moves it back, moves the
    positions by the same amount, and predicts the same patterns to float rounding."""
    model, _ = built_model(slices, recenter={"probe": True})
    with torch.no_grad():
        moved = fourier_shift(model.complex_probe()[None], torch.tensor([[0.37, -0.81]]))[0]
        model.probe.copy_(torch.view_as_real(moved / model.probe_scale))
    before, positions = predicted(model), model.positions().detach().clone()
    offset = probe_centre_offset_px(model.complex_probe().detach())
    ProbeCentring(model)()
    after = predicted(model)
    torch.testing.assert_close(after, before, rtol=0, atol=1e-4 * float(before.max()))
    # the centre of mass is not exactly linear in a circular shift (the probe's tails wrap
    # around): each iteration's centring takes most of what is left
    assert probe_centre_offset_px(model.complex_probe().detach()).abs().max() < 0.1 * offset.abs().max()
    torch.testing.assert_close(model.positions().detach() - positions, offset.float().expand_as(positions),
                               rtol=0, atol=1e-4)
    torch.testing.assert_close(model.scan_shift_px, offset.float(), rtol=0, atol=1e-6)


def test_probe_mask_zeroes_the_spectrum_beyond_the_angle_only():
    model, data = built_model()
    with torch.no_grad():  # some probe intensity out at high angles
        model.probe.add_(0.01 * torch.randn(model.probe.shape, generator=torch.Generator().manual_seed(1)))
    spectrum = torch.fft.fft2(model.complex_probe().detach())
    ProbeMask(model, data.dx_A, data.wavelength_A, 30.0)()
    masked = torch.fft.fft2(model.complex_probe().detach())
    k = spatial_frequencies(data.detector_px, data.dx_A)
    angle_mrad = torch.sqrt(k[:, None] ** 2 + k[None, :] ** 2) * data.wavelength_A * 1e3
    outside = angle_mrad > 30.0
    assert outside.any() and float(masked[:, outside].abs().max()) < 1e-4 * float(spectrum.abs().max())
    torch.testing.assert_close(masked[:, ~outside], spectrum[:, ~outside], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("empty", ["top", "bottom"])
@pytest.mark.parametrize("tilt_mrad", [None, [3.0, -2.0]])
def test_depth_centring_moves_the_object_toward_the_middle_and_keeps_the_patterns(empty, tilt_mrad):
    """5 slices whose first (or last) two are flat: the object moves by a whole slice toward the
    middle (slice weights' centre within half a slice of it), the probe with it (through the
    tilted propagator when there is a tilt), and the predicted patterns stay the same."""
    model, data = built_model(5) if tilt_mrad is None else built_model(5, tilt_mrad=tilt_mrad)
    with torch.no_grad():
        flat = slice(0, 2) if empty == "top" else slice(3, 5)
        torch.view_as_complex(model.object)[:, flat] = 1
    before = predicted(model)
    ObjectDepthCentring(model, data.dx_A, data.wavelength_A, 2.0)()
    after = predicted(model)
    weight = torch.view_as_complex(model.object.detach())[0].angle().abs().sum((-2, -1)).double()
    centre = float((weight * torch.arange(5)).sum() / weight.sum())
    assert abs(centre - 2) <= 0.5, centre
    torch.testing.assert_close(after, before, rtol=0, atol=1e-4 * float(before.max()))


@pytest.mark.slow
def test_probe_centring_removes_the_drift_of_an_off_centre_start(tmp_path):
    """The probe starts 0.4 px down and 0.3 px left of the truth (model.init_from): the object
    follows it (the translation ambiguity), so the zero-shift NCC falls below the best-shift
    NCC; with probe centring the two agree. Measured after 30 iterations: zero-shift 0.9526 and
    best-shift 0.9777 without centring, 0.97776 and 0.97776 with it."""
    config = {**SIM, "data": {"simulate": {**SIM["data"]["simulate"], "scan_shape": [12, 12]}},
              "optim": {"iterations": 30}}
    data = load_data(ptyacc.load_config(config))
    start = tmp_path / "start.h5"
    write_shifted_start(start, data, (0.4, -0.3))
    scores = {}
    for centring in (False, True):
        run = {**config, "model": {"init_from": str(start), "recenter": {"probe": centring}}}
        rec = ptyacc.reconstruct(ptyacc.load_config(run), data=data, write=False)
        scores[centring] = phase_ncc(rec), best_shift_ncc(rec)
    assert scores[False][0] < scores[False][1] - 0.01, scores  # the drift is there without centring
    assert scores[True][0] > scores[True][1] - 0.002, scores


def write_shifted_start(path: Path, data, shift_px):
    """A results.h5 holding the true probe moved by ``shift_px`` and a flat object, for model.init_from."""
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px)
    probe = torch.from_numpy(data.ground_truth["probe"]).to(torch.complex64)[None]
    probe = fourier_shift(probe, torch.tensor([shift_px]))
    save_results(path, Results(object=np.ones((1, 1, *geometry.shape), np.complex64), probe=probe.numpy(),
                               positions_A=data.positions_A, loss=np.zeros(0), dx_A=data.dx_A,
                               origin_A=geometry.origin_A))


def test_placed_ncc_places_the_reconstruction_at_its_fractional_origin():
    """A band-limited truth, and the same image resampled 0.4 px and 0.3 px off with that origin:
    placed exactly, the NCC is 1 to rounding; rounded to whole pixels (scanned_region_ncc), less."""
    from ptyacc.results.quality import placed_ncc, scanned_region_ncc

    y, x = np.mgrid[0:40, 0:40] * (2 * np.pi / 40)
    truth = np.cos(3 * y + x) + np.sin(2 * x - y)
    offset_px = np.array([0.4, -0.3])
    # reconstruction pixel a lies at truth pixel a + offset: values truth(a + offset)
    moved = fourier_shift(torch.from_numpy(truth).to(torch.complex128)[None], torch.from_numpy(-offset_px)[None])
    image, dx_A = moved[0].real.numpy(), 0.5
    positions_A = np.array([[8.0, 8.0], [12.0, 12.0]])
    assert placed_ncc(image, offset_px * dx_A, dx_A, positions_A, truth) > 1 - 1e-9
    assert scanned_region_ncc(image, offset_px * dx_A, dx_A, positions_A, truth) < 0.995


def test_best_shift_ncc_finds_an_image_declared_off_its_place():
    """The same band-limited image declared 0.26 px down and 0.14 px left of where it lies: the
    zero-shift NCC is below 1; the coarse-to-fine search finds the shift (0.26, -0.14) to 0.02 px
    and an NCC of 1 to rounding; a flat 0.1 px grid gets within a step of it."""
    from ptyacc.results.quality import best_shift_ncc, placed_ncc

    y, x = np.mgrid[0:40, 0:40] * (2 * np.pi / 40)
    truth = np.cos(3 * y + x) + np.sin(2 * x - y)
    dx_A, positions_A, declared = 0.5, np.array([[8.0, 8.0], [12.0, 12.0]]), np.array([0.26, -0.14])
    zero = placed_ncc(truth, declared * dx_A, dx_A, positions_A, truth)
    fine, shift = best_shift_ncc(truth, declared * dx_A, dx_A, positions_A, truth,
                                 levels=((0.5, 4), (0.1, 4), (0.02, 4)))
    assert zero < 0.999 and fine > 1 - 1e-9 and np.abs(shift - declared).max() <= 0.0100001, (zero, fine, shift)
    flat, flat_shift = best_shift_ncc(truth, declared * dx_A, dx_A, positions_A, truth)
    assert zero < flat <= fine and np.abs(flat_shift - declared).max() <= 0.1, flat_shift


@pytest.mark.slow
def test_a_rolled_back_iteration_restores_the_moved_positions_too(tmp_path):
    """optim.on_nan: rollback with probe centring: the poisoned iteration's centring moved the
    positions by a NaN; the rollback restores them with the parameters, and the run ends finite."""
    from conftest import tiny_config
    from test_checkpoint import run_with_poison

    settings = tiny_config(tmp_path, optim={"iterations": 6, "on_nan": "rollback"}, model={"recenter": {"probe": True}})
    rec = run_with_poison(ptyacc.load_config(settings), 3)
    assert len(rec.loss) == 6 and np.isfinite(rec.loss).all()
    assert np.isfinite(rec.results.positions_A).all() and np.isfinite(rec.results.origin_A).all()


def test_holding_the_probe_returns_its_centre_to_where_it_started_and_keeps_the_patterns():
    """model.recenter.hold_probe: a defocused probe whose centre of mass is not the window centre
    (its tails wrap around), moved 0.37 px down and 0.81 px left: the hold brings the centre of
    mass back to the initial probe's (not to the window centre), moves the positions by the
    drift, and predicts the same patterns to float rounding."""
    model, _ = built_model(recenter={"hold_probe": True})
    start = probe_centre_offset_px(model.complex_probe().detach())
    with torch.no_grad():
        moved = fourier_shift(model.complex_probe()[None], torch.tensor([[0.37, -0.81]]))[0]
        model.probe.copy_(torch.view_as_real(moved / model.probe_scale))
    before, positions = predicted(model), model.positions().detach().clone()
    drift = probe_centre_offset_px(model.complex_probe().detach()) - start
    ProbeCentring(model, start)()
    torch.testing.assert_close(predicted(model), before, rtol=0, atol=1e-4 * float(before.max()))
    left = probe_centre_offset_px(model.complex_probe().detach()) - start
    assert left.abs().max() < 0.1 * drift.abs().max(), (left, drift)
    torch.testing.assert_close(model.positions().detach() - positions, drift.float().expand_as(positions),
                               rtol=0, atol=2e-3)


@pytest.mark.slow
@pytest.mark.parametrize("hold, modes", [(True, 1), (True, 2), (False, 1)])
def test_hold_probe_reaches_the_run(tmp_path, hold, modes):
    """With model.recenter.hold_probe (the default) the run ends with the centre of mass of the
    probe's first (strongest) mode where the initial probe had it, the scan moved by what the
    probe drifted; without it the probe drifts and the scan stays."""
    from conftest import tiny_config

    config = ptyacc.load_config(tiny_config(tmp_path, optim={"iterations": 4, "batch_size": 8},
                                            model={"recenter": {"hold_probe": hold}, "probe_modes": modes}))
    data = load_data(config)
    start = probe_centre_offset_px(build_model(config, data, ObjectGeometry.around(
        data.positions_A, data.dx_A, data.detector_px)).complex_probe().detach()[:1])
    rec = ptyacc.reconstruct(config, data=data)
    end = probe_centre_offset_px(rec.model.complex_probe().detach()[:1])
    moved = float(rec.model.scan_shift_px.abs().max()) if hold else 0.0
    log = (tmp_path / "out" / "run.log").read_text().splitlines()
    said = [line for line in log if "model.recenter.hold_probe: the probe" in line]
    if hold:
        assert (end - start).abs().max() < 0.02 and moved > 1e-3, (end, start, moved)
        assert len(said) == 1 and f"({float(start[0]):+.3f}, {float(start[1]):+.3f}) px" in said[0], said
    else:
        assert (end - start).abs().max() > 1e-3 and not rec.model.moving_buffers and not said, (end, start)


def test_a_moved_whole_pixel_scan_shifts_the_probe_once_with_the_per_position_answer():
    """A scan on the pixel grid (0.6 A steps of 0.3 A pixels) moved by a common sub-pixel amount
    (what the hold does): every position has the same sub-pixel rest, so the model shifts the
    probe once per step; its loss and gradients are those of shifting each position's probe
    (the per-position path, forced). A scan off the grid (2.4 px steps) takes the per-position path."""
    config = ptyacc.load_config({**SIM, "experiment": {**SIM["experiment"], "dx_A": 0.3}})
    data = load_data(config)
    model = build_model(config, data, ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px))
    model.move_scan(torch.tensor([0.23, -0.41]))
    assert model.uniform_shift and not built_model()[0].uniform_shift
    indices = torch.arange(len(model.positions_px))
    measured = predicted(model).float() * 1.1  # patterns the model does not fit exactly
    answers = []
    for once in (True, False):
        model.uniform_shift = once
        model.zero_grad(set_to_none=True)
        loss = model(indices, measured)
        loss.backward()
        answers.append((loss.detach(), model.probe.grad.clone(), model.object.grad.clone()))
    for fast, slow in zip(*answers):
        torch.testing.assert_close(fast, slow, rtol=2e-5, atol=2e-5 * float(slow.abs().max()))


def test_a_checkpoint_with_the_old_whole_shift_factors_loads_to_the_same_model():
    """Checkpoints written before the shift factors were made per step hold them whole
    ('fixed_ramps' (N, 2, K, 2), computed from each position's sub-pixel rest); such a state,
    moved scan included, loads into today's model with the same rests and the same patterns."""
    from ptyacc.physics.propagation import shift_ramps_1d

    old, new = built_model(recenter={"probe": True})[0], built_model(recenter={"probe": True})[0]
    old.move_scan(torch.tensor([0.23, -0.41]))
    state = old.state_dict()
    ramp_y, ramp_x = shift_ramps_1d(state.pop("fixed_fractions"), old.window)
    state["fixed_ramps"] = torch.view_as_real(torch.stack([ramp_y, ramp_x], 1))
    new.load_state_dict(state)
    assert torch.equal(new.fixed_fractions, old.fixed_fractions)
    assert not torch.equal(new.fixed_fractions, built_model(recenter={"probe": True})[0].fixed_fractions)
    torch.testing.assert_close(predicted(new), predicted(old), rtol=0, atol=0)


def test_recentring_joins_the_probe_group_as_constraints_run_after_its_projection():
    """``attach_recentring`` leaves the probe group's own projection as it is and adds the mask and
    the centring, in that order, to its constraints; ``end_iteration`` runs the projection first."""
    from ptyacc.optim.groups import ParameterGroup
    from ptyacc.reconstruction.recenter import attach_recentring

    config = ptyacc.load_config({**SIM, "model": {"recenter": {"probe": True, "probe_mask_mrad": 40.0}}})
    model, data = built_model(recenter={"probe": True, "probe_mask_mrad": 40.0})
    calls = []
    projection = lambda: calls.append("projection")  # noqa: E731
    probe = ParameterGroup("probe", [model.probe], 0.1, 0, after_iteration=projection)
    other = ParameterGroup("object", [model.object], 0.1, 0)
    assert attach_recentring([other, probe], config, model, data.dx_A, data.wavelength_A) == []
    assert probe.after_iteration is projection and other.constraints == []
    assert [type(step) for step in probe.constraints] == [ProbeMask, ProbeCentring]
    probe.constraints = [lambda: calls.append("mask"), lambda: calls.append("centring")]
    probe.end_iteration()
    other.end_iteration()  # no projection, no constraints: nothing
    assert calls == ["projection", "mask", "centring"]
