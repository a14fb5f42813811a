"""The fused value-and-gradient of one step against the autograd composition of the physics
functions it replaces, and against finite differences."""

import pytest
import torch

from ptyacc.physics import exit_waves, extract_patches, far_field_loss, ptycho_loss, shift_ramp


def random_complex(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.complex(torch.randn(*shape, generator=g, dtype=torch.float64),
                         torch.randn(*shape, generator=g, dtype=torch.float64))


def problem(slices, probe_modes, object_modes, shifted, seed=0, k=6, batch=5):
    g = torch.Generator().manual_seed(seed)
    probe = random_complex(probe_modes, k, k, seed=seed + 1).requires_grad_()
    obj = random_complex(object_modes, slices, 10, 11, seed=seed + 2).requires_grad_()
    top_left = torch.stack([torch.randint(0, 5, (batch,), generator=g), torch.randint(0, 6, (batch,), generator=g)], 1)
    fraction = (torch.rand(batch, 2, generator=g, dtype=torch.float64) - 0.5).requires_grad_()
    propagator = torch.exp(2j * torch.pi * torch.rand(k, k, generator=g, dtype=torch.float64)) if slices > 1 else None
    measured = 5 * torch.rand(batch, k, k, generator=g, dtype=torch.float64)
    return probe, obj, top_left, fraction if shifted else None, propagator, measured


def reference_loss(probe, obj, top_left, fraction, propagator, measured, kind):
    """The same loss built from the separately tested physics functions, differentiated by autograd."""
    k = probe.shape[-1]
    probes = probe[None]
    if fraction is not None:
        probes = torch.fft.ifft2(torch.fft.fft2(probe)[None] * shift_ramp(fraction, k)[:, None])
    return far_field_loss(exit_waves(probes, extract_patches(obj, top_left, k), propagator), measured, kind)


@pytest.mark.parametrize("kind", ["amplitude", "poisson"])
@pytest.mark.parametrize("slices, probe_modes, object_modes", [(1, 1, 1), (3, 2, 2), (2, 3, 1)])
@pytest.mark.parametrize("shifted", [False, True])
@pytest.mark.parametrize("chunk", [1, 2, 64])
def test_fused_matches_autograd_reference(kind, slices, probe_modes, object_modes, shifted, chunk):
    """Value and gradients (probe, object, sub-pixel shifts) equal autograd's to round-off,
    for any chunking of the batch."""
    probe, obj, top_left, fraction, propagator, measured = problem(slices, probe_modes, object_modes, shifted)
    inputs = (probe, obj) + ((fraction,) if shifted else ())
    ramps = shift_ramp(fraction, probe.shape[-1]) if shifted else None
    fused = ptycho_loss(probe, obj, top_left, ramps, propagator, measured, kind, chunk)
    fused_grads = torch.autograd.grad(2.5 * fused, inputs)  # a scaled loss scales the gradients
    reference = reference_loss(probe, obj, top_left, fraction, propagator, measured, kind)
    reference_grads = torch.autograd.grad(2.5 * reference, inputs)
    assert float(fused.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
    for mine, theirs in zip(fused_grads, reference_grads, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)



@pytest.mark.parametrize("kind", ["amplitude", "poisson"])
@pytest.mark.parametrize("path", ["eager", "blur", pytest.param("compiled", marks=pytest.mark.processes)])  # compiles: g++
def test_a_given_floor_replaces_the_kinds_own(kind, path):
    """``floor`` (a run's amplitude floor in its patterns' units) is what the loss adds to the model intensity, on
    the eager field pass, the detector blur's path and the compiled field pass alike: value against NumPy, gradients
    against autograd's reference given the same floor; and it matters (the kind's own floor gives another value)."""
    import numpy as np

    from ptyacc.physics import Detector
    from ptyacc.physics.chain import loss_floor
    from ptyacc.physics.fused import CompiledTerms

    probe, obj, top_left, _, propagator, measured = problem(2, 2, 1, False, seed=6)
    floor = 0.7
    detector = Detector(blur_variance_px2=torch.tensor(0.0, dtype=torch.float64)) if path == "blur" else None
    messages = []
    field_terms = CompiledTerms(report=messages.append).field if path == "compiled" else None
    fused = ptycho_loss(probe, obj, top_left, None, propagator, measured, kind, detector=detector,
                        field_terms=field_terms, floor=floor)
    if path == "compiled":
        assert messages and "compiled" in messages[0], messages
    waves = exit_waves(probe[None], extract_patches(obj, top_left, probe.shape[-1]), propagator)
    reference = far_field_loss(waves, measured, kind, floor=floor)
    intensity = (torch.fft.fft2(waves.detach(), norm="ortho").abs() ** 2).sum(dim=(1, 2)).numpy() + floor
    m = measured.numpy()
    expected = (((np.sqrt(intensity) - np.sqrt(m)) ** 2).sum() if kind == "amplitude"
                else (intensity - m * np.log(intensity)).sum())
    assert float(fused.detach()) == pytest.approx(expected, rel=1e-10)
    assert float(reference.detach()) == pytest.approx(expected, rel=1e-10)
    for mine, theirs in zip(torch.autograd.grad(fused, (probe, obj)), torch.autograd.grad(reference, (probe, obj)),
                            strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-9, atol=1e-10)
    own = ptycho_loss(probe, obj, top_left, None, propagator, measured, kind, detector=detector)
    assert loss_floor(kind) != floor and abs(float(own) - expected) > 1e-3 * abs(expected)

def test_fused_gradient_matches_finite_differences():
    """Directional derivative along a random direction of every input, central differences."""
    probe, obj, top_left, fraction, propagator, measured = problem(2, 2, 1, True, seed=4)
    ramps = lambda f: shift_ramp(f, probe.shape[-1])  # noqa: E731
    loss = lambda p, o, f: ptycho_loss(p, o, top_left, ramps(f), propagator, measured, "amplitude")  # noqa: E731
    grads = torch.autograd.grad(loss(probe, obj, fraction), (probe, obj, fraction))
    directions = [random_complex(*probe.shape, seed=7), random_complex(*obj.shape, seed=8),
                  torch.randn(fraction.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))]
    h = 1e-6
    with torch.no_grad():
        plus = loss(*(x + h * d for x, d in zip((probe, obj, fraction), directions, strict=True)))
        minus = loss(*(x - h * d for x, d in zip((probe, obj, fraction), directions, strict=True)))
    numeric = float(plus - minus) / (2 * h)
    # PyTorch's gradient of a real loss in a complex input z is dL/dRe z + i dL/dIm z
    analytic = sum(float((g.conj() * d).real.sum()) for g, d in zip(grads, directions, strict=True))
    assert analytic == pytest.approx(numeric, rel=1e-6)


@pytest.mark.parametrize("kind", ["amplitude", "poisson"])
@pytest.mark.parametrize("near_field", [False, True])
def test_fused_with_detector_weights_background_and_mask(kind, near_field):
    """Near-field detection (the image shifted back by the probe's sub-pixel shift), a bad-pixel
    mask, per-pattern weights and a detector background: value and every gradient (probe,
    object, shifts, weights, background) equal autograd's."""
    from ptyacc.physics import Detector

    probe, obj, top_left, fraction, propagator, measured = problem(2, 2, 1, True, seed=5)
    k, batch = probe.shape[-1], top_left.shape[0]
    g = torch.Generator().manual_seed(11)
    weights = (1 + 0.2 * torch.rand(batch, generator=g, dtype=torch.float64)).requires_grad_()
    background = (0.3 * torch.rand(k, k, generator=g, dtype=torch.float64)).requires_grad_()
    mask = (torch.rand(k, k, generator=g) > 0.2).double()
    near = torch.exp(2j * torch.pi * torch.rand(k, k, generator=g, dtype=torch.float64)) if near_field else None
    detector = Detector(propagator=near, mask=mask)
    inputs = (probe, obj, fraction, weights, background)
    fused = ptycho_loss(probe, obj, top_left, shift_ramp(fraction, k), propagator, measured, kind, 2, detector,
                        weights, background)
    fused_grads = torch.autograd.grad(fused, inputs)
    probes = torch.fft.ifft2(torch.fft.fft2(probe)[None] * shift_ramp(fraction, k)[:, None])
    reference = far_field_loss(exit_waves(probes, extract_patches(obj, top_left, k), propagator), measured, kind,
                               detector, weights, background, ramps=shift_ramp(fraction, k))
    reference_grads = torch.autograd.grad(reference, inputs)
    assert float(fused.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
    for mine, theirs in zip(fused_grads, reference_grads, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", ["amplitude", "poisson"])
@pytest.mark.parametrize("slices, probe_modes", [(1, 1), (3, 2)])
@pytest.mark.parametrize("shifted", [False, True])
@pytest.mark.parametrize("chunk", [1, 2, 64])
def test_fused_probe_per_position(kind, slices, probe_modes, shifted, chunk):
    """A probe per position (B, P, K, K), each its own: value and gradients (each position's
    probe, object, shifts) equal autograd's through the reference, and a probe repeated for
    every position gives the shared probe's loss, its per-position gradients summing to the
    shared probe's gradient."""
    probe, obj, top_left, fraction, propagator, measured = problem(slices, probe_modes, 2, shifted, seed=3)
    batch, k = top_left.shape[0], probe.shape[-1]
    own = random_complex(batch, probe_modes, k, k, seed=21).requires_grad_()
    ramps = shift_ramp(fraction, k) if shifted else None
    inputs = (own, obj) + ((fraction,) if shifted else ())
    fused = ptycho_loss(own, obj, top_left, ramps, propagator, measured, kind, chunk)
    fused_grads = torch.autograd.grad(fused, inputs)
    probes = torch.fft.ifft2(torch.fft.fft2(own) * shift_ramp(fraction, k)[:, None]) if shifted else own
    reference = far_field_loss(exit_waves(probes, extract_patches(obj, top_left, k), propagator), measured, kind)
    reference_grads = torch.autograd.grad(reference, inputs)
    assert float(fused.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
    for mine, theirs in zip(fused_grads, reference_grads, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)
    repeated = probe.detach().expand(batch, *probe.shape).clone().requires_grad_()
    ramps = shift_ramp(fraction.detach(), k) if shifted else None
    shared = ptycho_loss(probe, obj, top_left, ramps, propagator, measured, kind, chunk)
    per = ptycho_loss(repeated, obj, top_left, ramps, propagator, measured, kind, chunk)
    assert float(per.detach()) == pytest.approx(float(shared.detach()), rel=1e-12)
    torch.testing.assert_close(torch.autograd.grad(per, repeated)[0].sum(0), torch.autograd.grad(shared, probe)[0],
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", ["amplitude", "poisson"])
@pytest.mark.parametrize("slices, probe_modes, object_modes", [(1, 1, 1), (3, 2, 2), (2, 3, 1)])
@pytest.mark.parametrize("shifted", [False, True])
@pytest.mark.parametrize("per_position", [False, True])
def test_fused_with_exit_ramps(kind, slices, probe_modes, object_modes, shifted, per_position):
    """The descan's ramps (B, K, K) on the exit waves (folded into the last slice's windows by ``Multislice``):
    value and gradients equal autograd's through the exit waves multiplied by them afterwards, for any chunking."""
    probe, obj, top_left, fraction, propagator, measured = problem(slices, probe_modes, object_modes, shifted, seed=3)
    exit_ramps = torch.exp(2j * torch.pi * torch.rand(5, 6, 6, generator=torch.Generator().manual_seed(5),
                                                      dtype=torch.float64))
    if per_position:  # a probe per position (B, P, K, K), as probe_variation makes
        probe = (probe.detach() * random_complex(5, 1, 6, 6, seed=11)).requires_grad_()
    inputs = (probe, obj) + ((fraction,) if shifted else ())
    k = probe.shape[-1]
    ramps = lambda: shift_ramp(fraction, k) if shifted else None  # noqa: E731  (a graph for each gradient)
    probes = probe if per_position else probe[None]
    if shifted:
        probes = torch.fft.ifft2(torch.fft.fft2(probes) * ramps()[:, None])
    waves = exit_waves(probes, extract_patches(obj, top_left, k), propagator) * exit_ramps[:, None, None]
    reference = far_field_loss(waves, measured, kind)
    reference_grads = torch.autograd.grad(reference, inputs)
    plain = float(far_field_loss(waves.detach() / exit_ramps[:, None, None], measured, kind))
    assert abs(plain - float(reference.detach())) > 1e-5 * plain  # the ramps change the loss
    for chunk in (1, 2, 64):
        fused = ptycho_loss(probe, obj, top_left, ramps(), propagator, measured, kind, chunk, exit_ramps=exit_ramps)
        assert float(fused.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
        for mine, theirs in zip(torch.autograd.grad(fused, inputs), reference_grads, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("device", "memory_gib", "expected_mib"), [
    ("cpu", None, 8), ("cuda", 140, 1024), ("cuda:1", 16, 256), ("cuda", 2, 64), ("mps", 8, 128)])
def test_a_chunk_is_cache_sized_on_a_cpu_and_a_64th_of_an_accelerators_memory(monkeypatch, device, memory_gib,
                                                                            expected_mib):
    """On a CPU a chunk's waves stay in cache (8 MiB); on a GPU each chunk launches every kernel of the step
    once, so a chunk there is a 64th of the device's memory, between 64 MiB and 1 GiB."""
    from ptyacc.physics import fused

    monkeypatch.setattr(fused, "device_memory_bytes", lambda d: int(memory_gib * 2**30))
    assert fused.chunk_bytes(torch.device(device)) == expected_mib * 2**20


def test_the_default_chunk_takes_the_probes_device_bytes(monkeypatch):
    """Without ``chunk`` the batch is cut where a chunk's waves (modes x K^2 complex each) fill the device's bytes."""
    from ptyacc.physics import fused

    probe, obj, top_left, _, propagator, measured = problem(2, 3, 1, False, batch=7)
    seen = []
    monkeypatch.setattr(fused, "chunk_bytes", lambda device: seen.append(device) or 2 * 3 * 36 * 16 + 5)
    apply = fused._PtychoLoss.apply
    chunks = []
    monkeypatch.setattr(fused._PtychoLoss, "apply", lambda *a: chunks.append(a[9]) or apply(*a))
    fused.ptycho_loss(probe, obj, top_left, None, propagator, measured, "amplitude")
    assert seen == [probe.device] and chunks == [2]
