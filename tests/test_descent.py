"""The object's and the probe's preconditioned descent (``optim.object_optimizer`` and
``optim.probe_optimizer``: preconditioned, ptyacc/optim/descent.py): the illumination
against a loop written out in NumPy, the step against the formula, the meaning of a step of 1
(the least-squares step: one position's exit wave takes the measured amplitudes; for the Poisson
loss, Newton's step), and what ``auto`` chooses. 1 and 2 processes, and the split object,
run it through the existing fixtures (tests/test_distributed.py, tests/test_tiles.py), whose configs
have one slice and so take it by default."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ptyacc
from ptyacc.errors import ConfigError
from ptyacc.optim.autos import (
    auto_notes,
    auto_values,
    least_squares,
    optimizer_notes,
    resolved_optimizer,
)
from ptyacc.optim.descent import PreconditionedDescent, ProbeDescent, illumination, preconditioner, window_sum
from ptyacc.optim.row_adam import StepContext
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.quantities.model import PtychoModel
from ptyacc.quantities.object import ObjectTransmission
from ptyacc.quantities.probe import Probe
from ptyacc.reconstruction.groups import build_groups

K = 16


def _probe(modes: int = 1, seed: int = 0) -> torch.Tensor:
    """A smooth probe without zeros in its window: a Gaussian with a random phase per mode."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:K, :K] - K / 2
    envelope = np.exp(-(y ** 2 + x ** 2) / (2 * 4.0 ** 2)) + 0.05
    phase = rng.uniform(-1, 1, (modes, 1, 1)) * (y + x) / K + rng.uniform(0, 1, (modes, K, K)) * 0.3
    power = np.array([1.0, 0.3, 0.1][:modes])[:, None, None]
    return torch.as_tensor(np.sqrt(power) * envelope * np.exp(1j * phase), dtype=torch.complex64)


def _model(positions_px: np.ndarray, shape: tuple[int, int], modes: int = 1, slices: int = 1) -> PtychoModel:
    geometry = ObjectGeometry(1.0, (0.0, 0.0), shape, positions_px)
    propagator = torch.ones(K, K, dtype=torch.complex64) if slices > 1 else None
    return PtychoModel(ObjectTransmission(shape, slices=slices), Probe(_probe(modes)), geometry, propagator=propagator)


def _group(config, model: PtychoModel, name: str):
    """The group named ``name`` of ``model``'s groups under ``config``."""
    return next(group for group in build_groups(config, model, torch.device("cpu")) if group.name == name)


