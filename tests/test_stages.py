"""The stages of the forward chain (ProbeShift, Patches, Multislice, Detect): each adjoint is
the adjoint of its forward, <A x, y> = <x, A* y> in float64 with random complex inputs, and each
vjp is autograd's gradient of its forward."""

import pytest
import torch

from ptyacc.physics import Detect, Detector, Multislice, Patches, ProbeShift, fresnel_propagator, shift_ramp

K = 8


def random_complex(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.complex(torch.randn(*shape, generator=g, dtype=torch.float64),
                         torch.randn(*shape, generator=g, dtype=torch.float64))


def unit_ramps(batch, seed):
    """Probe-shift ramps (B, K, K) of random sub-pixel shifts: unimodular phase factors."""
    g = torch.Generator().manual_seed(seed)
    return shift_ramp(torch.rand(batch, 2, generator=g, dtype=torch.float64) - 0.5, K)


def inner(a, b):
    """<a, b> = sum conj(a) b, complex."""
    return complex(torch.vdot(a.reshape(-1), b.reshape(-1)))


def assert_adjoint(forward_x, y, x, adjoint_y):
    """<A x, y> == <x, A* y> to round-off, and not trivially (both sides far from zero)."""
    lhs, rhs = inner(forward_x, y), inner(x, adjoint_y)
    assert abs(lhs) > 1e-3
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=0)


@pytest.mark.parametrize("shifted", [False, True])
@pytest.mark.parametrize("modes", [1, 3])
def test_probe_shift_adjoint_in_the_probe(shifted, modes):
    batch = 4 if shifted else 1
    shift = ProbeShift(unit_ramps(batch, seed=1) if shifted else None)
    probe = random_complex(modes, K, K, seed=2)
    y = random_complex(batch, modes, K, K, seed=3)
    assert_adjoint(shift.forward(probe), y, probe, shift.adjoint(y))


def test_probe_shift_adjoint_in_the_ramps():
    """forward is linear in the ramps too (any complex ramps): ramps_adjoint is that map's adjoint."""
    probe = random_complex(2, K, K, seed=4)
    ramps = random_complex(5, K, K, seed=5)
    y = random_complex(5, 2, K, K, seed=6)
    shift = ProbeShift(ramps)
    assert_adjoint(shift.forward(probe), y, ramps, shift.ramps_adjoint(y, probe))


