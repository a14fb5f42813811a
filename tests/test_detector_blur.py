"""The detector's point spread (``model.detector_blur_px``): the blur against a direct NumPy
convolution, the fused loss's gradients (waves, object, probe, shifts, the blur's variance)
against autograd and central differences, and the model and config around it."""

import math

import numpy as np
import pytest
import torch

from ptyacc.physics import Detector, exit_waves, extract_patches, far_field_loss, ptycho_loss, shift_ramp
from ptyacc.physics.detector_blur import DetectorBlur, blur_transfer
from tests.test_fused import problem, random_complex


def discrete_gaussian(variance, reach):
    """exp(-v) I_n(v) for n = -reach .. reach, I_n by its power series (NumPy only)."""
    def bessel_i(n, x):
        return sum((x / 2) ** (2 * m + n) / (math.factorial(m) * math.factorial(m + n)) for m in range(60))
    return np.array([math.exp(-variance) * bessel_i(abs(n), variance) for n in range(-reach, reach + 1)])


def direct_blur(images, variance, reach=16):
    """(B, K, K) images convolved periodically, pixel by pixel, with the separable kernel."""
    taps = discrete_gaussian(variance, reach)
    out = np.zeros_like(images)
    for dy in range(-reach, reach + 1):
        for dx in range(-reach, reach + 1):
            out += taps[dy + reach] * taps[dx + reach] * np.roll(images, (dy, dx), axis=(-2, -1))
    return out


@pytest.mark.parametrize("sigma", [0.3, 0.6, 1.2])
def test_blur_is_the_direct_convolution_with_the_discrete_gaussian(sigma):
    rng = np.random.default_rng(1)
    images = rng.random((3, 12, 12)) ** 4  # a few bright pixels on a dark ground
    got = DetectorBlur(torch.tensor(sigma ** 2, dtype=torch.float64))(torch.from_numpy(images)).numpy()
    np.testing.assert_allclose(got, direct_blur(images, sigma ** 2), atol=1e-12)
    taps = discrete_gaussian(sigma ** 2, 16)
    offsets = np.arange(-16, 17)
    assert taps.min() > 0 and taps.sum() == pytest.approx(1.0)
    assert (taps * offsets ** 2).sum() == pytest.approx(sigma ** 2)  # its variance is v
    assert got.min() >= -1e-15 and got.sum() == pytest.approx(images.sum())  # positive, counts kept


def test_blur_is_self_adjoint_and_near_the_continuous_gaussian_at_low_frequencies():
    g = torch.Generator().manual_seed(3)
    x, y = torch.rand(2, 4, 10, 10, generator=g, dtype=torch.float64)
    blur = DetectorBlur(torch.tensor(0.5, dtype=torch.float64))
    assert float((blur.convolve(x) * y).sum()) == pytest.approx(float((x * blur.convolve(y)).sum()), rel=1e-13)
    transfer = blur_transfer(64, torch.tensor(0.36, dtype=torch.float64))
    f = torch.fft.fftfreq(64, dtype=torch.float64)
    continuous = torch.exp(-2 * math.pi ** 2 * 0.36 * (f[:, None] ** 2 + f[None, :33] ** 2))
    low = slice(0, 4)
    torch.testing.assert_close(transfer[low, low], continuous[low, low], rtol=2e-3, atol=0)


def blurred_reference(probe, obj, top_left, fraction, propagator, measured, kind, detector, weights, background):
    """The loss through the separately tested chain and the blur, differentiated by autograd."""
    k = probe.shape[-1]
    ramps = shift_ramp(fraction, k)
    probes = torch.fft.ifft2(torch.fft.fft2(probe)[None] * ramps[:, None])
    waves = exit_waves(probes, extract_patches(obj, top_left, k), propagator)
    return far_field_loss(waves, measured, kind, detector, weights, background, ramps)