def test_the_illumination_is_the_probe_intensity_summed_at_every_window_over_the_positions():
    rng = np.random.default_rng(1)
    shape = (40, 33)
    # integer centres, two at the object's corners (windows touching its edges), one repeated
    centres = np.concatenate([rng.integers(K // 2, [shape[0] - K // 2, shape[1] - K // 2], (9, 2)),
                              [[K // 2, K // 2], [shape[0] - K // 2, shape[1] - K // 2], [K // 2, K // 2]]])
    model = _model(centres.astype(float), shape, modes=3)
    probe = model.complex_probe().detach().numpy()
    expected = np.zeros(shape)
    for cy, cx in centres - K // 2:
        expected[cy:cy + K, cx:cx + K] += (np.abs(probe) ** 2).sum(0)
    expected /= len(centres)
    got = illumination(model).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6 * expected.max())
    # the factor: half over (slices x (illumination + floor x max)), on the held region
    factor = preconditioner(model, 0.25).numpy()
    np.testing.assert_allclose(factor, 0.5 / (expected + 0.25 * expected.max()), rtol=1e-5)


def test_a_step_is_the_gradient_times_the_factor_times_the_step_size():
    centres = np.array([[12.0, 12.0], [14.0, 17.0], [20.0, 15.0]])
    model = _model(centres, (32, 32), slices=3)
    grad = torch.randn_like(model.object)
    model.object.grad = grad.clone()
    before = model.object.detach().clone()
    optimizer = PreconditionedDescent([model.object], model, lr=0.3, floor=0.1)
    optimizer.step()
    light = illumination(model)
    # three slices: each takes a third of the step
    factor = 0.5 / (3 * (light + 0.1 * light.max()))
    torch.testing.assert_close(model.object.detach(), before - 0.3 * grad * factor[:, :, None], rtol=1e-6, atol=1e-7)


CENTRE = np.array([[K / 2 + 4.0, K / 2 + 4.0]])


def _phase_object(model: PtychoModel, spread: float, seed: int = 3) -> None:
    rng = np.random.default_rng(seed)
    phase = torch.as_tensor(rng.uniform(-spread, spread, model.object.shape[:-1]), dtype=torch.float32)
    model.object.data = torch.view_as_real(torch.polar(torch.ones_like(phase), phase)).contiguous()


def _one_step(model: PtychoModel, measured: torch.Tensor, loss: str, which: str, step: float, share: float) -> float:
    """The loss of one position after one preconditioned step of the object or the probe, over before."""
    indices = torch.tensor([0])
    before = model(indices, measured, loss)
    before.backward()
    if which == "object":
        PreconditionedDescent([model.object], model, lr=step, floor=1e-7, share=share).step()
    else:
        ProbeDescent([model.probe], step, float(model.probe_scale), 1.0, share).step()
    with torch.no_grad():
        return float(model(indices, measured, loss) / before)


@pytest.mark.parametrize("which", ["object", "probe"])
def test_a_step_of_one_gives_one_exit_wave_the_measured_amplitudes(which):
    """ePIE's full step: with one position (and for the object a floor near 0; for the probe an
    object of amplitude 1), the new exit wave is the old one with its Fourier amplitudes replaced by
    the measured ones, so its loss vanishes; a step of 0.5 halves the exit wave's error, so the
    amplitude loss falls to about a quarter."""
    truth = _model(CENTRE, (K + 8, K + 8))
    _phase_object(truth, 0.6)
    with torch.no_grad():
        measured = truth(torch.tensor([0]))
    losses = {}
    for step in (1.0, 0.5):
        model = _model(CENTRE, (K + 8, K + 8))
        if which == "probe":  # the object known, the probe's phase wrong
            model.object.data = truth.object.data.clone()
            model.probe.data = torch.view_as_real(torch.polar(torch.view_as_complex(model.probe.data).abs(),
                                                              torch.zeros(1, K, K))).contiguous()
        losses[step] = _one_step(model, measured, "amplitude", which, step, least_squares("amplitude").share)
    assert losses[1.0] < 1e-4
    assert 0.2 < losses[0.5] < 0.3


def test_for_the_poisson_loss_a_step_of_one_is_newtons_near_the_counts():
    """Near the solution the Poisson loss curves twice as much in the exit wave's amplitude as the
    amplitude loss: with a quarter of the gradient (its share) a step of 1 removes nearly all of a
    small error (Newton's step); with the amplitude loss's half it overshoots to about as large an
    error of the other sign."""
    assert least_squares("amplitude").share == 0.5 and least_squares("poisson").share == 0.25
    truth = _model(CENTRE, (K + 8, K + 8))
    _phase_object(truth, 0.6)
    with torch.no_grad():
        measured = truth(torch.tensor([0])) * 1e4  # counts: the probe carries the scale
    truth.probe.data *= 100.0
    excess = {}
    for share in (0.25, 0.5):
        model = _model(CENTRE, (K + 8, K + 8))
        model.probe.data = truth.probe.data.clone()
        _phase_object(model, 0.6, seed=4)
        model.object.data = truth.object.data + 0.01 * (model.object.data - truth.object.data)
        with torch.no_grad():
            floor = float(model(torch.tensor([0]), measured, "poisson") - truth(torch.tensor([0]), measured, "poisson"))
        _one_step(model, measured, "poisson", "object", 1.0, share)
        with torch.no_grad():
            excess[share] = float(model(torch.tensor([0]), measured, "poisson")
                                  - truth(torch.tensor([0]), measured, "poisson")) / floor
    assert excess[0.25] < 0.05, excess
    assert excess[0.5] > 0.5, excess


def test_auto_is_preconditioned_on_any_slice_count_adam_where_its_step_is_given_and_the_run_says_so():
    one = ptyacc.load_config({}, ["data.path=x.h5"])
    several = ptyacc.load_config({}, ["data.path=x.h5", "model.slices=3"])
    assert resolved_optimizer(one) == resolved_optimizer(several) == "preconditioned"
    assert auto_values(one)["optim.object_optimizer"] == auto_values(several)["optim.object_optimizer"] == "preconditioned"
    assert optimizer_notes(one) == ["optim.object_optimizer: preconditioned (auto)",
                                    "optim.probe_optimizer: preconditioned (auto)",
                                    "optim.preconditioned_step: 0.4 (auto: the amplitude loss)",
                                    "optim.preconditioner_batch_floor: off (auto: 1 slice)"]
    assert optimizer_notes(several) == ["optim.object_optimizer: preconditioned (auto)",
                                        "optim.probe_optimizer: preconditioned (auto)",
                                        "optim.preconditioned_step: 0.4 (auto: the amplitude loss)",
                                        "optim.preconditioner_batch_floor: 0.25 (auto: 3 slices)"]
    stepped = ptyacc.load_config({}, ["data.path=x.h5", "model.slices=3", "optim.lr.object=0.02"])
    assert optimizer_notes(stepped)[0] == "optim.object_optimizer: adam (auto: optim.lr.object given)"
    tilted = ptyacc.load_config({}, ["data.path=x.h5", "model.slices=3", "optim.start.tilt=0"])  # Adam finds the tilt
    assert resolved_optimizer(tilted) == resolved_optimizer(tilted, "probe") == "adam"
    assert optimizer_notes(tilted) == ["optim.object_optimizer: adam (auto: optim.start.tilt set)",
                                       "optim.probe_optimizer: adam (auto: optim.start.tilt set)"]
    assert auto_notes(one) == []  # the terminal is told nothing; run.log is (below)
    chosen = ptyacc.load_config({}, ["data.path=x.h5", "optim.object_optimizer=adam", "optim.probe_optimizer=adam"])
    assert resolved_optimizer(chosen) == "adam" and "optim.object_optimizer" not in auto_values(chosen)
    assert resolved_optimizer(chosen, "probe") == "adam" and "optim.probe_optimizer" not in auto_values(chosen)
    assert optimizer_notes(chosen) == []


@pytest.mark.parametrize("slices, chosen, kind", [(1, "auto", PreconditionedDescent), (3, "auto", PreconditionedDescent),
                                                  (3, "adam", torch.optim.Adam),
                                                  (1, "adam", torch.optim.Adam)])
def test_the_object_group_gets_the_chosen_optimizer_and_step(slices, chosen, kind):
    config = ptyacc.load_config({}, ["data.path=x.h5", f"model.slices={slices}", f"optim.object_optimizer={chosen}",
                                     "optim.preconditioned_step=0.3"])
    model = _model(np.array([[12.0, 12.0]]), (32, 32), slices=slices)
    group, probe = _group(config, model, "object"), _group(config, model, "probe")
    assert group.name == "object" and type(group.optimizer) is kind
    assert group.lr == (0.3 if kind is PreconditionedDescent else config.optim.lr.object)
    # the probe's auto: preconditioned on any slice count, with either loss
    assert probe.name == "probe" and type(probe.optimizer) is ProbeDescent
    assert probe.lr == 1.0


@pytest.mark.parametrize("key, value", [("optim.preconditioned_step", "0"), ("optim.preconditioner_floor", "-1"),
                                        ("optim.preconditioner_batch_floor", "-0.1"), ("optim.preconditioned_step", "big"),
                                        ("optim.preconditioner_batch_floor", "big"),
                                        ("optim.object_optimizer", "sgd"), ("optim.preconditioned_probe_step", "-1"),
                                        ("optim.probe_optimizer", "lsqml")])
def test_bad_values_are_refused(key, value):
    with pytest.raises(ConfigError, match=key.split(".")[-1]):
        ptyacc.load_config({}, ["data.path=x.h5", f"{key}={value}"])


def test_the_preconditioner_is_made_again_after_every_iteration_from_the_probe_of_then():
    config = ptyacc.load_config({}, ["data.path=x.h5"])
    model = _model(np.array([[12.0, 12.0], [16.0, 14.0]]), (32, 32))
    group = _group(config, model, "object")
    model.object.grad = torch.ones_like(model.object)
    group.step(0)
    first = group.optimizer.factor.clone()
    model.probe.data.mul_(2.0)  # four times the intensity
    model.object.grad = torch.ones_like(model.object)
    group.step(0)
    assert torch.equal(group.optimizer.factor, first)  # within the iteration: unchanged
    group.end_iteration()
    model.object.grad = torch.ones_like(model.object)
    group.step(1)
    torch.testing.assert_close(group.optimizer.factor, first / 4)


def test_the_illumination_has_the_same_bits_whatever_the_fft_does():
    """Every process must take the same step: the illumination is an exact sum of integer levels
    of the intensity, so it equals that sum made in NumPy bit for bit, with 1 or 2 threads."""
    from ptyacc.optim.descent import QUANTUM

    rng = np.random.default_rng(5)
    shape = (61, 58)
    centres = rng.integers(K // 2, [shape[0] - K // 2, shape[1] - K // 2], (40, 2)).astype(float)
    model = _model(centres, shape, modes=2)
    probe = model.complex_probe().detach().numpy()  # complex64; its intensity in float32 as the model's
    intensity = (probe.real ** 2 + probe.imag ** 2).sum(0, dtype=np.float32).astype(np.float64)
    peak = intensity.max()
    levels = np.round(intensity * (QUANTUM / peak))
    summed = np.zeros(shape)
    for cy, cx in centres.astype(int) - K // 2:
        summed[cy:cy + K, cx:cx + K] += levels
    expected = torch.as_tensor((summed * (peak / (QUANTUM * len(centres)))).astype(np.float32))
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            assert torch.equal(illumination(model), expected)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("group, kind", [("object", PreconditionedDescent), ("probe", ProbeDescent)])
def test_adams_step_given_chooses_adam_and_zero_freezes_with_either(group, kind):
    """optim.lr.object and optim.lr.probe are Adam's steps: a config that sets one (from before the
    preconditioned descent, or a tuned step) runs Adam for that quantity under auto (the other
    keeps its own choice), names a contradiction when preconditioned is asked for, and 0 freezes
    the quantity whichever optimizer runs."""
    other = "probe" if group == "object" else "object"
    given = ptyacc.load_config({}, ["data.path=x.h5", f"optim.lr.{group}=0.02"])
    assert resolved_optimizer(given, group) == "adam" and auto_values(given)[f"optim.{group}_optimizer"] == "adam"
    assert resolved_optimizer(given, other) == "preconditioned"
    with pytest.raises(ConfigError, match=f"optim.lr.{group}: is Adam's step"):
        ptyacc.load_config({}, ["data.path=x.h5", f"optim.lr.{group}=0.02", f"optim.{group}_optimizer=preconditioned"])
    model = _model(np.array([[12.0, 12.0], [16.0, 14.0]]), (32, 32))
    for chosen in ("auto", "preconditioned"):
        frozen = ptyacc.load_config({}, ["data.path=x.h5", f"optim.lr.{group}=0", f"optim.{group}_optimizer={chosen}"])
        stepped = _group(frozen, model, group)
        assert type(stepped.optimizer) is kind and stepped.lr == 0.0
        tensor = stepped.params[0]
        before = tensor.detach().clone()
        tensor.grad = torch.ones_like(tensor)
        stepped.step(3)
        assert torch.equal(tensor.detach(), before)


def test_the_probes_step_is_its_share_over_the_probe_scale_and_the_objects_largest_intensity():
    model = _model(np.array([[12.0, 12.0], [16.0, 14.0]]), (32, 32))
    before = model.probe.detach().clone()
    # the step: lr x share / (probe_scale^2 x the largest object intensity) x the gradient
    poisson = ptyacc.load_config({}, ["data.path=x.h5", "optim.loss=poisson", "model.object_amplitude_bounds=[0,0.5]"])
    probe = _group(poisson, model, "probe")
    model.probe.grad = torch.ones_like(model.probe)
    probe.optimizer.step()
    expected = before - 1.0 * 0.25 / (float(model.probe_scale) ** 2 * 0.25)
    torch.testing.assert_close(model.probe.detach(), expected)


def test_a_batchs_illumination_is_its_positions_summed_and_all_positions_give_the_scans_bits():
    rng = np.random.default_rng(7)
    shape = (45, 38)
    centres = rng.integers(K // 2, [shape[0] - K // 2, shape[1] - K // 2], (20, 2))
    model = _model(centres.astype(float), shape, modes=2)
    intensity = (np.abs(model.complex_probe().detach().numpy()) ** 2).sum(0)
    batch = torch.tensor([3, 17, 0, 3, 12])  # one position twice, as a batch never has, to see it counted twice
    expected = np.zeros(shape)
    for cy, cx in centres[batch.numpy()] - K // 2:
        expected[cy:cy + K, cx:cx + K] += intensity
    expected /= len(batch)
    np.testing.assert_allclose(illumination(model, batch).numpy(), expected, rtol=1e-5, atol=1e-6 * expected.max())
    # every position as one batch: the same bits as the FFT convolution over the scan
    assert torch.equal(illumination(model, torch.randperm(20)), illumination(model))
    # the sum by slice additions (the CPU's) and by one index_add_ (a GPU's): the same integers
    levels = torch.round(torch.as_tensor(intensity / intensity.max() * 2.0 ** 20, dtype=torch.float64))
    corners = torch.as_tensor(centres - K // 2)[batch]
    assert torch.equal(window_sum(levels, corners, shape, loop=True), window_sum(levels, corners, shape, loop=False))


def test_a_step_divides_by_the_scans_illumination_raised_to_the_batch_floor_times_the_batchs():
    centres = np.array([[12.0, 12.0], [14.0, 17.0], [20.0, 15.0], [13.0, 21.0]])
    batch = torch.tensor([1, 2])
    for batch_floor in (0.0, 0.25, 4.0):
        model = _model(centres, (34, 34))
        grad = torch.randn_like(model.object)
        model.object.grad = grad.clone()
        before = model.object.detach().clone()
        optimizer = PreconditionedDescent([model.object], model, lr=0.3, floor=0.1, batch_floor=batch_floor)
        optimizer.context = StepContext(0, batch)
        optimizer.step()
        light = torch.maximum(illumination(model), batch_floor * illumination(model, batch))
        factor = 0.5 / (light + 0.1 * light.max())
        torch.testing.assert_close(model.object.detach(), before - 0.3 * grad * factor[:, :, None], rtol=1e-6,
                                   atol=1e-7)
        if batch_floor == 4.0:  # the batch's share binds somewhere, and there the step is smaller
            assert bool((4.0 * illumination(model, batch) > illumination(model)).any())


def test_the_batch_floor_keeps_a_large_step_stable_on_a_dense_scan(tmp_path):
    """On a dense scan (a quarter-Å raster, half a pixel) the illumination of all positions is far
    below what a step's batch puts on its pixels: a step of 3 without the floor throws the loss up
    (by 6.3e3 in the first iterations; before the object was held to its amplitude bound after every
    step it went to NaN) and ends above the run with a floor of 3 (no step beyond its batch's
    least-squares step), whose loss falls at every iteration."""
    from tests.conftest import tiny_config

    losses = {}
    for batch_floor in (0.0, 3.0):
        config = tiny_config(tmp_path, data={"simulate": {"scan_shape": [12, 12], "detector_px": 16, "atoms": 6,
                                                          "dose": 1e4}},
                             optim={"iterations": 10, "loss": "poisson", "preconditioned_step": 3.0,
                                    "preconditioner_batch_floor": batch_floor})
        config["experiment"]["scan_step_A"] = 0.15
        try:
            losses[batch_floor] = ptyacc.reconstruct(ptyacc.load_config(config), write=False).loss
        except ptyacc.errors.PtyaccError as error:
            losses[batch_floor] = str(error)
    assert max(losses[0.0]) > losses[0.0][0] + 1000
    assert np.all(np.diff(losses[3.0]) <= 0) and losses[3.0][-1] < losses[0.0][-1]


def test_the_step_under_auto_is_0_4_for_the_amplitude_loss_and_0_8_for_poisson():
    from ptyacc.optim.autos import resolved_step

    amplitude = ptyacc.load_config({}, ["data.path=x.h5"])
    poisson = ptyacc.load_config({}, ["data.path=x.h5", "optim.loss=poisson"])
    given = ptyacc.load_config({}, ["data.path=x.h5", "optim.loss=poisson", "optim.preconditioned_step=0.3"])
    assert (resolved_step(amplitude), resolved_step(poisson), resolved_step(given)) == (0.4, 0.8, 0.3)
    assert auto_values(amplitude)["optim.preconditioned_step"] == 0.4
    assert auto_values(poisson)["optim.preconditioned_step"] == 0.8
    assert "optim.preconditioned_step" not in auto_values(given)
    adam = ptyacc.load_config({}, ["data.path=x.h5", "model.slices=2", "optim.lr.object=0.02"])  # Adam: no step
    assert "optim.preconditioned_step" not in auto_values(adam)
    model = _model(np.array([[12.0, 12.0]]), (32, 32))
    assert _group(poisson, model, "object").lr == 0.8


def test_the_batch_floor_under_auto_is_a_quarter_on_several_slices_a_half_in_the_near_field_else_off():
    from ptyacc.optim.autos import resolved_batch_floor

    base = ["data.path=x.h5", "optim.loss=poisson"]
    one = ptyacc.load_config({}, base)
    several = ptyacc.load_config({}, [*base, "model.slices=3"])
    given = ptyacc.load_config({}, [*base, "model.slices=3", "optim.preconditioner_batch_floor=0.5"])
    assert (resolved_batch_floor(one), resolved_batch_floor(several), resolved_batch_floor(given)) == (0.0, 0.25, 0.5)
    assert auto_values(one)["optim.preconditioner_batch_floor"] == 0.0
    assert auto_values(several)["optim.preconditioner_batch_floor"] == 0.25
    assert "optim.preconditioner_batch_floor" not in auto_values(given)
    adam = ptyacc.load_config({}, ["data.path=x.h5", "model.slices=3", "optim.object_optimizer=adam"])  # no floor
    assert "optim.preconditioner_batch_floor" not in auto_values(adam)
    near = ptyacc.load_config({}, [*base, "experiment.radiation=xray", "experiment.geometry=near_field",
                                   "experiment.focus_to_sample_m=0.004"])
    assert resolved_batch_floor(near) == 0.5 and auto_values(near)["optim.preconditioner_batch_floor"] == 0.5
    assert optimizer_notes(near)[-1] == "optim.preconditioner_batch_floor: 0.5 (auto: the near field)"
    for config, floor in ((one, 0.0), (several, 0.25), (given, 0.5)):
        model = _model(np.array([[12.0, 12.0]]), (32, 32), slices=config.model.slices)
        assert _group(config, model, "object").optimizer.batch_floor == floor


def test_adams_beta2_is_resolved_with_the_other_autos():
    """``optim.adam_beta2: auto`` is resolved with the other auto keys before the model is built (``AutoPriors``),
    and results.h5's auto_values name it: 0.95 on one slice, 0.999 on several; a number given is kept."""
    from ptyacc.optim.autos import AutoPriors

    one = ptyacc.load_config({}, ["data.path=x.h5"])
    several = ptyacc.load_config({}, ["data.path=x.h5", "model.slices=3"])
    given = ptyacc.load_config({}, ["data.path=x.h5", "optim.adam_beta2=0.9"])
    assert (AutoPriors.of(one).beta2, AutoPriors.of(several).beta2, AutoPriors.of(given).beta2) == (0.95, 0.999, 0.9)
    assert auto_values(one)["optim.adam_beta2"] == 0.95 and auto_values(several)["optim.adam_beta2"] == 0.999
    assert "optim.adam_beta2" not in auto_values(given)


def test_the_objects_depth_blur_is_the_priors():
    """``optim.regularize.depth_blur_slices`` reaches the object's group through ``AutoPriors`` alone: as given, 0
    (off) for an auto no data resolved, and whatever the priors carry (the data's choice, ``data_autos``)."""
    import dataclasses

    from ptyacc.optim.autos import AutoPriors

    unresolved = ptyacc.load_config({}, ["data.path=x.h5", "model.slices=3"])
    given = ptyacc.load_config({}, ["data.path=x.h5", "model.slices=3", "optim.regularize.depth_blur_slices=1.5"])
    assert unresolved.optim.regularize.depth_blur_slices == "auto"
    assert (AutoPriors.of(unresolved).depth_blur_slices, AutoPriors.of(given).depth_blur_slices) == (0.0, 1.5)
    model = _model(np.array([[12.0, 12.0]]), (32, 32), slices=3)

    def sigma(config, priors=None):
        group = next(g for g in build_groups(config, model, torch.device("cpu"), priors) if g.name == "object")
        return group.after_iteration.args[4].sigma, group.exact_projection  # project_object's depth blur now

    assert sigma(unresolved)[0] == 0.0 and sigma(given) == (1.5, False)
    resolved = dataclasses.replace(AutoPriors.of(unresolved), depth_blur_slices=2.0, depth_blur_start_slices=2.0)
    assert sigma(unresolved, resolved) == (2.0, False)
    # two stages: the start's blur first, and a projection that is not exact even where the later blur is 0
    assert sigma(unresolved, dataclasses.replace(resolved, depth_blur_slices=0.0, depth_blur_start_slices=3.0)) == (3.0, False)
