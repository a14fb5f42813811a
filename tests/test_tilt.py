"""The tilted multislice propagator: its convention against a tilted plane wave computed in
NumPy, and the fused loss's gradient in the tilt and the slice thickness against autograd and
finite differences."""

import math

import numpy as np
import pytest
import torch

from ptyacc.physics import exit_waves, far_field_loss, fresnel_propagator, ptycho_loss, spatial_frequencies
from ptyacc.physics.tilt import tilted_propagator

WAVELENGTH_A = 0.0197  # 300 kV


def frequencies(k, dx_A):
    return spatial_frequencies(k, dx_A), spatial_frequencies(k, dx_A)


def test_untilted_propagator_is_fresnels():
    k, dx_A = 16, 0.2
    ky, kx = frequencies(k, dx_A)
    mine = tilted_propagator(ky, kx, WAVELENGTH_A, torch.tensor(7.0), torch.zeros(2))
    torch.testing.assert_close(mine, fresnel_propagator(k, dx_A, WAVELENGTH_A, 7.0), rtol=0, atol=2e-6)


def crystal_slices(k, slices, seed=0):
    """Slices (S, K, K) of a crystal: random smooth phase, periodic on the K x K grid, different per slice."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:k, 0:k] * (2 * np.pi / k)
    phases = []
    for _ in range(slices):
        phase = sum(rng.normal() * np.cos(a * y + b * x + rng.uniform(0, 2 * np.pi))
                    for a in range(-2, 3) for b in range(-2, 3))
        phases.append(0.1 * phase)
    return np.exp(1j * np.array(phases))


@pytest.mark.parametrize("order", [(1, 0), (0, -2), (1, 1)])
def test_tilt_convention_against_a_tilted_plane_wave(order):
    """A crystal lit by a plane wave travelling at tan(t) = (my, mx) lambda dk against its zone axis,
    computed in the crystal's frame by NumPy (wave exp(2 pi i q.r), plain Fresnel propagator),
    equals ptyacc's beam-frame multislice with the tilted propagator, up to the carrier: the
    direct beam sits at the pattern centre and the zone axis (the crystal's k = 0) at -q. The
    NumPy pattern shifted by -q is ptyacc's."""
    k, dx_A, dz_A, slices = 32, 0.2, 12.0, 6
    dk = 1 / (k * dx_A)
    my, mx = order
    tilt_mrad = np.arctan(np.array([my, mx]) * WAVELENGTH_A * dk) * 1e3  # about 3 mrad per step of the grid
    transmissions = crystal_slices(k, slices)
    # NumPy, crystal frame
    r = np.arange(k) * dx_A
    wave = np.exp(2j * np.pi * (my * dk * r[:, None] + mx * dk * r[None, :]))
    f = np.fft.fftfreq(k, dx_A)
    fresnel = np.exp(-1j * np.pi * WAVELENGTH_A * dz_A * (f[:, None] ** 2 + f[None, :] ** 2))
    for s in range(slices):
        wave = wave * transmissions[s]
        if s < slices - 1:
            wave = np.fft.ifft2(np.fft.fft2(wave) * fresnel)
    reference = np.abs(np.fft.fft2(wave, norm="ortho")) ** 2
    beam_centred = np.roll(reference, (-my, -mx), axis=(0, 1))  # the direct beam to ky = kx = 0
    # ptyacc, beam frame: a flat probe, the tilted propagator
    mine, opposite = (beam_frame_pattern(transmissions, dx_A, dz_A, sign * tilt_mrad) for sign in (1, -1))
    # compared away from the grid's edge, where the crystal frame's frequencies q + k wrap around
    # (a periodic grid's artefact, not physics): a weak crystal sends little there
    index = np.abs(np.fft.fftfreq(k, 1 / k))
    inner = np.maximum.outer(index, index) < k // 4
    np.testing.assert_allclose(mine[inner], beam_centred[inner], rtol=0, atol=1e-4 * reference.max())
    # the opposite sign of the tilt gives a clearly different pattern: the test sees the sign
    assert np.abs(opposite - beam_centred)[inner].max() > 0.02 * reference.max()


def beam_frame_pattern(transmissions, dx_A, dz_A, tilt_mrad):
    """|fft2(exit wave)|^2 (K, K) of a flat probe through ``transmissions`` (S, K, K), ptyacc's multislice."""
    k = transmissions.shape[-1]
    ky, kx = frequencies(k, dx_A)
    propagator = tilted_propagator(ky, kx, WAVELENGTH_A, torch.tensor(dz_A), torch.tensor(tilt_mrad))
    patches = torch.from_numpy(transmissions).to(torch.complex64)[None, None]  # (1, 1, S, K, K)
    exit_wave = exit_waves(torch.ones(1, 1, k, k, dtype=torch.complex64), patches, propagator)
    return (torch.fft.fft2(exit_wave, norm="ortho").abs() ** 2)[0, 0, 0].double().numpy()

def tilt_problem(per_position, seed=3, k=8, batch=5, slices=3):
    g = torch.Generator().manual_seed(seed)

    def rand_complex(*shape):
        return torch.complex(torch.randn(*shape, generator=g), torch.randn(*shape, generator=g))

    probe = rand_complex(2, k, k)
    obj = torch.polar(torch.ones(1, slices, 12, 12), 0.5 * torch.randn(1, slices, 12, 12, generator=g))
    top_left = torch.randint(0, 12 - k + 1, (batch, 2), generator=g)
    measured = 3 * torch.rand(batch, k, k, generator=g)
    tilt = (3 * torch.randn(batch if per_position else 1, 2, generator=g)).squeeze(0).double()
    return probe, obj, top_left, measured, tilt


@pytest.mark.parametrize("per_position", [False, True])
def test_fused_gradient_in_tilt_and_thickness(per_position):
    """The fused loss's gradient in the tilt and the thickness (through the propagator) equals
    autograd's through the plain chain, and central finite differences."""
    probe, obj, top_left, measured, tilt = tilt_problem(per_position)
    ky, kx = frequencies(probe.shape[-1], 0.5)
    thickness = torch.tensor(20.0, dtype=torch.float64, requires_grad=True)
    tilt.requires_grad_()

    def fused(t, dz):
        return ptycho_loss(probe, obj, top_left, None, tilted_propagator(ky, kx, WAVELENGTH_A, dz, t), measured,
                           chunk=2)

    def plain(t, dz):
        k = probe.shape[-1]
        windows = torch.stack([obj[:, :, y:y + k, x:x + k] for y, x in top_left.tolist()])
        propagators = tilted_propagator(ky, kx, WAVELENGTH_A, dz, t)
        waves = torch.cat([exit_waves(probe[None], windows[b:b + 1],
                                      propagators[b] if per_position else propagators)
                           for b in range(len(windows))])
        return far_field_loss(waves, measured)

    got = torch.autograd.grad(fused(tilt, thickness), (tilt, thickness))
    expected = torch.autograd.grad(plain(tilt, thickness), (tilt, thickness))
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=2e-4, atol=1e-4 * float(theirs.abs().max()))
    direction = torch.randn(tilt.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    h = 1e-2  # mrad and Å; the propagator is float32, so larger steps than round-off would allow
    with torch.no_grad():
        numeric_tilt = float(fused(tilt + h * direction, thickness) - fused(tilt - h * direction, thickness)) / (2 * h)
        numeric_dz = float(fused(tilt, thickness + h) - fused(tilt, thickness - h)) / (2 * h)
    assert float((got[0] * direction).sum()) == pytest.approx(numeric_tilt, rel=2e-2)
    assert float(got[1]) == pytest.approx(numeric_dz, rel=2e-2)
    assert math.isfinite(numeric_dz) and abs(numeric_tilt) > 0