def test_probe_shift_spectrum_vjp_sums_over_chunks():
    """The chunked loss sums spectrum_vjp over chunks and transforms once: the whole batch's adjoint."""
    ramps, y = unit_ramps(6, seed=7), random_complex(6, 2, K, K, seed=8)
    parts = [ProbeShift(ramps[s]).spectrum_vjp(y[s])[0] for s in (slice(0, 4), slice(4, 6))]
    torch.testing.assert_close(torch.fft.ifft2(parts[0] + parts[1]), ProbeShift(ramps).adjoint(y),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lead", [(), (2, 3)])
def test_patches_adjoint_with_overlapping_windows(lead):
    """Extract and scatter-add with windows that overlap, repeat and touch every edge."""
    ny, nx, size = 9, 10, 4
    top_left = torch.tensor([[0, 0], [1, 2], [1, 2], [5, 6], [0, 6], [5, 0], [3, 3]])
    patches = Patches(top_left, size)
    image = random_complex(*lead, ny, nx, seed=9)
    y = random_complex(len(top_left), *lead, size, size, seed=10)
    assert_adjoint(patches.forward(image), y, image, patches.adjoint(y, image.shape))


def test_patches_add_adjoint_accumulates():
    top_left = torch.tensor([[0, 0], [2, 1]])
    patches = Patches(top_left, 3)
    y = random_complex(2, 3, 3, seed=11)
    image = random_complex(6, 5, seed=12)
    expected = image + patches.adjoint(y, image.shape)
    patches.add_adjoint(image, y)
    torch.testing.assert_close(image, expected, rtol=0, atol=1e-15)


def multislice_problem(slices, probe_modes, object_modes, shared_probe, seed, exit_ramps=False):
    batch = 3
    probes = random_complex(1 if shared_probe else batch, probe_modes, K, K, seed=seed)
    patches = random_complex(batch, object_modes, slices, K, K, seed=seed + 1)
    # any complex kernel: the adjoint of ifft2(fft2(.) H) is ifft2(fft2(.) conj(H)) for every H
    propagator = random_complex(K, K, seed=seed + 2) if slices > 1 else None
    y = random_complex(batch, probe_modes, object_modes, K, K, seed=seed + 3)
    # any complex factors of the exit waves (the descan's are unimodular ramps): the map stays linear in each input
    ramps = random_complex(batch, K, K, seed=seed + 4) if exit_ramps else None
    return Multislice(propagator, ramps), probes, patches, y


CASES = [(1, 1, 1, False), (1, 2, 3, True), (3, 1, 1, False), (3, 2, 2, False), (3, 3, 2, True)]


@pytest.mark.parametrize("slices, probe_modes, object_modes, shared_probe", CASES)
@pytest.mark.parametrize("exit_ramps", [False, True])
def test_multislice_adjoint_in_the_probes(slices, probe_modes, object_modes, shared_probe, exit_ramps):
    multislice, probes, patches, y = multislice_problem(slices, probe_modes, object_modes, shared_probe, seed=20,
                                                        exit_ramps=exit_ramps)
    waves, incident = multislice.forward_with_incident(probes, patches)
    grad_probes, _ = multislice.vjp(y, probes, patches, incident)
    assert grad_probes.shape == probes.shape
    assert_adjoint(waves, y, probes, grad_probes)


@pytest.mark.parametrize("slices, probe_modes, object_modes, shared_probe", CASES)
@pytest.mark.parametrize("exit_ramps", [False, True])
def test_multislice_adjoint_in_each_slice(slices, probe_modes, object_modes, shared_probe, exit_ramps):
    """The exit waves are linear in each slice with the others held: vjp's part for that slice is its adjoint."""
    multislice, probes, patches, y = multislice_problem(slices, probe_modes, object_modes, shared_probe, seed=30,
                                                        exit_ramps=exit_ramps)
    waves, incident = multislice.forward_with_incident(probes, patches)
    _, grad_patches = multislice.vjp(y, probes, patches, incident)
    assert grad_patches.shape == patches.shape
    for s in range(slices):
        assert_adjoint(waves, y, patches[:, :, s], grad_patches[:, :, s])


@pytest.mark.parametrize("slices, probe_modes, object_modes, shared_probe", CASES)
@pytest.mark.parametrize("exit_ramps", [False, True])
def test_multislice_vjp_is_autograds_gradient(slices, probe_modes, object_modes, shared_probe, exit_ramps):
    multislice, probes, patches, y = multislice_problem(slices, probe_modes, object_modes, shared_probe, seed=40,
                                                        exit_ramps=exit_ramps)
    probes.requires_grad_()
    patches.requires_grad_()
    waves, incident = multislice.forward_with_incident(probes, patches)
    expected = torch.autograd.grad(torch.vdot(y.reshape(-1), waves.reshape(-1)).real, (probes, patches))
    got = multislice.vjp(y, probes.detach(), patches.detach(), [w.detach() for w in incident])
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def detector_cases():
    g = torch.Generator().manual_seed(50)
    near = fresnel_propagator(K, 1.0, 1.0, 3.0, torch.complex128)
    mask = (torch.rand(K, K, generator=g) > 0.3).double()
    return {"far": Detector(), "far, mask": Detector(mask=mask), "near": Detector(propagator=near),
            "near, mask": Detector(propagator=near, mask=mask)}


@pytest.mark.parametrize("name", list(detector_cases()))
@pytest.mark.parametrize("with_ramps", [False, True])
@pytest.mark.parametrize("mode_shape", [(), (3,), (2, 3)])
def test_detect_adjoint(name, with_ramps, mode_shape):
    """Far and near field, with and without the probes' ramps folded into the near-field
    transfer, for waves with 0, 1 or 2 mode axes between batch and pixels."""
    detect = Detect(detector_cases()[name], unit_ramps(4, seed=51) if with_ramps else None)
    waves = random_complex(4, *mode_shape, K, K, seed=52)
    y = random_complex(4, *mode_shape, K, K, seed=53)
    assert_adjoint(detect.forward(waves), y, waves, detect.adjoint(y))


@pytest.mark.parametrize("mode_shape", [(), (2, 3)])
def test_detect_near_field_gradient_in_the_ramps(mode_shape):
    """The near field is linear in conj(ramps): <field, y> = <conj(ramps), conj(grad_ramps)> for
    unimodular ramps; and grad_ramps is autograd's gradient in the ramps."""
    detector = detector_cases()["near"]
    ramps = unit_ramps(4, seed=54).requires_grad_()
    waves = random_complex(4, *mode_shape, K, K, seed=55)
    y = random_complex(4, *mode_shape, K, K, seed=56)
    detect = Detect(detector, ramps.detach())
    field, spectrum = detect.forward_with_spectrum(waves)
    grad_waves, grad_ramps = detect.vjp(y, spectrum)
    torch.testing.assert_close(grad_waves, detect.adjoint(y), rtol=0, atol=0)
    assert_adjoint(field, y, ramps.detach().conj(), grad_ramps.conj())
    expected = torch.autograd.grad(torch.vdot(y.reshape(-1), Detect(detector, ramps).forward(waves).reshape(-1)).real,
                                   ramps)[0]
    torch.testing.assert_close(grad_ramps, expected, rtol=1e-12, atol=1e-12)


def test_detect_far_field_ignores_ramps():
    """In the far field the probes' shift is a phase ramp that leaves the intensity unchanged:
    the field is fft2, with or without ramps, and vjp has no ramps gradient."""
    waves = random_complex(3, 2, K, K, seed=57)
    detect = Detect(Detector(), unit_ramps(3, seed=58))
    field, spectrum = detect.forward_with_spectrum(waves)
    torch.testing.assert_close(field, torch.fft.fft2(waves, norm="ortho"), rtol=0, atol=0)
    assert spectrum is None and detect.vjp(field, spectrum)[1] is None