@pytest.mark.parametrize("kind", ["amplitude", "poisson"])
@pytest.mark.parametrize("near_field", [False, True])
@pytest.mark.parametrize("variance", [0.0, 0.4])
def test_fused_blur_matches_autograd(kind, near_field, variance):
    """With the blur, a mask, weights and a background, far and near field: the value and every
    gradient (probe, object, shifts, weights, background, the blur's variance) equal autograd's,
    for any chunking; at variance 0 the variance's gradient is not zero (a blur can start from none)."""
    probe, obj, top_left, fraction, propagator, measured = problem(2, 2, 1, True, seed=5, batch=5)
    g = torch.Generator().manual_seed(6)
    near = torch.exp(2j * torch.pi * torch.rand(6, 6, generator=g, dtype=torch.float64)) if near_field else None
    mask = (torch.rand(6, 6, generator=g) > 0.2).double()
    weights = (1 + 0.1 * torch.rand(5, generator=g, dtype=torch.float64)).requires_grad_()
    background = (0.1 * torch.rand(6, 6, generator=g, dtype=torch.float64)).requires_grad_()
    blur = torch.tensor(variance, dtype=torch.float64, requires_grad=True)
    detector = Detector(propagator=near, mask=mask, blur_variance_px2=blur)
    inputs = (probe, obj, fraction, weights, background, blur)
    reference = blurred_reference(probe, obj, top_left, fraction, propagator, measured, kind, detector, weights,
                                  background)
    reference_grads = torch.autograd.grad(reference, inputs)
    assert abs(float(reference_grads[-1])) > 1e-3
    for chunk in (1, 2, 64):
        ramps = shift_ramp(fraction, 6)
        fused = ptycho_loss(probe, obj, top_left, ramps, propagator, measured, kind, chunk, detector, weights,
                            background)
        assert float(fused.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
        for mine, theirs in zip(torch.autograd.grad(fused, inputs), reference_grads, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)


def test_fused_blur_gradient_matches_finite_differences():
    """Directional derivative along the probe, the object and the blur's variance, central differences."""
    probe, obj, top_left, _, propagator, measured = problem(1, 2, 1, False, seed=8)
    mask = (torch.rand(6, 6, generator=torch.Generator().manual_seed(2)) > 0.2).double()

    def loss(p, o, variance):
        return ptycho_loss(p, o, top_left, None, propagator, measured, "amplitude",
                           detector=Detector(mask=mask, blur_variance_px2=variance))

    variance = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    grads = torch.autograd.grad(loss(probe, obj, variance), (probe, obj, variance))
    directions = (random_complex(*probe.shape, seed=11), random_complex(*obj.shape, seed=12),
                  torch.tensor(0.7, dtype=torch.float64))
    h = 1e-6
    with torch.no_grad():
        points = (probe, obj, variance)
        plus = loss(*(x + h * d for x, d in zip(points, directions, strict=True)))
        minus = loss(*(x - h * d for x, d in zip(points, directions, strict=True)))
    numeric = float(plus - minus) / (2 * h)
    analytic = sum(float((g.conj() * d).real.sum()) for g, d in zip(grads, directions, strict=True))
    assert analytic == pytest.approx(numeric, rel=1e-6)
    only_blur = float(grads[2]) * 0.7
    with torch.no_grad():
        numeric_blur = float(loss(probe, obj, variance + h * 0.7) - loss(probe, obj, variance - h * 0.7)) / (2 * h)
    assert only_blur == pytest.approx(numeric_blur, rel=1e-6)


def test_float32_round_off_below_zero_is_clamped_and_the_loss_stays_finite():
    """A bright disk on a dark ground in float32: the FFT convolution leaves dark pixels below 0
    by more than the amplitude loss's floor (its square root would be NaN); the blur clamps them."""
    y, x = torch.meshgrid(torch.arange(48.0), torch.arange(48.0), indexing="ij")
    disk = torch.fft.ifftshift(100.0 * (((y - 24) ** 2 + (x - 24) ** 2) < 100).float())[None]
    blur = DetectorBlur(torch.tensor(0.36))
    assert float(blur.convolve(disk).min()) < -1e-8
    assert float(blur(disk).min()) == 0.0
    wave = torch.fft.ifft2(torch.sqrt(disk).to(torch.complex64), norm="ortho")[:, None]
    variance = torch.tensor(0.0, requires_grad=True)
    loss = far_field_loss(wave, disk, "amplitude", Detector(blur_variance_px2=variance))
    assert torch.isfinite(loss) and torch.isfinite(torch.autograd.grad(loss, variance)[0])


@pytest.mark.parametrize("k", [6, 7])
def test_blur_vjp_matches_autograd_for_even_and_odd_sizes(k):
    """The hand-written vjp (the variance's gradient summed over the half spectrum) against autograd."""
    g = torch.Generator().manual_seed(k)
    intensity = torch.rand(3, k, k, generator=g, dtype=torch.float64).requires_grad_()
    grad = torch.randn(3, k, k, generator=g, dtype=torch.float64)
    variance = torch.tensor(0.45, dtype=torch.float64, requires_grad=True)
    blur = DetectorBlur(variance.detach())
    blurred, spectrum = blur.forward_with_spectrum(intensity.detach())
    mine = blur.vjp(grad, blurred, spectrum)
    theirs = torch.autograd.grad(DetectorBlur(variance)(intensity), (intensity, variance), grad)
    torch.testing.assert_close(mine[0], theirs[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mine[1], theirs[1], rtol=1e-12, atol=1e-12)


def test_blur_refined_from_none_finds_the_independent_simulators_sigma(grid_simulator, tmp_path):
    """Data blurred by 0.6 px by benchmarks/grid/simulate.py (a Gaussian sampled on the pixels, its
    own code); ptyacc refines the blur from 0 and ends within 20 % of it, saved in results.h5 and
    run.log; the blur's variance is a parameter of its own group, in the model's state."""
    import h5py

    import ptyacc
    from ptyacc.reconstruction.groups import build_groups

    path = tmp_path / "blurred.h5"
    grid_simulator.write(str(path), grid_simulator.Setting(detector_px=32, scan_shape=(12, 12), scan_step_A=0.5,
                                                           dose=1e5, defocus_A=60.0, edge_mrad=50.0, seed=3, blur_px=0.6))
    config = ptyacc.load_config({"data": {"path": str(path)}, "optim": {"iterations": 20, "start": {"detector_blur": 0}},
                                 "output": {"dir": str(tmp_path / "out"), "figures": False},
                                 "runtime": {"progress": False}})
    run = ptyacc.reconstruct(config)
    sigma = run.model.detector_blur_px()
    assert sigma == pytest.approx(0.6, rel=0.2)
    with h5py.File(tmp_path / "out" / "results.h5") as f:
        assert f.attrs["detector_blur_px"] == pytest.approx(sigma)
        assert "detector_blur" not in f  # a quantity that saves no arrays adds no group
    assert f"detector blur: sigma {sigma:.3f} px (refined from 0 px)" in (tmp_path / "out" / "run.log").read_text()
    assert isinstance(run.model.detector_blur_variance, torch.nn.Parameter)
    assert "quantities.detector_blur.variance_px2" in run.model.state_dict()
    groups = build_groups(config, run.model, torch.device("cpu"))
    assert [g.params for g in groups if g.name == "detector_blur"] == [[run.model.detector_blur_variance]]


def test_model_without_blur_has_none_and_a_fixed_blur_is_a_buffer():
    """Off (the default): no blur in the detector, nothing in the state (the run is the same as
    before the blur existed); given but not refined: a buffer the optimizers never see; refined: a
    parameter (``quantities/detector_blur.py``, the model's quantity ``detector_blur``)."""
    import numpy as np

    from ptyacc.physics.geometry import ObjectGeometry
    from ptyacc.quantities.detector_blur import DetectorBlur
    from ptyacc.quantities.model import PtychoModel
    from ptyacc.quantities.object import ObjectTransmission
    from ptyacc.quantities.probe import Probe

    geometry = ObjectGeometry.around(np.array([[0.0, 0.0], [1.0, 1.0]]), 0.5, 8)
    probe = torch.ones(1, 8, 8, dtype=torch.complex64)

    def model_with(blur: DetectorBlur | None) -> PtychoModel:
        model = PtychoModel(ObjectTransmission(geometry.shape), Probe(probe), geometry)
        if blur is not None:
            model.quantities[blur.name] = blur
        return model

    off = model_with(None)
    assert off.detector().blur_variance_px2 is None and off.detector_blur_px() is None
    assert not any("blur" in name for name in off.state_dict())
    fixed = model_with(DetectorBlur(0.5, refined=False))
    assert float(fixed.detector().blur_variance_px2) == pytest.approx(0.25)
    assert "quantities.detector_blur.variance_px2" in dict(fixed.named_buffers())
    assert not any("blur" in name for name, _ in fixed.named_parameters())
    refined = model_with(DetectorBlur(0.0, refined=True))
    assert refined.detector_blur_px() == 0.0
    assert "quantities.detector_blur.variance_px2" in dict(refined.named_parameters())


@pytest.mark.processes
@pytest.mark.slow
def test_refined_blur_is_the_same_on_one_and_two_processes(grid_simulator, tmp_path):
    """The blur's variance is a parameter like the others: DDP sums its gradient, and 2 processes
    end where 1 does (to float rounding)."""
    import h5py
    from test_distributed import launch_configs

    grid_simulator.write(str(tmp_path / "blurred.h5"), grid_simulator.Setting(
        detector_px=32, scan_shape=(10, 10), scan_step_A=0.5, dose=1e5, defocus_A=60.0, edge_mrad=50.0, seed=4,
        blur_px=0.6))
    config = {"data": {"path": str(tmp_path / "blurred.h5")}, "runtime": {"progress": False},
              "optim": {"iterations": 4, "batch_size": 16, "start": {"detector_blur": 0}}, "output": {"figures": False}}
    outs = launch_configs(tmp_path, [(f"p{n}", config, n, []) for n in (1, 2)])
    found = {}
    for name, out in outs.items():
        with h5py.File(out / "results" / "results.h5") as f:
            found[name] = (float(f.attrs["detector_blur_px"]), f["object"][()])
    (sigma_one, object_one), (sigma_two, object_two) = found["p1"], found["p2"]
    assert sigma_one > 0.2 and abs(sigma_one - sigma_two) < 1e-4
    assert np.abs(object_one - object_two).max() < 1e-4


def test_a_resumed_run_continues_the_refined_blur(tmp_path):
    """The blur's variance and its Adam state are in the checkpoint: stopped after 3 of 6 iterations
    and resumed, the run ends where the uninterrupted one does."""
    import dataclasses

    import h5py

    import ptyacc
    from tests.conftest import tiny_config

    def config(folder):
        raw = tiny_config(folder, optim={"iterations": 6, "start": {"detector_blur": 0}},
                          model={"detector_blur_px": 0.5}, output={"dir": str(folder / "out"), "figures": False})
        loaded = ptyacc.load_config(raw)
        return dataclasses.replace(loaded, output=dataclasses.replace(loaded.output, checkpoint_every=3))

    whole = config(tmp_path / "whole")
    ptyacc.reconstruct(whole)
    cut = config(tmp_path / "cut")
    ptyacc.reconstruct(cut)
    out = tmp_path / "cut" / "out"
    (out / "checkpoints" / "ckpt_000006.pt").unlink()
    (out / "results.h5").unlink()
    ptyacc.reconstruct(cut, resume=True)
    with h5py.File(tmp_path / "whole" / "out" / "results.h5") as a, h5py.File(out / "results.h5") as b:
        assert a.attrs["detector_blur_px"] != pytest.approx(0.5, abs=1e-3)  # it moved
        assert b.attrs["detector_blur_px"] == pytest.approx(a.attrs["detector_blur_px"], abs=1e-6)
        np.testing.assert_allclose(b["object"][()], a["object"][()], atol=1e-5)
